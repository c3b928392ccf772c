"""Where the bundled resources (weights, model cards, icons) and the documentation live.

In an installed wheel they are packaged as `workbench/resources` and `workbench/documentation`
(README.md, docs/ and plugins/README.md, laid out as in the repository); in a source checkout or an
editable install they are the top-level `resources/` folder and the repository itself.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent


def resources_dir() -> Path:
    for candidate in (_PACKAGE / "resources", _PACKAGE.parent / "resources"):
        if (candidate / "models").is_dir():
            return candidate
    raise FileNotFoundError("The workbench's resources folder is missing; reinstall the package.")


def documentation_dir() -> Path | None:
    """The folder holding README.md and docs/ (their relative links hold there), or None."""
    for candidate in (_PACKAGE / "documentation", _PACKAGE.parent):
        if (candidate / "README.md").is_file() and (candidate / "docs" / "methods").is_dir():
            return candidate
    return None


def source_plugins_dir() -> Path | None:
    """The `plugins/` folder of a source checkout, if this is one."""
    folder = _PACKAGE.parent / "plugins"
    return folder if folder.is_dir() else None
