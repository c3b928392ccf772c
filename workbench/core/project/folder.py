"""A project is a folder: `project.json` (versioned settings) and one HDF5 file per artifact.

The project lists its datasets, models and test sets, and indexes every artifact with its kind and
provenance. The test split of the project's first dataset is its first test set. Opening a project
checks every artifact; missing or damaged ones are reported in `problems` and the rest opens.

Several processes may write one project (two raters, a CLI run beside the GUI). Every change of
`project.json` is a read–modify–write under an inter-process lock: the settings are read again
from disk, changed, and written atomically, so no writer loses another's change. An artifact's file
is written under a temporary name first, outside the lock; only the rename into place and the index
entry happen under it. A writer that died between the two leaves a file nobody indexed: opening
the project indexes it again. Temporary files left by dead writers are removed once they are old.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.project.store import (
    Artifact,
    atomic_path,
    disk_full_error,
    file_lock,
    flush_to_disk,
    is_disk_full,
    provenance,
    read_artifact,
    temporary_beside,
    write_artifact_file,
    write_json,
)

PROJECT_FORMAT = "dl-workbench-project"
PROJECT_VERSION = 1
SETTINGS = "project.json"
BACKUP = SETTINGS + ".bak"
UNREADABLE = "unreadable"  # index entries of the wrong shape, kept in the file but never used
LOCK = ".project.lock"
ARTIFACTS = "artifacts"
#: A temporary file of an unknown writer this old is left over from a crash. A staged artifact names
#: its writer's process instead, and is removed only once that process has gone.
STALE_TEMP_S = 3600.0
#: Provenance keys that name another artifact an artifact cannot be read without.
NEEDED_ARTIFACTS = ("fit_artifact",)
SECTIONS = (("datasets", list), ("models", list), ("testsets", list), ("artifacts", dict), ("gui", dict))

T = TypeVar("T")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "artifact"


def artifact_file(kind: str, name: str) -> str:
    """The project-relative file of an artifact. The name's hash keeps two names whose slugs agree
    ("a/b" and "a-b") in two files, so two writers never rename onto each other's file."""
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"{ARTIFACTS}/{_slug(kind)}/{_slug(name)[:80]}-{digest}.h5"


@dataclass
class StagedArtifact:
    """An artifact written under a temporary name, waiting to be renamed into place and indexed."""

    name: str
    entry: dict  # the index entry it gets: kind, file, provenance
    temporary: Path


def _writer_alive(tmp: Path) -> bool | None:
    """Whether the process that staged `tmp` still runs (its pid is in the name); None when unknown."""
    parts = tmp.name.split(".")
    pid = next((int(p[3:]) for p in parts if p.startswith("pid") and p[3:].isdigit()), None)
    if pid is None:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but belongs to someone else
        return True
    return True


def _restore_hint(folder: Path) -> str:
    backup = folder / BACKUP
    if backup.exists():
        return f"A backup of the previous version is at {backup}; copy it over {SETTINGS} to restore it."
    return "Restore the file from a backup, or create a new project."


def _read_settings(folder: Path) -> dict:
    path = folder / SETTINGS
    if not path.exists():
        if (folder / BACKUP).exists():
            raise WorkbenchError(f"{folder} has no {SETTINGS}, but its backup {BACKUP} is there.",
                                 f"Restore the project: rename {BACKUP} to {SETTINGS}, then open the folder again.")
        raise WorkbenchError(f"{folder} is not a project folder (no {SETTINGS}).",
                             "Choose a project folder, or create a new project there.")
    try:
        settings = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WorkbenchError(f"The project file {path} is damaged: {exc}", _restore_hint(folder)) from exc
    return _checked_settings(settings, path)


