"""The label store: one committed row per answer, history never rewritten, undo and redo as rows, answers that
survive SIGKILL, several processes writing at once, and damaged or foreign files refused without being touched."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.labeling import label_store
from workbench.core.labeling.label_store import (
    FILE,
    SCHEMA_VERSION,
    LabelStore,
    open_store,
    store_path,
)

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

# A rater labelling a study in a loop: every committed row id is printed as soon as the call returns.
LABELLER = textwrap.dedent("""
    import sys
    import numpy as np
    from workbench.core.labeling.answers import options_for
    from workbench.core.labeling.label_store import LabelStore
    from workbench.core.labeling.session import LabellingSession
    from workbench.core.labeling.study import StudyItem

    path, rater, n, forever = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "forever"
    items = [StudyItem(f"g{i}", str(i % 10), i, "gen", "vae", "small") for i in range(n)]
    images = np.zeros((n, 1, 4, 4), np.float32)
    store = LabelStore(path)
    session = LabellingSession(store, "gen", items, images, options_for([str(i) for i in range(10)]), rater,
                               check_every=0)
    print("ready", flush=True)
    step = 0
    while forever or not session.done:
        if session.done:
            session.go(step % len(session.queue))  # another pass: it labels until it is killed
        row = session.answer(str(session.entry.index % 10) if session.entry.index % 7 else "invalid")
        print(row.id, flush=True)
        step += 1
    print("done", flush=True)
