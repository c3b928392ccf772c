"""Crash-safe files: JSON settings and one HDF5 file per artifact, each written atomically.

Everything is written under a temporary name in the target folder, flushed to disk and renamed
into place, so a crash, a full disk or a cancelled job leaves the previous file intact. Artifacts
carry their kind, a format version and a provenance record (how they were made) as attributes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from workbench.core.errors import WorkbenchError

ARTIFACT_VERSION = 1


def library_versions() -> dict:
    import sys

    import h5py
    import torch

    import workbench

    return {"workbench": workbench.__version__, "python": sys.version.split()[0], "torch": torch.__version__,
            "numpy": np.__version__, "h5py": h5py.__version__}


def provenance(**how) -> dict:
    """How a result was made: the caller's parameters plus time and library versions."""
    return {**how, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "versions": library_versions()}


@contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside `path`; on success it replaces `path`, on failure it vanishes."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise WorkbenchError(f"Cannot write in {path.parent}: {exc.strerror}.",
                             "Choose a folder you can write to, or fix its permissions.") from exc
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(path: str | os.PathLike, data: dict, backup: bool = True) -> None:
    """Write JSON atomically, keeping the previous version as `<name>.bak`."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=_json_default))
        if backup and path.exists():
            shutil.copy2(path, path.with_name(path.name + ".bak"))


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (Path, tuple)):
        return str(o) if isinstance(o, Path) else list(o)
    raise TypeError(f"{type(o).__name__} is not JSON data")


def write_artifact(path: str | os.PathLike, kind: str, arrays: dict[str, np.ndarray], how: dict) -> Path:
    """Write one artifact: named arrays plus kind, version and provenance, atomically."""
    import h5py

    path = Path(path)
    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w") as f:
            f.attrs["workbench_artifact"] = ARTIFACT_VERSION
            f.attrs["kind"] = kind
            f.attrs["provenance"] = json.dumps(how, default=_json_default)
            for name, array in arrays.items():
                array = np.asarray(array)
                if array.dtype.kind == "U":
                    array = array.astype(h5py.string_dtype())
                f.create_dataset(name, data=array, compression="gzip" if array.size > 4096 else None)
    return path


class Artifact:
    """An artifact read back: its kind, provenance and arrays (loaded on access)."""

    def __init__(self, path: Path, kind: str, how: dict, names: list[str]):
        self.path, self.kind, self.provenance, self.names = path, kind, how, names

    def __getitem__(self, name: str) -> np.ndarray:
        import h5py

        with h5py.File(self.path, "r") as f:
            data = f[name][()]
        return np.array([s.decode() if isinstance(s, bytes) else s for s in data]) if data.dtype == object else data


def read_artifact(path: str | os.PathLike) -> Artifact:
    """Open an artifact, checking it is complete; a damaged file raises a `WorkbenchError` naming it."""
    import h5py

    path = Path(path)
    if not path.exists():
        raise WorkbenchError(f"Artifact file {path.name} is missing.", "It was moved or deleted; recompute it.")
    try:
        with h5py.File(path, "r") as f:
            if "workbench_artifact" not in f.attrs:
                raise WorkbenchError(f"{path.name} is not a workbench artifact.", "Recompute it.")
            version = int(f.attrs["workbench_artifact"])
            if version > ARTIFACT_VERSION:
                raise WorkbenchError(f"{path.name} was written by a newer workbench (format {version}).",
                                     "Update the workbench to open it.")
            return Artifact(path, str(f.attrs["kind"]), json.loads(f.attrs["provenance"]), list(f.keys()))
    except WorkbenchError:
        raise
    except Exception as exc:
        raise WorkbenchError(f"Artifact {path.name} is damaged and cannot be read ({exc}).",
                             "Delete it and compute it again; other results are unaffected.") from exc
