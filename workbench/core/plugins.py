"""Plugins: Python files or packages that add architectures, datasets, criteria and generators.

A plugin exposes `register(registry)`, where `registry` is a `PluginRegistry`. Plugins load only
from places the user chose: the `plugins/` folder of a source checkout, the user plugin folder
(shown by `workbench info`), folders named in `WORKBENCH_PLUGIN_PATH`, and installed packages that
declare the entry-point group `workbench.plugins`. A plugin that fails to import or register is
reported and skipped; it never stops start-up.
"""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import threading
import traceback
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable

from workbench.core.data.registry import DatasetEntry, register_dataset
from workbench.core.execution.jobs import FILE_MODULE_PREFIX, JobContext, device_description, share_cores
from workbench.core.models.architectures import Architecture, register_architecture
from workbench.core.resources import source_plugins_dir

ENTRY_POINT_GROUP = "workbench.plugins"
PLUGIN_TIMEOUT_S = 30.0  # a plugin still importing after this long is skipped (PyTorch alone can take 10 s cold)


@dataclass
class PluginReport:
    name: str
    origin: str
    ok: bool
    error: str = ""
    added: list[str] = field(default_factory=list)


class PluginRegistry:
    """What a plugin's `register` receives: one method per kind of extension.

    What a plugin adds is held back until its `register` has returned, and then added all at once:
    a plugin that fails half-way leaves nothing registered. A name the workbench already has (a
    built-in architecture, dataset or criterion, or another plugin's) is refused unless the plugin
    passes `override=True`. The callables a plugin gives (`build`, `load`, `missing`) are wrapped so
    that one that raises or returns nothing is reported as that plugin's fault, in words.
    """

    def __init__(self):
        self.extensions: dict[str, dict[str, Any]] = {"criterion": {}, "generator": {}}
        self._plugin = ""

    def add_architecture(self, name: str, build, input_shape, description: str = "", override: bool = False) -> None:
        shape = tuple(input_shape)  # checked now, inside the plugin's register: a bad one fails the plugin
        if len(shape) != 3 or not all(isinstance(d, int) and d > 0 for d in shape):
            raise ValueError(f"the architecture {name!r} needs input_shape (C, H, W), not {input_shape!r}")
        guarded = _guarded(build, self._plugin, f"architecture {name!r}", "build(num_classes)", "a torch module")
        architecture = Architecture(name, guarded, shape, str(description))
        self._stage("architecture", name, override, lambda: register_architecture(architecture))

    def add_dataset(self, name: str, load, title: str = "", missing=None, install: str = "",
                    override: bool = False) -> None:
        from workbench.core.data.dataset import Dataset

        load = _guarded(load, self._plugin, f"dataset {name!r}", "load()", "a Dataset", Dataset)
        check = _availability(missing, self._plugin, name)
        self._stage("dataset", name, override,
                    lambda: register_dataset(DatasetEntry(name, title or name, load, check, install)))

    def add_criterion(self, name: str, factory, override: bool = False) -> None:
        from workbench.core.coverage.registry import add_plugin_criterion

        name = str(name).lower()  # criteria are asked for by lower-case name, as the built-ins are

        def apply() -> None:
            self.extensions["criterion"][name] = factory
            add_plugin_criterion(name, factory)

        self._stage("criterion", name, override, apply)

    def add_generator(self, name: str, factory, override: bool = False) -> None:
        from workbench.core.generation.registry import add_plugin_generator

        def apply() -> None:
            self.extensions["generator"][name] = factory
            add_plugin_generator(name, factory)

        self._stage("generator", name, override, apply)

    def _stage(self, kind: str, name: str, override: bool, apply: Callable[[], None]) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a {kind} needs a name, not {name!r}")
        if _taken(kind, name) and not override:
            raise ValueError(f"the {kind} {name!r} exists already; pass override=True to replace it")
        loading = getattr(threading.current_thread(), "plugin_load", None)
        if loading is None:  # not from a plugin being loaded (a test, a script): added at once
            apply()
        elif not loading.abandoned:  # an abandoned plugin's late additions are dropped
            if any(k == kind and n == name for k, n, _, _ in loading.pending):
                raise ValueError(f"the plugin adds the {kind} {name!r} twice")
            replaces = override and _taken(kind, name)
            loading.pending.append((kind, name, replaces, apply))


@dataclass
class _Loading:
    """One plugin's load: what it added so far, and whether it was given up on (too slow)."""

    pending: list = field(default_factory=list)  # (kind, name, whether it replaces one, apply)
    abandoned: bool = False

    def commit(self) -> list[str]:
        for _, _, _, apply in self.pending:
            apply()
        return [f"{kind} {name}" + (" (replacing the existing one)" if replaces else "")
                for kind, name, replaces, _ in self.pending]


def _taken(kind: str, name: str) -> bool:
    from workbench.core.data.registry import dataset_entries
    from workbench.core.models.architectures import architectures

    if kind == "architecture":
        return any(name == a.name or name in a.aliases for a in architectures())
    if kind == "dataset":
        return any(name == e.name for e in dataset_entries())
    if kind == "criterion":
        from workbench.core.coverage.registry import BUILTIN, PLUGIN_CRITERIA

        return name.lower() in BUILTIN or name in PLUGIN_CRITERIA
    if kind == "generator":
        from workbench.core.generation import registry as generators

        return name in generators.BUILTIN or name in generators.PLUGIN_GENERATORS
    return name in REGISTRY.extensions.get(kind, {})


