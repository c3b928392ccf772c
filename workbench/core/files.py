"""Users' files are opened only when they are what they claim to be: a regular file or a folder.

A pipe given as a data or model file would block the reader forever, and a link to `/dev/zero` would
read without end; a folder or file that cannot be read must say so, not be reported as damaged.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from workbench.core.errors import WorkbenchError


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def regular_file(path: str | os.PathLike, what: str = "file") -> Path:
    """`path` if it is a regular file this process can read (links followed); otherwise a clear refusal."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError as exc:
        raise WorkbenchError(f"No {what} {path}.", "Check the path.") from exc
    except OSError as exc:
        raise WorkbenchError(f"Cannot look at the {what} {path}: {exc.strerror}.", "Check the path and its "
                             "permissions.") from exc
    if stat.S_ISDIR(mode):
        raise WorkbenchError(f"The {what} {path} is a folder.", f"Give the {what} itself.")
    if not stat.S_ISREG(mode):
        raise WorkbenchError(f"The {what} {path} is {_kind(mode)}, which is never read.",
                             f"Give a regular {what}; copy the data into one first.")
    if not os.access(path, os.R_OK):
        raise WorkbenchError(f"The {what} {path} cannot be read: permission denied.",
                             "Fix its permissions, or copy it somewhere you can read it.")
    return path


def folder_entries(folder: str | os.PathLike, what: str = "folder") -> list[Path]:
    """The entries of a folder this process can read, sorted; otherwise a clear refusal."""
    folder = Path(folder)
    try:
        return sorted(folder.iterdir())
    except PermissionError as exc:
        raise WorkbenchError(f"The {what} {folder} cannot be read: permission denied.",
                             "Fix its permissions, or copy it somewhere you can read it.") from exc
    except OSError as exc:
        raise WorkbenchError(f"Cannot list the {what} {folder}: {exc.strerror}.", "Check the path.") from exc


def check_new_folder(path: str | os.PathLike, what: str = "the output") -> Path:
    """Refuse a path that exists and is not an empty folder (what is there is left alone); returns it."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise WorkbenchError(f"{path} exists and is not an empty folder; it is left as it is.",
                             f"Choose a new folder for {what}.")
    return path
