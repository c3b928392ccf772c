"""Crash-safe files: JSON settings and one HDF5 file per artifact, each written atomically.

Everything is written under a temporary name in the target folder, flushed to disk and renamed
into place, so a crash, a full disk or a cancelled job leaves the previous file intact. Artifacts
carry their kind, a format version and a provenance record (how they were made) as attributes.
"""

from __future__ import annotations

import errno
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
BLOCK_BYTES = 1 << 20  # arrays are written and read in blocks of about this size (see write_artifact_file)


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
def file_lock(path: str | os.PathLike):
    """Hold an exclusive inter-process lock on `path` (created if missing) for the `with` block.

    Advisory, like every lock between processes: it protects what all writers change under it.
    """
    path = Path(path)
    try:
        handle = open(path, "a+b")
    except OSError as exc:
        raise WorkbenchError(f"Cannot lock {path}: {exc.strerror}.",
                             "Check that the folder exists and can be written to.") from exc
    try:
        if os.name == "nt":  # pragma: no cover - exercised on Windows only
            import msvcrt

            handle.seek(0)
            while True:
                try:
                    msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)
                    break
                except OSError:  # LK_LOCK gives up after ten seconds; keep waiting
                    continue
        else:
            import fcntl

            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        handle.close()  # closing releases the lock


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# HDF5 reports a failed write in its own words, with the system's errno inside the text.
_NO_SPACE_TEXT = ("No space left", "Disk quota exceeded", "File too large", "errno = 28", "errno = 122",
                  "errno = 27")


def is_disk_full(exc: BaseException) -> bool:
    """Whether a write failed because the disk (or the user's quota, or the file-size limit) is full."""
    return isinstance(exc, OSError) and (exc.errno in _NO_SPACE or any(t in str(exc) for t in _NO_SPACE_TEXT))


def disk_full_error(folder: Path, what: str) -> WorkbenchError:
    return WorkbenchError(f"The disk is full: {what} could not be saved in {folder}.",
                          "Free some disk space and run it again. What was saved before is kept as it was.")


def temporary_beside(path: Path, tag: str = "") -> Path:
    """A new empty hidden file `.<name>.<tag><random>.tmp` in `path`'s folder (created if missing), so a
    rename onto `path` stays on one file system."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{tag}", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(path.parent, path.name) from exc
        raise WorkbenchError(f"Cannot write in {path.parent}: {exc.strerror}.",
                             "Choose a folder you can write to, or fix its permissions.") from exc
    os.close(fd)
    os.chmod(tmp, 0o666 & ~process_umask())  # mkstemp makes it private; the file it becomes follows the umask
    return Path(tmp)


def process_umask() -> int:
    """The process's umask, read without changing it (`os.umask` would, for every thread at once)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


@contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside `path`; on success it replaces `path`, on failure it vanishes.
    Its name carries this process's id, so one left by a killed writer is known for garbage."""
    path = Path(path)
    tmp = temporary_beside(path, f"pid{os.getpid()}.")
    try:
        yield tmp
        flush_to_disk(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def atomic_text(path: str | os.PathLike):
    """A text file (UTF-8, `newline=""` for CSV) written beside `path` and renamed into place: a failed
    export leaves no half file and the old one as it was. A missing folder or a write error is reported."""
    path = Path(path)
    if not path.parent.is_dir():
        raise WorkbenchError(f"The folder {path.parent} does not exist.", "Create it, or choose another file.")
    try:
        with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
            yield handle
    except OSError as exc:
        raise WorkbenchError(f"Cannot write {path}: {exc.strerror}.", "Choose a folder you can write to.") from exc


@contextmanager
def atomic_folder(path: str | os.PathLike):
    """Yield a new empty temporary folder beside `path`; on success it takes `path`'s place, on failure it
    vanishes and `path` stays as it was.

    A folder cannot be renamed over another in one step, so the old one is first renamed aside
    (`.<name>.old-pid<pid>…`), the new one renamed into place, and the old one removed: a crash in
    between leaves the old folder under that name, never a half-written folder under `path`.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.pid{os.getpid()}.", suffix=".tmp", dir=path.parent))
        os.chmod(tmp, 0o777 & ~process_umask())  # mkdtemp makes it private; the folder it becomes follows the umask
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(path.parent, path.name) from exc
        raise WorkbenchError(f"Cannot write in {path.parent}: {exc.strerror}.",
                             "Choose a folder you can write to, or fix its permissions.") from exc
    try:
        yield tmp
        for item in tmp.rglob("*"):
            if item.is_file():
                flush_to_disk(item)
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-pid{os.getpid()}.", dir=path.parent))
            old.rmdir()  # only its unique name is wanted
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except OSError:
            if old is not None:  # the old folder goes back where it was
                os.replace(old, path)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(path.parent, path.name) from exc
        raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | os.PathLike, data: dict, backup: bool = True) -> None:
    """Write JSON atomically, keeping the previous version as `<name>.bak` (itself written atomically,
    so a crash while backing up never leaves a half-written backup)."""
    path = Path(path)
    text = json.dumps(data, indent=2, sort_keys=False, default=_json_default)
    try:
        with atomic_path(path) as tmp:
            tmp.write_text(text)
            if backup and path.exists():
                with atomic_path(path.with_name(path.name + ".bak")) as backup_tmp:
                    shutil.copy2(path, backup_tmp)
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(path.parent, path.name) from exc
        raise


def lenient_json(o):
    """Anything as JSON data, for reports and printed results: arrays as lists, numpy scalars as
    numbers, everything else as its text (files of settings use the strict `write_json` instead)."""
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (Path, tuple)):
        return str(o) if isinstance(o, Path) else list(o)
    raise TypeError(f"{type(o).__name__} is not JSON data")


def write_artifact(path: str | os.PathLike, kind: str, arrays: dict[str, np.ndarray], how: dict,
                   name: str = "") -> Path:
    """Write one artifact: named arrays plus kind, version and provenance, atomically."""
    path = Path(path)
    with atomic_path(path) as tmp:
        write_artifact_file(tmp, kind, arrays, how, name)
    return path


class _DiskFullGuard:
    """The file HDF5 writes an artifact through. When the disk is full, HDF5 cannot close the file it
    could not extend and the process crashes later, so the guard keeps the failure to itself: writes
    that fail with a full disk are recorded and reported as done, and `write_artifact_file` raises once
    HDF5 has closed the (then useless) file."""

    def __init__(self, file):
        self.file = file
        self.full: OSError | None = None

    def _guarded(self, call, *args):
        if self.full is not None:
            return None
        try:
            return call(*args)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            self.full = exc
            return None

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        while len(view) and self.full is None:  # an unbuffered file may take a write in parts
            written = self._guarded(self.file.write, view)
            if not written:
                break
            view = view[written:]
        return len(data)

    def truncate(self, size=None):
        self._guarded(self.file.truncate, size)
        return size

    def flush(self) -> None:
        self._guarded(self.file.flush)

    def read(self, size=-1):
        return self._guarded(self.file.read, size) or b""

    def readinto(self, buffer):
        return self._guarded(self.file.readinto, buffer) or 0

    def seek(self, offset, whence=0):
        result = self._guarded(self.file.seek, offset, whence)
        return self.file.tell() if result is None else result

    def tell(self):
        return self.file.tell()


def write_artifact_file(path: Path, kind: str, arrays: dict[str, np.ndarray], how: dict, name: str = "") -> None:
    """Write an artifact's HDF5 file in place (callers write to a temporary path and rename it).

    `name` is the artifact's name in its project, kept in the file so an artifact that was renamed
    into place but never indexed can be indexed again under its own name. A full disk raises
    `OSError(ENOSPC)` once the file is closed (the caller removes it).
    """
    # Unbuffered: with a buffer, a failed write would surface later, in a seek or a read.
    with open(path, "w+b", buffering=0) as raw:
        guard = _DiskFullGuard(raw)
        try:
            _write_hdf5(guard, kind, arrays, how, name)
        except Exception:
            if guard.full is None:
                raise  # HDF5's own failure; a full disk is said below, whatever HDF5 made of it
    if guard.full is not None:
        raise OSError(errno.ENOSPC, f"No space left while writing {path.name}: {guard.full}")


def _write_hdf5(guard, kind: str, arrays: dict[str, np.ndarray], how: dict, name: str) -> None:
    import h5py

    with h5py.File(guard, "w") as f:
        f.attrs["workbench_artifact"] = ARTIFACT_VERSION
        f.attrs["kind"] = kind
        f.attrs["provenance"] = json.dumps(how, default=_json_default)
        if name:
            f.attrs["name"] = name
        for key, array in arrays.items():
            array = np.asarray(array)
            if array.dtype.kind == "U":
                array = array.astype(h5py.string_dtype())
            if array.ndim == 0 or array.nbytes <= BLOCK_BYTES:
                f.create_dataset(key, data=array, compression="gzip" if array.size > 4096 else None)
                continue
            # h5py holds the GIL for a whole write: in row blocks, a UI thread waits one block, not the array
            rows = max(1, BLOCK_BYTES // max(1, array[0].nbytes))
            dataset = f.create_dataset(key, shape=array.shape, dtype=array.dtype, compression="gzip",
                                       chunks=(min(rows, len(array)), *array.shape[1:]))
            for start in range(0, len(array), rows):
                dataset[start:start + rows] = array[start:start + rows]
                if guard.full is not None:
                    break
            if guard.full is not None:
                break


def flush_to_disk(path: str | os.PathLike) -> None:
    """fsync a written file, so a rename that follows never exposes a file whose data is still cached."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


class Artifact:
    """An artifact read back: its kind, provenance and arrays (loaded on access)."""

    def __init__(self, path: Path, kind: str, how: dict, names: list[str], name: str = "",
                 layout: dict[str, tuple[tuple[int, ...], str]] | None = None):
        self.path, self.kind, self.provenance, self.names = path, kind, how, names
        self.name = name  # its name in the project, when the file records it
        self.layout = layout or {}  # array name → (shape, dtype kind), read with the file's header

    def __getitem__(self, name: str) -> np.ndarray:
        import h5py

        with h5py.File(self.path, "r") as f:
            dataset = f[name]
            if dataset.ndim == 0 or dataset.size * dataset.dtype.itemsize <= BLOCK_BYTES or dataset.dtype == object:
                data = dataset[()]
            else:  # in blocks, so another thread gets the GIL between them
                data = np.empty(dataset.shape, dataset.dtype)
                rows = max(1, BLOCK_BYTES // max(1, data[0].nbytes))
                for start in range(0, len(data), rows):
                    data[start:start + rows] = dataset[start:start + rows]
        return np.array([s.decode() if isinstance(s, bytes) else s for s in data]) if data.dtype == object else data

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of one array, without reading it."""
        import h5py

        with h5py.File(self.path, "r") as f:
            return tuple(f[name].shape)

    @property
    def title(self) -> str:
        return self.name or self.path.stem

    def numbers(self, name: str, ndim: int | None = None, length: int | None = None) -> np.ndarray:
        """Array `name` checked to hold finite-typed numbers (booleans count) of `ndim` dimensions and
        `length` rows: a stored result whose contents do not fit raises a `WorkbenchError` naming it."""
        if name not in self.names:
            raise self.wrong_contents(f"it has no {name!r} array")
        data = self[name]
        if data.dtype.kind not in "biuf":
            found = "text" if data.dtype.kind in "USO" else f"values of type {data.dtype}"
            raise self.wrong_contents(f"its {name!r} array holds {found}, not numbers")
        if ndim is not None and data.ndim != ndim:
            raise self.wrong_contents(f"its {name!r} array has {data.ndim} dimensions, not {ndim}")
        if length is not None and (data.ndim == 0 or len(data) != length):
            raise self.wrong_contents(f"its {name!r} array has {len(data) if data.ndim else 0} rows, not {length}")
        return data

    def wrong_contents(self, what: str) -> WorkbenchError:
        """The error for contents that do not fit the artifact's kind."""
        return WorkbenchError(f"The stored {self.kind} result {self.title!r} does not hold what a {self.kind} "
                              f"result holds: {what}.", "It is computed again when next needed; or delete it.")


@contextmanager
def reading(artifact: Artifact):
    """Build an object from a stored result: a provenance field that is missing or of the wrong type,
    or an array that does not fit another, raises a `WorkbenchError` naming the result instead of a
    traceback, so the caller can compute it again."""
    try:
        yield
    except WorkbenchError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        detail = f"no {exc.args[0]!r} field" if isinstance(exc, KeyError) and exc.args else str(exc)[:200]
        raise artifact.wrong_contents(detail or type(exc).__name__) from exc


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
            layout = {key: (tuple(f[key].shape), f[key].dtype.kind) for key in f.keys()
                      if isinstance(f[key], h5py.Dataset)}
            return Artifact(path, str(f.attrs["kind"]), json.loads(f.attrs["provenance"]), list(f.keys()),
                            str(f.attrs.get("name", "")), layout)
    except WorkbenchError:
        raise
    except Exception as exc:
        raise WorkbenchError(f"Artifact {path.name} is damaged and cannot be read ({exc}).",
                             "Delete it and compute it again; other results are unaffected.") from exc


def text_column(column) -> np.ndarray:
    """A stored text column as str (HDF5 gives bytes back)."""
    return np.array([v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(column)])
