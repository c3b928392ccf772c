"""A project is a folder: `project.json` (versioned settings) and one HDF5 file per artifact.

The project lists its datasets, models and test sets, and indexes every artifact with its kind and
provenance. The test split of the project's first dataset is its first test set. Opening a project
checks every artifact; missing or damaged ones are reported in `problems` and the rest opens.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.store import Artifact, provenance, read_artifact, write_artifact, write_json

PROJECT_FORMAT = "dl-workbench-project"
PROJECT_VERSION = 1
SETTINGS = "project.json"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "artifact"


class Project:
    """An open project folder."""

    def __init__(self, folder: Path, settings: dict, problems: list[str], read_only: bool):
        self.folder = folder
        self.settings = settings
        self.problems = problems
        self.read_only = read_only

    # --- opening and creating -------------------------------------------------------------------

    @classmethod
    def create(cls, folder: str | os.PathLike, dataset: str, models: list[str] = (), name: str = "") -> "Project":
        folder = Path(folder)
        if (folder / SETTINGS).exists():
            raise WorkbenchError(f"{folder} already holds a project.", "Open it instead, or choose an empty folder.")
        settings = {
            "format": PROJECT_FORMAT, "version": PROJECT_VERSION, "name": name or folder.name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "datasets": [dataset],
            "models": [{"name": m, "spec": m} for m in models],
            "testsets": [{"name": f"{dataset}:test", "dataset": dataset, "split": "test",
                          "how": "the dataset's test split"}],
            "artifacts": {}, "gui": {},
        }
        project = cls(folder, settings, [], False)
        project.save()
        return project

    @classmethod
    def open(cls, folder: str | os.PathLike) -> "Project":
        folder = Path(folder)
        path = folder / SETTINGS
        if not path.exists():
            raise WorkbenchError(f"{folder} is not a project folder (no {SETTINGS}).",
                                 "Choose a project folder, or create a new project there.")
        try:
            settings = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            backup = path.with_name(SETTINGS + ".bak")
            hint = (f"A backup of the previous version is at {backup}; copy it over {SETTINGS} to restore it."
                    if backup.exists() else "Restore the file from a backup, or create a new project.")
            raise WorkbenchError(f"The project file {path} is damaged: {exc}", hint) from exc
        if not isinstance(settings, dict) or settings.get("format") != PROJECT_FORMAT:
            raise WorkbenchError(f"{path} is not a workbench project file.", "Choose a project folder.")
        if int(settings.get("version", 0)) > PROJECT_VERSION:
            raise WorkbenchError(f"{folder} was saved by a newer workbench (format {settings['version']}).",
                                 "Update the workbench to open it.")
        for key, default in (("datasets", []), ("models", []), ("testsets", []), ("artifacts", {}), ("gui", {})):
            settings.setdefault(key, default)
        problems = []
        for name, entry in settings["artifacts"].items():
            try:
                read_artifact(folder / entry["file"])
            except WorkbenchError as exc:
                entry["problem"] = exc.message
                problems.append(f"{name}: {exc.message}")
        read_only = not os.access(folder, os.W_OK)
        if read_only:
            problems.append(f"The folder {folder} is read-only: results can be viewed but not saved.")
        return cls(folder, settings, problems, read_only)

    @classmethod
    def open_or_create(cls, folder: str | os.PathLike, dataset: str, models: list[str] = ()) -> "Project":
        folder = Path(folder)
        return cls.open(folder) if (folder / SETTINGS).exists() else cls.create(folder, dataset, models)

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

    def add_dataset(self, name: str) -> None:
        if name not in self.settings["datasets"]:
            self.settings["datasets"].append(name)
            self.settings["testsets"].append({"name": f"{name}:test", "dataset": name, "split": "test",
                                              "how": "the dataset's test split"})
            self.save()

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
        if all(m["name"] != name for m in self.settings["models"]):
            entry = {"name": name, "spec": spec}
            if arch:
                entry["arch"] = arch
            self.settings["models"].append(entry)
            self.save()

    def model_spec(self, entry: dict) -> str:
        """What `load_model` takes for a model entry: a bundled name, or the file's full path."""
        spec = entry["spec"]
        inside = self.folder / spec
        return str(inside) if not Path(spec).is_absolute() and inside.exists() else spec

    # --- artifacts ---------------------------------------------------------------------------------

    def save_artifact(self, kind: str, name: str, arrays: dict[str, np.ndarray], **how) -> dict:
        """Write an artifact file atomically and index it; an existing one of that name is replaced."""
        self.ensure_writable()
        file = f"artifacts/{_slug(kind)}/{_slug(name)}.h5"
        record = provenance(kind=kind, **how)
        write_artifact(self.folder / file, kind, arrays, record)
        entry = {"kind": kind, "file": file, "provenance": record}
        self.settings["artifacts"][name] = entry
        self.save()
        return entry

    def load_artifact(self, name: str, kind: str | None = None) -> Artifact:
        """Read an artifact back; with `kind`, refuse one of another kind."""
        if name not in self.settings["artifacts"]:
            raise WorkbenchError(f"The project has no result named {name!r}.", "It may have been deleted.")
        artifact = read_artifact(self.folder / self.settings["artifacts"][name]["file"])
        if kind is not None and artifact.kind != kind:
            raise WorkbenchError(f"Result {name!r} is a {artifact.kind} result, not a {kind} result.",
                                 f"Choose a {kind} result.")
        return artifact

    def find_artifact(self, kind: str, **match) -> str | None:
        """The name of an intact artifact of `kind` whose provenance contains `match`, if any."""
        for name, entry in self.artifacts(kind).items():
            how = entry.get("provenance", {})
            if "problem" not in entry and all(how.get(k) == v for k, v in match.items()):
                return name
        return None

    def delete_artifact(self, name: str) -> None:
        self.ensure_writable()
        entry = self.settings["artifacts"].pop(name)
        self.save()
        (self.folder / entry["file"]).unlink(missing_ok=True)

    # --- saving ------------------------------------------------------------------------------------

    def ensure_writable(self) -> None:
        """Raise before any work is done if results could not be saved here."""
        if self.read_only:
            raise WorkbenchError(f"The project folder {self.folder} is read-only.",
                                 "Copy the project to a folder you can write to and open it there.")

    def save(self) -> None:
        self.ensure_writable()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkbenchError(f"Cannot create the project folder {self.folder}: {exc.strerror}.",
                                 "Choose a folder you can write to.") from exc
        write_json(self.folder / SETTINGS, self.settings)