def _checked_settings(settings, path: Path) -> dict:
    """The settings if they have the shape of a project file; entries of the wrong shape are set aside
    under `unreadable` (kept in the file, never used), anything else of the wrong shape is refused."""
    if not isinstance(settings, dict) or settings.get("format") != PROJECT_FORMAT:
        raise WorkbenchError(f"{path} is not a workbench project file.", "Choose a project folder.")
    version = settings.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise WorkbenchError(f"{path} has version {version!r}, which is not a project format number.",
                             _restore_hint(path.parent))
    if version > PROJECT_VERSION:
        raise WorkbenchError(f"{path.parent} was saved by a newer workbench (format {version}).",
                             "Update the workbench to open it.")
    for key, kind in (*SECTIONS, ("name", str), (UNREADABLE, dict)):
        if key in settings and not isinstance(settings[key], kind):
            found = "null" if settings[key] is None else type(settings[key]).__name__
            raise WorkbenchError(f"In {path}, {key!r} is {found}, not a {kind.__name__}.", _restore_hint(path.parent))
    for key, default in SECTIONS:
        settings.setdefault(key, default())
    _set_aside(settings)
    return settings



def _check_layout(name: str, artifact, entry: dict) -> None:
    """Refuse an artifact file whose arrays are not those the index recorded when it was saved (their
    names, shapes and, for entries that record them, kinds of value): the file was changed or damaged
    after it was indexed, and its contents cannot be trusted."""
    shapes, types = entry.get("shapes"), entry.get("types", {})
    if not isinstance(shapes, dict) or not isinstance(types, dict):
        return  # an entry from before the index recorded them
    for key, shape in shapes.items():
        found = artifact.layout.get(key)
        if found is None:
            problem = f"its {key!r} array is missing"
        elif not isinstance(shape, list) or list(found[0]) != shape:
            problem = f"its {key!r} array is shaped {found[0]}, not as saved ({shape})"
        elif key in types and _value_class(found[1]) != _value_class(str(types[key])):
            problem = f"its {key!r} array holds other values than it was saved with"
        else:
            continue
        raise WorkbenchError(f"The file of the stored {artifact.kind} result {name!r} is not as it was saved: "
                             f"{problem}.", "It is computed again when next needed; or delete it.")


def _value_class(kind: str) -> str:
    """Numbers, text or other: what a reader can rely on an array to hold (int and float may convert)."""
    return "number" if kind in "biuf" else "text" if kind in "USO" else kind


def _entry_problem(section: str, entry) -> str:
    """What is wrong with one entry of a section ('' when nothing is)."""
    if section == "datasets":
        return "" if isinstance(entry, str) and entry else "not a dataset name"
    if not isinstance(entry, dict):
        return f"a {'null' if entry is None else type(entry).__name__}, not an entry"
    if section == "artifacts":
        for key in ("kind", "file"):
            if not isinstance(entry.get(key), str) or not entry.get(key):
                return f"no {key}"
        for key in ("provenance", "shapes"):
            if key in entry and not isinstance(entry[key], dict):
                return f"its {key} is not a mapping"
        return ""
    if not isinstance(entry.get("name"), str) or not entry.get("name"):
        return "no name"
    if section == "models" and "spec" in entry and not isinstance(entry["spec"], str):
        return "its spec is not text"
    return ""


def _set_aside(settings: dict) -> None:
    aside = settings.get(UNREADABLE, {})
    for section, kind in (("artifacts", dict), ("datasets", list), ("models", list), ("testsets", list)):
        if section in aside and not isinstance(aside[section], kind):  # an edited file: keep it, aside
            aside[f"{section} (as found)"] = aside.pop(section)
    for name, entry in list(settings["artifacts"].items()):
        if _entry_problem("artifacts", entry):
            aside.setdefault("artifacts", {})[name] = settings["artifacts"].pop(name)
    for section in ("datasets", "models", "testsets"):
        bad = [e for e in settings[section] if _entry_problem(section, e)]
        if bad:
            settings[section] = [e for e in settings[section] if not _entry_problem(section, e)]
            aside.setdefault(section, []).extend(bad)
    if aside:
        settings[UNREADABLE] = aside


def _aside_problems(settings: dict) -> list[str]:
    problems = []
    for section, entries in settings.get(UNREADABLE, {}).items():
        if section == "artifacts" and isinstance(entries, dict):
            for name, entry in entries.items():
                problems.append(f"The artifact entry {name!r} in {SETTINGS} is not readable "
                                f"({_entry_problem('artifacts', entry) or 'set aside before'}); it is kept under "
                                f"{UNREADABLE!r} and not used.")
        elif isinstance(entries, list) and entries:
            problems.append(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} of {section!r} in {SETTINGS} "
                            f"are not readable; they are kept under {UNREADABLE!r} and not used.")
    return problems