""")


def answer(store: LabelStore, input_id: str, value: str, rater: str = "a", testset: str = "gen"):
    return store.answer(testset, input_id, rater, value, session="s1")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def companions(path: Path) -> list[Path]:
    return [p for p in (Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")) if p.exists()]


def start(path: Path, rater: str, n: int, forever: bool = False) -> subprocess.Popen:
    args = [str(path), rater, str(n), "forever" if forever else "once"]
    return subprocess.Popen([sys.executable, "-c", LABELLER, *args], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# ---------------------------------------------------------------- rows, current answers, history


def test_each_answer_is_one_committed_row_seen_by_another_connection(tmp_path):
    path = tmp_path / FILE
    with LabelStore(path) as writer, LabelStore(path, read_only=True) as reader:
        first = answer(writer, "x1", "3")
        assert [r.id for r in reader.history()] == [first.id]
        # a plain sqlite3 connection sees it too: nothing waits in an open transaction
        raw = sqlite3.connect(path)
        assert raw.execute("SELECT COUNT(*) FROM answers").fetchone() == (1,)
        second = answer(writer, "x2", "invalid", rater="b")
        assert raw.execute("SELECT COUNT(*) FROM answers").fetchone() == (2,)
        raw.close()
        assert [r.id for r in reader.history()] == [first.id, second.id]
        row = reader.row(second.id)
        assert (row.testset, row.input_id, row.rater, row.answer, row.action, row.mode) == \
            ("gen", "x2", "b", "invalid", "answer", "blind")
        assert row.app_version and row.created and row.session == "s1"


def test_current_is_the_newest_answer_per_rater_and_item_and_history_keeps_every_row(tmp_path):
    with LabelStore(tmp_path / FILE) as store:
        answer(store, "x1", "3")
        answer(store, "x1", "5")
        answer(store, "x1", "7", rater="b")
        answer(store, "x2", "invalid")
        store.skip("gen", "x3", "a", session="s1")
        answer(store, "x1", "1", testset="other")
        current = {(r.rater, r.input_id): r.answer for r in store.current("gen")}
        assert current == {("a", "x1"): "5", ("b", "x1"): "7", ("a", "x2"): "invalid"}
        assert {r.input_id: r.answer for r in store.current("gen", "b")} == {"x1": "7"}
        assert [r.answer for r in store.history("gen", "a")] == ["3", "5", "invalid", None]
        assert len(store.history()) == 6
        assert store.raters("gen") == ["a", "b"]
        assert store.labelled_testsets() == ["gen", "other"]


def test_a_skip_after_an_answer_leaves_the_answer_standing(tmp_path):
    with LabelStore(tmp_path / FILE) as store:
        answer(store, "x1", "3")
        store.skip("gen", "x1", "a", session="s1")
        assert [r.answer for r in store.current("gen")] == ["3"]


def test_undo_supersedes_with_a_new_row_and_restores_nothing_for_a_first_answer(tmp_path):
    with LabelStore(tmp_path / FILE) as store:
        first = answer(store, "x1", "3")
        undo = store.undo(first, session="s2")
        assert (undo.action, undo.supersedes, undo.answer, undo.session) == ("undo", first.id, None, "s2")
        assert store.current("gen") == []
        assert [r.id for r in store.history()] == [first.id, undo.id]  # nothing deleted
        assert store.row(first.id).answer == "3"
        redo = store.redo(undo, session="s2")
        assert (redo.action, redo.supersedes, redo.answer) == ("redo", undo.id, "3")
        assert [r.answer for r in store.current("gen")] == ["3"]
        assert len(store.history()) == 3


def test_undo_of_a_changed_answer_gives_back_the_first_and_redo_the_second(tmp_path):
    with LabelStore(tmp_path / FILE) as store:
        answer(store, "x1", "3")
        answer(store, "x2", "4")  # another item between them must not matter
        changed = answer(store, "x1", "invalid")
        undo = store.undo(changed, session="s1")
        assert undo.answer == "3"
        assert {r.input_id: r.answer for r in store.current("gen")} == {"x1": "3", "x2": "4"}
        redo = store.redo(undo, session="s1")
        assert {r.input_id: r.answer for r in store.current("gen")} == {"x1": "invalid", "x2": "4"}
        # undoing the redo goes back to what the undo had restored
        assert store.undo(redo, session="s1").answer == "3"
        assert len(store.history()) == 6


def test_undo_ignores_skips_and_other_raters(tmp_path):
    with LabelStore(tmp_path / FILE) as store:
        answer(store, "x1", "2")
        answer(store, "x1", "9", rater="b")
        store.skip("gen", "x1", "a", session="s1")
        again = answer(store, "x1", "5")
        assert store.undo(again, session="s1").answer == "2"
        assert {(r.rater, r.answer) for r in store.current("gen")} == {("a", "2"), ("b", "9")}


def test_only_answers_and_redos_can_be_undone_and_only_undos_redone(tmp_path):
    with LabelStore(tmp_path / FILE) as store:
        row = answer(store, "x1", "1")
        skip = store.skip("gen", "x2", "a", session="s1")
        with pytest.raises(ValueError):
            store.undo(skip, session="s1")
        with pytest.raises(ValueError):
            store.redo(row, session="s1")
        with pytest.raises(ValueError):
            store.answer("gen", "x1", "a", "1", session="s1", mode="peek")
        with pytest.raises(WorkbenchError, match="rater"):
            store.answer("gen", "x1", "  ", "1", session="s1")


def test_study_settings_are_kept_and_merged(tmp_path):
    path = tmp_path / FILE
    with LabelStore(path) as store, LabelStore(path) as other:
        assert store.study("gen") == {}
        store.update_study("gen", {"seed": 3, "keymap": {"invalid": "Q"}})
        other.update_study("gen", {"seed": 4, "check_every": 5})  # another rater's change keeps the key map
    with LabelStore(path, read_only=True) as store:
        assert store.study("gen") == {"seed": 4, "check_every": 5, "keymap": {"invalid": "Q"}}


def test_a_read_only_store_refuses_to_write(tmp_path):
    path = tmp_path / FILE
    LabelStore(path).close()
    with LabelStore(path, read_only=True) as store, pytest.raises(WorkbenchError, match="read-only"):
        answer(store, "x1", "1")


def test_read_only_opening_of_a_project_without_a_store_gives_no_rows_and_makes_no_file(tmp_path):
    project = SimpleNamespace(folder=tmp_path, read_only=True)
    with open_store(project) as store:
        assert store.history() == [] and store.current("gen") == [] and store.raters("gen") == []
        assert store.labelled_testsets() == [] and store.study("gen") == {}
        with pytest.raises(WorkbenchError, match="read-only"):
            answer(store, "x1", "1")
    assert not store_path(project).exists()
    assert list(tmp_path.iterdir()) == []


def test_a_writable_project_gets_its_store_beside_project_json(tmp_path):
    project = SimpleNamespace(folder=tmp_path, read_only=False)
    with open_store(project) as store:
        answer(store, "x1", "1")
    assert store_path(project) == tmp_path / "labels.sqlite"
    with open_store(SimpleNamespace(folder=tmp_path, read_only=True)) as store:
        assert [r.answer for r in store.current("gen")] == ["1"]


# ---------------------------------------------------------------- processes


def test_a_labeller_killed_with_sigkill_loses_no_committed_answer(tmp_path):
    path = tmp_path / FILE
    labeller = start(path, "a", 500, forever=True)  # still answering whenever the kill comes
    printed = []
    try:
        assert labeller.stdout.readline().strip() == "ready", labeller.stderr.read()
        while len(printed) < 40:
            line = labeller.stdout.readline().strip()
            assert line.isdigit(), (line, labeller.stderr.read() if not line else "")
            printed.append(int(line))
    finally:
        labeller.send_signal(signal.SIGKILL)
        labeller.wait(timeout=30)
    assert labeller.returncode == -signal.SIGKILL
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with LabelStore(path) as store:
        history = store.history()
        ids = [r.id for r in history]
        assert set(printed) <= set(ids)
        assert ids == list(range(1, len(ids) + 1))  # no gap, no half-written row
        assert all(r.answer is not None and r.seconds is not None for r in history)
        current = {r.input_id: r.answer for r in store.current("gen", "a")}
        assert len(current) == min(len(ids), 500)
        assert all(a == ("invalid" if int(i[1:]) % 7 == 0 else str(int(i[1:]) % 10)) for i, a in current.items())
        # the store takes answers again after the kill
        answer(store, "after-kill", "1")


def test_two_raters_in_two_processes_at_once_lose_nothing(tmp_path):
    path = tmp_path / FILE
    LabelStore(path).close()
    procs = [start(path, rater, 300) for rater in ("a", "b")]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
        assert out.split()[-1] == "done"
    printed = [int(x) for out, _ in outputs for x in out.split() if x.isdigit()]
    assert len(printed) == 600 and len(set(printed)) == 600
    with LabelStore(path, read_only=True) as store:
        history = store.history("gen")
        assert len(history) == 600 and len({r.id for r in history}) == 600
        assert {r.id for r in history} == set(printed)
        current = store.current("gen")
        assert len(current) == 600
        for rater in ("a", "b"):
            mine = {r.input_id: r.answer for r in store.current("gen", rater)}
            assert len(mine) == 300
            assert mine["g3"] == "3" and mine["g7"] == "invalid"


def test_raters_who_open_a_new_store_at_the_same_moment_all_get_it(tmp_path):
    # Every process sees no file, and all make the store together: none may call it damaged.
    # Each process says it is ready, then waits for the word to go: all four are started and waiting, however
    # long each took to start on a loaded machine, when they are let go together.
    script = textwrap.dedent("""
        import sys
        from workbench.core.labeling.label_store import LabelStore
        print("ready", flush=True)
        sys.stdin.readline()
        with LabelStore(sys.argv[1]) as store:
            print(store.answer("gen", "x", sys.argv[2], "1", session="s").id)
    """)
    for trial in range(3):
        path = tmp_path / f"{trial}.sqlite"
        procs = [subprocess.Popen([sys.executable, "-c", script, str(path), rater], env=ENV, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rater in "abcd"]
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        with LabelStore(path, read_only=True) as store:
            assert sorted(r.rater for r in store.current("gen")) == list("abcd")


# ---------------------------------------------------------------- damaged and foreign files


def real_store(path: Path, answers: int = 300) -> Path:
    with LabelStore(path) as store:
        for i in range(answers):
            answer(store, f"x{i}", str(i % 10), rater="ab"[i % 2])
    assert companions(path) == []  # the last close folded the WAL into the file
    return path


def random_bytes(path: Path) -> Path:
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 8192, dtype=np.uint8).tobytes())
    return path


def truncated(path: Path) -> Path:
    data = real_store(path).read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def other_application(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE contacts (name TEXT, phone TEXT)")
        db.execute("INSERT INTO contacts VALUES ('Ada', '123')")
    db.close()
    return path


def newer_schema(path: Path) -> Path:
    real_store(path, answers=5)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    db.close()
    return path


def bad_schema_mark(path: Path) -> Path:
    real_store(path, answers=5)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = 'one' WHERE key = 'schema_version'")
    db.close()
    return path


def no_format_mark(path: Path) -> Path:
    real_store(path, answers=5)
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM meta WHERE key = 'format'")
    db.close()
    return path


def text_file(path: Path) -> Path:
    path.write_text("Image URL,ID,Expected\n")
    return path


DAMAGED = {
    "random bytes": (random_bytes, "damaged or is not a label store", False),
    "text file": (text_file, "damaged or is not a label store", False),
    "truncated store": (truncated, "damaged or is not a label store", True),
    "another application's database": (other_application, "no label-store tables", True),
    "newer schema": (newer_schema, f"schema version {SCHEMA_VERSION + 1}", True),
    "schema mark not a number": (bad_schema_mark, "schema version 'one' is not a number", True),
    "no format mark": (no_format_mark, "format mark", True),
}


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_or_foreign_file_is_reported_and_left_untouched(tmp_path, case, read_only):
    make, message, is_sqlite = DAMAGED[case]
    path = make(tmp_path / FILE)
    before = sha(path)
    with pytest.raises(WorkbenchError) as raised:
        LabelStore(path, read_only=read_only)
    assert str(path) in raised.value.message
    assert message in raised.value.message
    assert raised.value.hint
    assert sha(path) == before
    if not is_sqlite:
        assert sorted(p.name for p in tmp_path.iterdir()) == [FILE]  # SQLite never opened it: no -wal, no -shm
    elif not read_only:
        assert companions(path) == []  # (a read-only reader of a WAL file may leave SQLite's empty side files)
    # a second try says the same: nothing was half-repaired the first time
    with pytest.raises(WorkbenchError, match="label store"):
        LabelStore(path)
    assert sha(path) == before


def test_open_store_reports_a_damaged_file_in_a_project(tmp_path):
    random_bytes(tmp_path / FILE)
    with pytest.raises(WorkbenchError, match=str(tmp_path / FILE)):
        open_store(SimpleNamespace(folder=tmp_path, read_only=False))


def test_an_empty_file_is_treated_as_a_new_store(tmp_path):
    # the module says so: SQLite makes an empty file before its first write, so 0 bytes hold no answers
    assert "an empty file holds no answers" in Path(label_store.__file__).read_text()
    path = tmp_path / FILE
    path.write_bytes(b"")
    with LabelStore(path, read_only=True) as store:
        assert store.history() == []
    assert path.stat().st_size == 0  # a read-only opening still writes nothing
    with LabelStore(path) as store:
        row = answer(store, "x1", "4")
    with LabelStore(path, read_only=True) as store:
        assert [r.id for r in store.current("gen")] == [row.id]


def test_an_empty_sqlite_database_is_treated_as_new(tmp_path):
    # what a process that has just switched a new file to WAL leaves for a second process to find
    path = tmp_path / FILE
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")
    db.close()
    assert path.stat().st_size > 0
    with LabelStore(path, read_only=True) as store:
        assert store.current("gen") == []
    with LabelStore(path) as store:
        answer(store, "x1", "4")
        assert len(store.current("gen")) == 1


def test_an_unreadable_store_is_reported(tmp_path):
    path = tmp_path / FILE
    real_store(path, answers=1)
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who reads any file")
        with pytest.raises(WorkbenchError, match="label store"):
            LabelStore(path)
    finally:
        path.chmod(0o644)
