"""The label store: every human answer as one committed row of a SQLite database in the project.

`labels.sqlite` sits beside `project.json`. It runs in WAL mode, so raters in several processes
write at once (each answer is one short transaction; a writer waits for another's commit instead
of failing) and a reader never blocks a writer. A row is committed before the call returns, so a
process killed at any moment loses at most the answer it had not yet been given.

History is never rewritten. An answer, an undo, a redo and a skip are each a new row; an undo or a
redo names the row it supersedes and carries the answer the item has after it. A rater's current
answer to an item is the newest of their answer, undo and redo rows for it (skips record only that
the item was passed over); an undo that leaves the item unanswered carries no answer.

A file that is not a label store, or a damaged one, is reported and never written to; a store made
by a newer version of the workbench (a higher schema version) is refused rather than read wrongly.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from workbench.core.errors import WorkbenchError

FILE = "labels.sqlite"
FORMAT = "dl-workbench-labels"
SCHEMA_VERSION = 1
ACTIONS = ("answer", "undo", "redo", "skip")
MODES = ("blind", "review")
#: How long a writer waits for another process's transaction before giving up (ms).
BUSY_TIMEOUT_MS = 10_000

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE answers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    testset TEXT NOT NULL,
    input_id TEXT NOT NULL,
    rater TEXT NOT NULL,
    answer TEXT,
    seconds REAL,
    session TEXT NOT NULL,
    created TEXT NOT NULL,
    app_version TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('blind', 'review')),
    check_class INTEGER,
    action TEXT NOT NULL CHECK (action IN ('answer', 'undo', 'redo', 'skip')),
    supersedes INTEGER REFERENCES answers(id)
);
CREATE INDEX answers_item ON answers (testset, rater, input_id);
CREATE TABLE studies (testset TEXT PRIMARY KEY, settings TEXT NOT NULL);
"""
_COLUMNS = ("id", "testset", "input_id", "rater", "answer", "seconds", "session", "created", "app_version", "mode",
            "check_class", "action", "supersedes")


@dataclass(frozen=True)
class AnswerRow:
    """One row of the store: who answered what about which input, when, how fast and in which mode."""

    id: int
    testset: str
    input_id: str
    rater: str
    answer: str | None  # a class index as text, "invalid" or "different"; None: unanswered (an undo, a skip)
    seconds: float | None
    session: str
    created: str
    app_version: str
    mode: str
    check_class: int | None  # an attention check's known class; None for a study item
    action: str
    supersedes: int | None

    @property
    def is_check(self) -> bool:
        return self.check_class is not None


def _app_version() -> str:
    import workbench

    return workbench.__version__


def _damaged(path: Path, exc: Exception) -> WorkbenchError:
    return WorkbenchError(f"The label store {path} is damaged or is not a label store ({exc}). It was left untouched.",
                          "Copy it somewhere safe, then restore it from a backup or move it out of the project "
                          "to start a new one; no answer is written until then.")


