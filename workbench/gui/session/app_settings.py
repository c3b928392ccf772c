"""The application's own settings, kept across projects: the names it runs under, the recent
project folders (File → Recent projects) and where long jobs run their shards (Jobs → Run long jobs on…).

They live in an INI file in Qt's per-user settings folder, under the organisation and application
names below (on Linux `~/.config/dl-testing-workbench/DL Testing Workbench.ini`), or in
`$WORKBENCH_SETTINGS_DIR/workbench.ini` when that variable is set — the tests set it, so they never
touch a user's settings. A project's own settings (its layout, its views) stay in the project.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from PySide6.QtCore import QSettings

ORGANISATION = "dl-testing-workbench"
APPLICATION = "DL Testing Workbench"
SETTINGS_DIR_ENV = "WORKBENCH_SETTINGS_DIR"
RECENT_KEY = "recentProjects"
RECENT_LIMIT = 8
DISTRIBUTION_KEY = "distribution"


def app_settings() -> QSettings:
    folder = os.environ.get(SETTINGS_DIR_ENV)
    if folder:
        return QSettings(str(Path(folder) / "workbench.ini"), QSettings.Format.IniFormat)
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANISATION, APPLICATION)


def recent_projects() -> list[Path]:
    """The project folders opened last, newest first (whether they still exist or not)."""
    settings = app_settings()
    settings.sync()  # another window or process may have opened a project since
    try:
        stored = json.loads(str(settings.value(RECENT_KEY, "[]")))
    except ValueError:
        return []
    if not isinstance(stored, list):
        return []
    return [Path(p) for p in stored if isinstance(p, str) and p][:RECENT_LIMIT]


def _store(folders: list[Path]) -> None:
    settings = app_settings()
    settings.setValue(RECENT_KEY, json.dumps([str(f) for f in folders[:RECENT_LIMIT]]))
    settings.sync()


def add_recent_project(folder: str | Path) -> None:
    """Put `folder` first in the list (once), keeping the newest `RECENT_LIMIT`."""
    folder = Path(folder).expanduser().resolve()
    _store([folder] + [f for f in recent_projects() if f != folder])


def clear_recent_projects() -> None:
    _store([])


def stored_distribution():
    """Where long jobs that can shard run (`core.execution.sharding.Distribution`); this machine when never chosen, or
    when what is stored no longer reads as a choice."""
    from workbench.core.errors import WorkbenchError
    from workbench.core.execution.sharding import LOCAL, Distribution

    settings = app_settings()
    settings.sync()
    try:
        stored = json.loads(str(settings.value(DISTRIBUTION_KEY, "{}")))
        return Distribution(str(stored.get("executor", "local")), stored.get("address") or None,
                            stored.get("shards")) if isinstance(stored, dict) else LOCAL
    except (ValueError, TypeError, WorkbenchError):
        return LOCAL


def store_distribution(distribution) -> None:
    settings = app_settings()
    settings.setValue(DISTRIBUTION_KEY, json.dumps({"executor": distribution.executor, "address": distribution.address,
                                                    "shards": distribution.shards}))
    settings.sync()