def _guarded(fn, plugin: str, what: str, call: str, returns: str, kind: type | None = None):
    """`fn` whose failures and empty returns are a `WorkbenchError` that names the plugin."""
    from workbench.core.errors import WorkbenchError

    def run(*args, **kwargs):
        try:
            result = fn(*args, **kwargs)
        except WorkbenchError:
            raise
        except Exception as exc:
            raise WorkbenchError(f"The plugin {plugin!r} failed in {call} of its {what}: {type(exc).__name__}: {exc}",
                                 "Fix the plugin, or remove it from the plugin folder.") from exc
        if result is None or (kind is not None and not isinstance(result, kind)):
            raise WorkbenchError(f"The plugin {plugin!r}'s {call} of its {what} returned "
                                 f"{type(result).__name__}, not {returns}.", "Fix the plugin.")
        return result

    return run


def _availability(missing, plugin: str, name: str):
    """A plugin's `missing()`, where one that raises means the dataset cannot be loaded, and says why."""
    def check():
        if missing is None:
            return None
        try:
            reason = missing()
        except Exception as exc:
            return f"the plugin {plugin!r} could not tell ({type(exc).__name__}: {exc})"
        return None if reason is None else str(reason)

    return check


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


MODULE_PREFIX = FILE_MODULE_PREFIX  # the name of a plugin's module, loaded from its file


def _import_file(path: Path):
    name = f"{MODULE_PREFIX}{path.stem}"
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


class _ThreadsPrints(io.TextIOBase):
    """`sys.stdout` while a plugin loads: what its thread prints goes to stderr, what any other thread prints goes
    where it went. (`contextlib.redirect_stdout` in the plugin's thread would, if the plugin were abandoned and
    finished later, set back the stdout of that earlier moment in the middle of whatever runs then.)"""

    def __init__(self, stdout, thread: threading.Thread):
        super().__init__()
        self.stdout, self.thread = stdout, thread

    def _stream(self):
        return sys.stderr if threading.current_thread() is self.thread else self.stdout

    def write(self, text: str) -> int:
        return self._stream().write(text)

    def flush(self) -> None:
        self._stream().flush()


def _register(name: str, origin: str, load) -> None:
    """Import and register one plugin on a thread of its own, with its prints sent to stderr (so
    they never mix into `--json` output); one that has not finished in `PLUGIN_TIMEOUT_S` is skipped."""
    outcome: dict[str, BaseException | None] = {}

    def run() -> None:
        try:
            module = load()
            register = getattr(module, "register", None)
            if not callable(register):
                raise AttributeError("the plugin has no register(registry) function")
            register(REGISTRY)
            outcome["error"] = None
        except BaseException as exc:  # a broken plugin is reported, never fatal, whatever it raises
            outcome["error"] = exc

    REGISTRY._plugin = name
    loading = _Loading()
    worker = threading.Thread(target=run, name=f"plugin {name}", daemon=True)
    worker.plugin_load = loading  # what `PluginRegistry._stage` adds to, from this thread only
    stdout = sys.stdout
    sys.stdout = _ThreadsPrints(stdout, worker)
    worker.start()
    worker.join(PLUGIN_TIMEOUT_S)
    sys.stdout = stdout  # an abandoned plugin prints wherever stdout then is, and never sets it back later
    if "error" not in outcome:  # still running: whatever it registers later is never added
        loading.abandoned = True
        _REPORTS.append(PluginReport(name, origin, False, f"it did not finish loading within {PLUGIN_TIMEOUT_S:g} s"))
        return
    exc = outcome["error"]
    if exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            raise exc
        last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" ({Path(last.filename).name}, line {last.lineno})" if last else ""
        _REPORTS.append(PluginReport(name, origin, False, f"{type(exc).__name__}: {exc}{where}{_api_hint(exc)}"))
        return
    try:
        added = loading.commit()
    except Exception as exc:  # built and checked while staging, so this is a registry's own refusal
        _REPORTS.append(PluginReport(name, origin, False, f"{type(exc).__name__}: {exc}"))
        return
    _REPORTS.append(PluginReport(name, origin, True, added=added))


def _api_hint(exc: BaseException) -> str:
    """What a plugin that imports a workbench module there is not (one written against an older layout)
    should import instead."""
    missing = getattr(exc, "name", None) or ""
    if not isinstance(exc, ModuleNotFoundError) or not missing.startswith("workbench."):
        return ""
    return (f" — the workbench has no module {missing}. A plugin imports datasets from workbench.core.data "
            "(Dataset, DatasetCard, Split, stratified_split) and workbench.core.data.registry (load_dataset), "
            "criteria from workbench.core.coverage.protocol, generators from workbench.core.generation.protocol; "
            "plugins/README.md lists them")


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


@dataclass
class StartupReport:
    device: str
    plugins: list = field(default_factory=list)  # PluginReport per plugin


def warm_up(ctx: JobContext) -> StartupReport:
    """Pick the device, share the cores and load plugins: a GUI's first job, off its UI thread (the
    application has imported PyTorch behind its splash screen by then; a window opened without it,
    as in the tests, imports it here)."""
    ctx.progress(0, 2, "PyTorch and the device")
    device = device_description(ctx.device)
    share_cores()
    ctx.progress(1, 2, "loading plugins")
    reports = load_plugins()
    ctx.progress(2, 2, "ready")
    return StartupReport(device, reports)
