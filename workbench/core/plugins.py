"""Plugins: Python files or packages that add architectures, datasets, criteria and generators.

A plugin exposes `register(registry)`, where `registry` is a `PluginRegistry`. Plugins load only
from places the user chose: the `plugins/` folder of a source checkout, the user plugin folder
(shown by `workbench info`), folders named in `WORKBENCH_PLUGIN_PATH`, and installed packages that
declare the entry-point group `workbench.plugins`. A plugin that fails to import or register is
reported and skipped; it never stops start-up.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from workbench.core.dataset_registry import DatasetEntry, register_dataset
from workbench.core.models import Architecture, register_architecture
from workbench.core.resources import source_plugins_dir

ENTRY_POINT_GROUP = "workbench.plugins"


@dataclass
class PluginReport:
    name: str
    origin: str
    ok: bool
    error: str = ""
    added: list[str] = field(default_factory=list)


class PluginRegistry:
    """What a plugin's `register` receives: one method per kind of extension."""

    def __init__(self):
        self.extensions: dict[str, dict[str, Any]] = {"criterion": {}, "generator": {}}
        self._added: list[str] = []

    def add_architecture(self, name: str, build, input_shape, description: str = "") -> None:
        register_architecture(Architecture(name, build, tuple(input_shape), description))
        self._added.append(f"architecture {name}")

    def add_dataset(self, name: str, load, title: str = "", missing=None, install: str = "") -> None:
        register_dataset(DatasetEntry(name, title or name, load, missing or (lambda: None), install))
        self._added.append(f"dataset {name}")

    def add_criterion(self, name: str, factory) -> None:
        self.extensions["criterion"][name] = factory
        self._added.append(f"criterion {name}")

    def add_generator(self, name: str, factory) -> None:
        self.extensions["generator"][name] = factory
        self._added.append(f"generator {name}")


REGISTRY = PluginRegistry()
_REPORTS: list[PluginReport] = []
_LOADED = False


def user_plugin_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("dl-workbench")) / "plugins"


def plugin_folders() -> list[Path]:
    folders = [source_plugins_dir(), user_plugin_dir()]
    folders += [Path(p) for p in os.environ.get("WORKBENCH_PLUGIN_PATH", "").split(os.pathsep) if p]
    return [f for f in folders if f and f.is_dir()]


def _candidates(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir()
                  if (p.suffix == ".py" and not p.name.startswith("_")) or (p / "__init__.py").exists())


def _import_file(path: Path):
    name = f"workbench_plugin_{path.stem}"
    target = path / "__init__.py" if path.is_dir() else path
    spec = importlib.util.spec_from_file_location(name, target,
                                                  submodule_search_locations=[str(path)] if path.is_dir() else None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _register(name: str, origin: str, load) -> None:
    REGISTRY._added = []
    try:
        module = load()
        register = getattr(module, "register", None)
        if not callable(register):
            raise AttributeError("the plugin has no register(registry) function")
        register(REGISTRY)
        _REPORTS.append(PluginReport(name, origin, True, added=list(REGISTRY._added)))
    except (Exception, SystemExit) as exc:  # a broken plugin is reported, never fatal
        last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" ({Path(last.filename).name}, line {last.lineno})" if last else ""
        _REPORTS.append(PluginReport(name, origin, False, f"{type(exc).__name__}: {exc}{where}"))


def load_plugins(force: bool = False) -> list[PluginReport]:
    """Discover and register every plugin once; returns one report per plugin."""
    global _LOADED
    if _LOADED and not force:
        return list(_REPORTS)
    _REPORTS.clear()
    for folder in plugin_folders():
        for path in _candidates(folder):
            _register(path.stem, str(path), lambda path=path: _import_file(path))
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _register(ep.name, f"entry point {ep.value}", ep.load)
    _LOADED = True
    return list(_REPORTS)