def _refuse_remains(folder: Path) -> None:
    """A folder that lost its project.json but holds its backup or artifacts is not a new project."""
    if (folder / BACKUP).exists():
        raise WorkbenchError(f"{folder} has no {SETTINGS} but holds its backup {BACKUP}, so no new project is "
                             "created over it.", f"Restore the project: rename {BACKUP} to {SETTINGS}, then open "
                             "the folder. Or choose another folder for a new project.")
    artifacts = folder / ARTIFACTS
    files = [p for p in artifacts.rglob("*.h5")] if artifacts.is_dir() else []
    if files:
        raise WorkbenchError(f"{folder} has no {SETTINGS} but holds {len(files)} artifact file"
                             f"{'s' * (len(files) != 1)} of a project, so no new project is created over them.",
                             f"Restore {SETTINGS} from a copy of the project, or choose another folder for a new "
                             "project; the files are left as they are.")


class Project:
    """An open project folder."""

    def __init__(self, folder: Path, settings: dict, problems: list[str], read_only: bool):
        self.folder = folder
        self.settings = settings
        self.problems = problems
        self.read_only = read_only
        self.damaged: dict[str, str] = {}  # artifact name → what is wrong with its file
        self._checked: set[str] = set()  # artifacts whose files were checked

    # --- opening and creating -------------------------------------------------------------------

    @classmethod
    def create(cls, folder: str | os.PathLike, dataset: str, models: list[str] = (), name: str = "") -> "Project":
        folder = Path(folder)
        settings = {
            "format": PROJECT_FORMAT, "version": PROJECT_VERSION, "name": name or folder.name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "datasets": [dataset],
            "models": [{"name": m, "spec": m} for m in models],
            "testsets": [{"name": f"{dataset}:test", "dataset": dataset, "split": "test",
                          "how": "the dataset's test split"}],
            "artifacts": {}, "gui": {},
        }
        project = cls(folder, settings, [], False)
        project._make_folder()
        with project._locked():
            if (folder / SETTINGS).exists():
                raise WorkbenchError(f"{folder} already holds a project.", "Open it instead, or choose an empty folder.")
            _refuse_remains(folder)
            write_json(folder / SETTINGS, settings)
        return project

    @classmethod
    def open(cls, folder: str | os.PathLike) -> "Project":
        folder = Path(folder)
        settings = _read_settings(folder)
        read_only = not os.access(folder, os.W_OK)
        project = cls(folder, settings, [], read_only)
        project.problems += _aside_problems(settings)
        if not read_only:
            project.problems += project.repair()
        project._check_artifacts()
        if read_only:
            project.problems.append(f"The folder {folder} is read-only: results can be viewed but not saved.")
        return project

    @classmethod
    def open_or_create(cls, folder: str | os.PathLike, dataset: str, models: list[str] = ()) -> "Project":
        folder = Path(folder)
        if (folder / SETTINGS).exists():
            return cls.open(folder)
        try:
            return cls.create(folder, dataset, models)
        except WorkbenchError:
            if (folder / SETTINGS).exists():  # another process created it a moment ago
                return cls.open(folder)
            raise

    def reload(self) -> bool:
        """Read the settings again, with what other processes have saved since; True when they changed."""
        before = _without_marks(self.settings)
        if self.read_only:
            self._adopt(_read_settings(self.folder))
        else:
            with self._locked():  # adopted in the order written, like `update`
                self._adopt(_read_settings(self.folder))
        self._check_artifacts(only_new=True)
        return _without_marks(self.settings) != before

    def _check_artifacts(self, only_new: bool = False) -> None:
        """Read every artifact's header; a missing or damaged file is marked and reported."""
        for name, entry in self.settings["artifacts"].items():
            if only_new and name in self._checked:
                continue
            try:
                read_artifact(self.artifact_path(entry))
            except WorkbenchError as exc:
                if name not in self.damaged:
                    self.problems.append(f"{name}: {exc.message}")
                self.damaged[name] = exc.message
                entry["problem"] = exc.message
        self._checked = set(self.settings["artifacts"])

    def _adopt(self, settings: dict) -> None:
        """Take `settings` as the current ones, keeping the marks of damaged artifacts."""
        for name, message in list(self.damaged.items()):
            if name in settings["artifacts"]:
                settings["artifacts"][name]["problem"] = message
        self.settings = settings

    # --- contents ---------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.settings.get("name", self.folder.name)

    @property
    def datasets(self) -> list[str]:
        return list(self.settings["datasets"])

    @property
    def models(self) -> list[dict]:
        return list(self.settings["models"])

    @property
    def testsets(self) -> list[dict]:
        return list(self.settings["testsets"]) + [
            {"name": n, "artifact": n, **e.get("provenance", {})}
            for n, e in self.settings["artifacts"].items() if e["kind"] == "testset" and "problem" not in e]

    def artifacts(self, kind: str | None = None) -> dict[str, dict]:
        return {n: e for n, e in self.settings["artifacts"].items() if kind is None or e["kind"] == kind}

    def artifact_path(self, entry: dict) -> Path:
        """The file of an index entry; one that points outside the project's artifacts is refused, so a
        shared or edited project.json can never make the workbench read or delete other files."""
        root = (self.folder / ARTIFACTS).resolve()
        path = (self.folder / str(entry.get("file", ""))).resolve()
        if root not in path.parents:
            raise WorkbenchError(f"The project index points at {entry.get('file')!r}, outside the project's "
                                 f"{ARTIFACTS} folder.", "Remove that entry from project.json, or restore it from "
                                 "project.json.bak.")
        return path

    def add_dataset(self, name: str) -> None:
        def change(settings):
            if name not in settings["datasets"]:
                settings["datasets"].append(name)
                settings["testsets"].append({"name": f"{name}:test", "dataset": name, "split": "test",
                                             "how": "the dataset's test split"})

        if name not in self.settings["datasets"]:
            self.update(change)

    def add_model(self, spec: str, name: str | None = None, arch: str | None = None) -> None:
        """Add a bundled model by name or a model file by path (kept relative when inside the project).

        `arch` is recorded for plain state_dict files, so they load again next time.
        """
        path = Path(spec)
        if path.exists():
            try:
                spec = str(path.resolve().relative_to(self.folder.resolve()))
            except ValueError:
                spec = str(path.resolve())
        name = name or (path.stem if path.exists() else spec)
        entry = {"name": name, "spec": spec, **({"arch": arch} if arch else {})}

        def change(settings):
            if all(m["name"] != name for m in settings["models"]):
                settings["models"].append(entry)

        if all(m["name"] != name for m in self.settings["models"]):
            self.update(change)

    def set_gui(self, **values) -> None:
        """Store GUI state (layout, selection) under `gui`, keeping what other writers stored."""
        self.update(lambda settings: settings["gui"].update(values))

    def model_spec(self, entry: dict) -> str:
        """What `load_model` takes for a model entry: a bundled name, or the file's full path."""
        spec = entry["spec"]
        inside = self.folder / spec
        return str(inside) if not Path(spec).is_absolute() and inside.exists() else spec

    # --- artifacts ---------------------------------------------------------------------------------

    def save_artifact(self, kind: str, name: str, arrays: dict[str, np.ndarray], **how) -> dict:
        """Write an artifact file atomically and index it; an existing one of that name is replaced."""
        staged = self.stage_artifact(kind, name, arrays, **how)
        self.commit([staged])
        return staged.entry

    def stage_artifact(self, kind: str, name: str, arrays: dict[str, np.ndarray], **how) -> StagedArtifact:
        """Write an artifact under a temporary name beside its place; `commit` renames and indexes it."""
        self.ensure_writable()
        file = artifact_file(kind, name)
        target = self.folder / file
        record = provenance(kind=kind, **how)
        tmp = temporary_beside(target, f"pid{os.getpid()}.")  # names its writer: see `repair`
        entry = {"kind": kind, "file": file, "provenance": record,
                 "shapes": {key: list(np.shape(value)) for key, value in arrays.items()},
                 "types": {key: np.asarray(value).dtype.kind for key, value in arrays.items()}}
        try:
            write_artifact_file(tmp, kind, arrays, record, name)
            flush_to_disk(tmp)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if is_disk_full(exc):
                raise disk_full_error(self.folder, f"the result {name!r}") from exc
            raise
        return StagedArtifact(name, entry, tmp)

    def commit(self, staged: list[StagedArtifact]) -> None:
        """Rename staged artifacts into place and index them, all in one change of the settings."""
        if not staged:
            return
        replaced: list[Path] = []

        def change(settings):
            for item in staged:
                try:
                    os.replace(item.temporary, self.folder / item.entry["file"])
                except FileNotFoundError as exc:
                    raise WorkbenchError(f"The result {item.name!r} could not be stored: its temporary file "
                                         "was removed before the job finished.",
                                         "Run the job again; results stored before are unaffected.") from exc
                old = settings["artifacts"].get(item.name)
                if old and old.get("file") != item.entry["file"]:
                    try:
                        replaced.append(self.artifact_path(old))
                    except WorkbenchError:
                        pass  # an entry that pointed outside the project: dropped, its file left alone
                settings["artifacts"][item.name] = item.entry
                self.damaged.pop(item.name, None)

        self.update(change)
        for path in replaced:  # an older version under another file name
            path.unlink(missing_ok=True)

    @staticmethod
    def discard(staged: list[StagedArtifact]) -> None:
        """Drop staged artifacts that will not be committed."""
        for item in staged:
            item.temporary.unlink(missing_ok=True)

    def load_artifact(self, name: str, kind: str | None = None) -> Artifact:
        """Read an artifact back; with `kind`, refuse one of another kind."""
        if name not in self.settings["artifacts"]:
            raise WorkbenchError(f"The project has no result named {name!r}.", "It may have been deleted.")
        entry = self.settings["artifacts"][name]
        artifact = read_artifact(self.artifact_path(entry))
        if kind is not None and artifact.kind != kind:
            raise WorkbenchError(f"Result {name!r} is a {artifact.kind} result, not a {kind} result.",
                                 f"Choose a {kind} result.")
        _check_layout(name, artifact, entry)
        return artifact

    def find_artifact(self, kind: str, **match) -> str | None:
        """The name of an intact artifact of `kind` whose provenance contains `match`, if any."""
        for name, entry in self.artifacts(kind).items():
            how = entry.get("provenance", {})
            if "problem" not in entry and all(how.get(k) == v for k, v in match.items()):
                return name
        return None

    def artifact_files(self, name: str) -> list[Path]:
        """The files artifact `name` is read from: its own, then those of the artifacts it needs (a
        coverage result's fitted criterion). Every one is inside the project (`artifact_path`)."""
        if name not in self.settings["artifacts"]:
            raise WorkbenchError(f"The project has no result named {name!r}.", "It may have been deleted.")
        entry = self.settings["artifacts"][name]
        files = [self.artifact_path(entry)]
        for key in NEEDED_ARTIFACTS:
            other = entry.get("provenance", {}).get(key)
            if isinstance(other, str) and other in self.settings["artifacts"]:
                files.append(self.artifact_path(self.settings["artifacts"][other]))
        return files

    def needed_by(self, name: str) -> list[str]:
        """The artifacts that cannot be read without artifact `name` (coverage results of a fit)."""
        return [n for n, e in self.settings["artifacts"].items()
                if any(e.get("provenance", {}).get(key) == name for key in NEEDED_ARTIFACTS)]

    def export_artifact(self, name: str, folder: str | os.PathLike) -> list[Path]:
        """Copy the files of artifact `name` (see `artifact_files`) into `folder`, each written under a
        temporary name and renamed into place; returns the paths written."""
        folder = Path(folder)
        written = []
        for source in self.artifact_files(name):
            if not source.exists():
                raise WorkbenchError(f"The file of {name!r} is missing: {source}.",
                                     "Compute the result again, then export it.")
            target = folder / source.name
            try:
                with atomic_path(target) as tmp:
                    shutil.copyfile(source, tmp)
            except OSError as exc:
                if is_disk_full(exc):
                    raise disk_full_error(folder, f"the copy of {name!r}") from exc
                raise WorkbenchError(f"Cannot write {target}: {exc.strerror or exc}.",
                                     "Choose a folder you can write to.") from exc
            written.append(target)
        return written

    def delete_artifact(self, name: str) -> None:
        self.ensure_writable()
        def change(settings):
            entry = settings["artifacts"].pop(name, None)
            if entry is not None:  # under the lock, so no other process re-indexes the file meanwhile
                try:
                    self.artifact_path(entry).unlink(missing_ok=True)
                except WorkbenchError:
                    pass  # an entry that pointed outside the project: dropped, its file left alone

        self.update(change)

    # --- saving ------------------------------------------------------------------------------------

    def ensure_writable(self) -> None:
        """Raise before any work is done if results could not be saved here."""
        if self.read_only:
            raise WorkbenchError(f"The project folder {self.folder} is read-only.",
                                 "Copy the project to a folder you can write to and open it there.")

    def update(self, change: Callable[[dict], T]) -> T:
        """Change the settings as they are on disk now, under the project lock, and write them back.

        `change(settings)` edits the freshly read settings in place; what it returns is returned.
        """
        self.ensure_writable()
        self._make_folder()
        with self._locked():
            settings = _read_settings(self.folder) if (self.folder / SETTINGS).exists() else self.settings
            result = change(settings)
            write_json(self.folder / SETTINGS, _without_marks(settings))
            self._adopt(settings)  # inside the lock: two threads' changes are adopted in the order written
        return result

    def repair(self) -> list[str]:
        """Index artifact files that were renamed into place but never indexed, and remove temporary
        files of writers that died. Returns what was done, for the user to read."""
        notes: list[str] = []
        folder = self.folder / ARTIFACTS
        if not folder.is_dir():
            return notes
        now = time.time()
        for tmp in [*folder.rglob(".*.tmp"), *self.folder.glob(f".{SETTINGS}*.tmp")]:
            try:
                alive = _writer_alive(tmp)
                if alive is False or (alive is None and now - tmp.stat().st_mtime > STALE_TEMP_S):
                    tmp.unlink()
            except OSError:
                pass  # another process removed or renamed it meanwhile

        def change(settings):
            indexed = {e["file"] for e in settings["artifacts"].values()}
            for path in sorted(folder.rglob("*.h5")):
                file = path.relative_to(self.folder).as_posix()
                if file in indexed:
                    continue
                try:
                    artifact = read_artifact(path)
                except WorkbenchError as exc:
                    notes.append(f"{file} is not indexed and cannot be read ({exc.message}); it was left as it is.")
                    continue
                name = artifact.name or path.stem
                if name in settings["artifacts"]:
                    path.unlink(missing_ok=True)  # an older version whose replacement was indexed
                    continue
                settings["artifacts"][name] = {"kind": artifact.kind, "file": file,
                                               "provenance": artifact.provenance}
                notes.append(f"{name}: its job stopped before indexing it; it was indexed again.")

        with self._locked():
            settings = _read_settings(self.folder)
            before = len(notes)
            change(settings)
            if any(n.endswith("indexed again.") for n in notes[before:]):
                write_json(self.folder / SETTINGS, _without_marks(settings))
        self._adopt(settings)
        return notes

    def _locked(self):
        return file_lock(self.folder / LOCK)

    def _make_folder(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkbenchError(f"Cannot create the project folder {self.folder}: {exc.strerror}.",
                                 "Choose a folder you can write to.") from exc


def _without_marks(settings: dict) -> dict:
    """The settings as stored: damage marks are found on opening, never saved."""
    artifacts = {n: {k: v for k, v in e.items() if k != "problem"} for n, e in settings["artifacts"].items()}
    return {**settings, "artifacts": artifacts}


def read_stored(project, kind: str, load: Callable[[Any, str], Any], notice: Callable[[str], None], redo: str,
                **match) -> Any | None:
    """The intact artifact `project.find_artifact(kind, **match)` names, read with `load(project, name)` (a
    `Project` or a job's `StagedProject`); None when there is none, or when it cannot be read as what `load`
    expects — then `notice` says so and that the result is `redo` ("computed again"), and the caller computes
    it afresh."""
    found = project.find_artifact(kind, **match)
    if found is None:
        return None
    try:
        return load(project, found)
    except WorkbenchError as exc:
        notice(f"{exc.message} The result is {redo}.")
        return None