class LabelStore:
    """The answers of one project (`open_store(project)`), read and written by any number of processes."""

    def __init__(self, path: str | Path, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        # an empty file holds no answers (SQLite makes one before its first write): it is started afresh
        exists = self.path.exists() and self.path.stat().st_size > 0
        if not exists and read_only:
            self._db = None  # nothing labelled yet; reads give nothing
            return
        if exists:
            _check_header(self.path)
        uri = f"file:{self.path}?mode={'ro' if read_only else 'rwc'}"
        try:
            self._db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000,
                                       check_same_thread=False)
        except sqlite3.Error as exc:
            raise WorkbenchError(f"Cannot open the label store {self.path}: {exc}.",
                                 "Check that the project folder can be read and written.") from exc
        try:
            made = self._check_existing() if exists else False
            if not made and read_only:
                self._db.close()
                self._db = None  # an empty database: nothing labelled yet
                return
            if not read_only:
                self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                self._wal()
                self._db.execute("PRAGMA synchronous = FULL")  # an answer survives a power cut too
                if not made:
                    self._create()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise _damaged(self.path, exc) from exc

    # --- opening ----------------------------------------------------------------------------------------

    def _check_existing(self) -> bool:
        """Refuse a damaged file, another kind of database, or a newer schema, before writing anything.
        False for a database with nothing in it (another process is making the store): it is started afresh."""
        ok = self._db.execute("PRAGMA quick_check").fetchone()
        if not ok or ok[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check: {ok[0] if ok else 'no answer'}")
        if self._db.execute("SELECT 1 FROM sqlite_master").fetchone() is None:
            return False
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"meta", "answers", "studies"} <= tables:
            raise sqlite3.DatabaseError("it holds no label-store tables")
        meta = dict(self._db.execute("SELECT key, value FROM meta"))
        if meta.get("format") != FORMAT:
            raise sqlite3.DatabaseError("its format mark is missing")
        try:
            version = int(meta.get("schema_version", "0"))
        except ValueError:  # a damaged mark, not a newer store
            raise sqlite3.DatabaseError(f"its schema version {meta['schema_version']!r} is not a number") from None
        if version > SCHEMA_VERSION:
            self._db.close()
            raise WorkbenchError(f"The label store {self.path} has schema version {version}; this workbench reads "
                                 f"up to {SCHEMA_VERSION}.", "Open the project with a newer version of the workbench.")
        return True

    def _wal(self) -> None:
        """Switch to WAL mode; SQLite answers "locked" without waiting while another process switches it too."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _create(self) -> None:
        with self._transaction():
            # another process may have made the store since we looked; under the write lock the answer is final
            made_elsewhere = self._db.execute("SELECT 1 FROM sqlite_master").fetchone() is not None
            if not made_elsewhere:
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    self._db.execute(statement)
                self._db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                                     [("format", FORMAT), ("schema_version", str(SCHEMA_VERSION)),
                                      ("created_by", _app_version())])
        if made_elsewhere:
            self._check_existing()

    @contextmanager
    def _transaction(self):
        self._db.execute("BEGIN IMMEDIATE")  # the write lock from the start: no other writer slips in between
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- writing ----------------------------------------------------------------------------------------

    def _writable(self):
        if self.read_only or self._db is None:
            raise WorkbenchError("This project is open read-only, so answers cannot be saved.",
                                 "Open a copy of the project you can write to.")
        return self._db

    def _insert(self, testset: str, input_id: str, rater: str, answer: str | None, *, action: str, session: str,
                mode: str, seconds: float | None = None, check_class: int | None = None,
                supersedes: int | None = None) -> AnswerRow:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if not rater.strip():
            raise WorkbenchError("No rater name was given.", "Enter your name or initials before labelling.")
        created = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        values = (testset, input_id, rater, answer, seconds, session, created, _app_version(), mode,
                  None if check_class is None else int(check_class), action, supersedes)
        try:
            cursor = self._writable().execute(
                f"INSERT INTO answers ({', '.join(_COLUMNS[1:])}) VALUES ({', '.join('?' * len(values))})", values)
        except sqlite3.OperationalError as exc:
            raise WorkbenchError(f"The answer could not be saved: {exc}.",
                                 "Another program may hold the label store; try again.") from exc
        return AnswerRow(cursor.lastrowid, *values)

    def answer(self, testset: str, input_id: str, rater: str, answer: str, *, session: str, mode: str = "blind",
               seconds: float | None = None, check_class: int | None = None) -> AnswerRow:
        """Commit one answer (it replaces the rater's earlier answer to the item, which stays in the history)."""
        return self._insert(testset, input_id, rater, answer, action="answer", session=session, mode=mode,
                            seconds=seconds, check_class=check_class)

    def skip(self, testset: str, input_id: str, rater: str, *, session: str, mode: str = "blind",
             check_class: int | None = None) -> AnswerRow:
        """Record that the rater passed over the item (it comes back at the end of their queue)."""
        return self._insert(testset, input_id, rater, None, action="skip", session=session, mode=mode,
                            check_class=check_class)

    def undo(self, row: AnswerRow, *, session: str) -> AnswerRow:
        """Supersede an answer or redo row: the item gets back the answer it had before `row`."""
        if row.action not in ("answer", "redo"):
            raise ValueError(f"only an answer or a redo can be undone, not a {row.action}")
        before = self._writable().execute(
            "SELECT answer FROM answers WHERE testset = ? AND rater = ? AND input_id = ? AND id < ? "
            "AND action != 'skip' ORDER BY id DESC LIMIT 1", (row.testset, row.rater, row.input_id, row.id)).fetchone()
        return self._insert(row.testset, row.input_id, row.rater, before[0] if before else None, action="undo",
                            session=session, mode=row.mode, check_class=row.check_class, supersedes=row.id)

    def redo(self, undo_row: AnswerRow, *, session: str) -> AnswerRow:
        """Supersede an undo: the item gets back the answer that was undone."""
        if undo_row.action != "undo":
            raise ValueError(f"only an undo can be redone, not a {undo_row.action}")
        undone = self.row(undo_row.supersedes)
        return self._insert(undo_row.testset, undo_row.input_id, undo_row.rater, undone.answer, action="redo",
                            session=session, mode=undone.mode, seconds=undone.seconds,
                            check_class=undone.check_class, supersedes=undo_row.id)

    def update_study(self, testset: str, changes: dict) -> dict:
        """Change some of a study's settings (its seed, check rate, key map, …), shared by all its raters: read,
        merged and written under the write lock, so two raters changing different settings keep both."""
        db = self._writable()
        with self._transaction():
            row = db.execute("SELECT settings FROM studies WHERE testset = ?", (testset,)).fetchone()
            settings = {**(json.loads(row[0]) if row else {}), **changes}
            db.execute("INSERT INTO studies (testset, settings) VALUES (?, ?) ON CONFLICT (testset) "
                       "DO UPDATE SET settings = excluded.settings", (testset, json.dumps(settings)))
        return settings

    # --- reading ----------------------------------------------------------------------------------------

    def _select(self, where: str = "", args: tuple = ()) -> list[AnswerRow]:
        if self._db is None:
            return []
        query = f"SELECT {', '.join(_COLUMNS)} FROM answers {where} ORDER BY id"
        return [AnswerRow(*r) for r in self._db.execute(query, args)]

    def row(self, row_id: int) -> AnswerRow:
        rows = self._select("WHERE id = ?", (row_id,))
        if not rows:
            raise KeyError(row_id)
        return rows[0]

    def history(self, testset: str | None = None, rater: str | None = None) -> list[AnswerRow]:
        """Every row, oldest first (of one test set and rater when given)."""
        clauses, args = [], []
        for column, value in (("testset", testset), ("rater", rater)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        return self._select(f"WHERE {' AND '.join(clauses)}" if clauses else "", tuple(args))

    def current(self, testset: str, rater: str | None = None) -> list[AnswerRow]:
        """Each rater's current answer to each item of `testset` they have answered (rows whose answer stands)."""
        args: tuple = (testset,) if rater is None else (testset, rater)
        newest = ("SELECT MAX(id) FROM answers WHERE testset = ? " + ("" if rater is None else "AND rater = ? ")
                  + "AND action != 'skip' GROUP BY rater, input_id")
        return [r for r in self._select(f"WHERE id IN ({newest})", args) if r.answer is not None]

    def raters(self, testset: str) -> list[str]:
        if self._db is None:
            return []
        return [r[0] for r in self._db.execute("SELECT rater FROM answers WHERE testset = ? GROUP BY rater "
                                               "ORDER BY MIN(id)", (testset,))]

    def labelled_testsets(self) -> list[str]:
        """The test sets with at least one answer to one of their items (skips and attention checks aside), in
        the order they were first labelled."""
        if self._db is None:
            return []
        return [r[0] for r in self._db.execute(
            "SELECT testset FROM answers WHERE action = 'answer' AND check_class IS NULL GROUP BY testset "
            "ORDER BY MIN(id)")]

    def study(self, testset: str) -> dict:
        if self._db is None:
            return {}
        row = self._db.execute("SELECT settings FROM studies WHERE testset = ?", (testset,)).fetchone()
        return json.loads(row[0]) if row else {}


def _check_header(path: Path) -> None:
    """An existing file must start as a SQLite database does; anything else is not opened by SQLite at all."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError as exc:
        raise WorkbenchError(f"Cannot read the label store {path}: {exc.strerror}.",
                             "Check the file's permissions.") from exc
    if head and head != b"SQLite format 3\x00":
        raise _damaged(path, ValueError("it does not start with a SQLite header"))


def store_path(project) -> Path:
    return Path(project.folder) / FILE


def open_store(project) -> LabelStore:
    """The project's label store for writing (created when missing)."""
    return LabelStore(store_path(project), read_only=bool(getattr(project, "read_only", False)))


def read_store(project) -> LabelStore:
    """The project's label store for reading only: a missing store reads as empty, and nothing is created."""
    return LabelStore(store_path(project), read_only=True)
