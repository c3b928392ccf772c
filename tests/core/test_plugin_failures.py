"""Plugins that fail are reported and leave nothing behind: a failed plugin registers nothing, a
built-in name is not replaced unless the plugin says so, plugin prints never reach stdout, a plugin's
loader that raises or returns nothing is an error in words, and a plugin that hangs at import is
skipped after a time limit."""

from __future__ import annotations

import json
import textwrap

import pytest

from workbench.core.errors import WorkbenchError

HALF_DONE = '''
def build(num_classes=10):
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))

def register(registry):
    registry.add_architecture("half-net", build, (1, 8, 8))
    raise RuntimeError("failed after registering")
'''
SHADOWS = '''
def register(registry):
    registry.add_architecture("lenet5", lambda n=10: None, (1, 28, 28))
'''
OVERRIDES = '''
def build(num_classes=10):
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))

def register(registry):
    registry.add_architecture("digits-net", build, (1, 8, 8), override=True)
'''
PRINTS = '''
print("hello from a plugin at import")

def register(registry):
    print("hello from register")
'''
BROKEN_CALLABLES = '''
def build_none(num_classes=10):
    return None

def build_raises(num_classes=10):
    raise KeyError("weights")

def load_raises():
    raise ValueError("no such file")

def load_none():
    return None

def missing_raises():
    raise OSError("disk gone")

def register(registry):
    registry.add_architecture("none-net", build_none, (1, 8, 8))
    registry.add_architecture("raise-net", build_raises, (1, 8, 8))
    registry.add_dataset("raise-data", load_raises)
    registry.add_dataset("none-data", load_none)
    registry.add_dataset("unsure-data", load_none, missing=missing_raises)
'''
CUSTOM_BASE = '''
class Weird(BaseException):
    pass

raise Weird("not an Exception")
'''
SLEEPS = '''
import time
time.sleep(30)

def register(registry):
    registry.add_architecture("late-net", lambda n=10: None, (1, 8, 8))
'''


@pytest.fixture
def load(tmp_path, monkeypatch, isolated_plugins):
    """load(**plugins) → the reports of those plugin files (name → source)."""
    def run(**sources):
        folder = tmp_path / "plugins"
        folder.mkdir(exist_ok=True)
        for name, text in sources.items():
            (folder / f"{name}.py").write_text(textwrap.dedent(text))
        monkeypatch.setenv("WORKBENCH_PLUGIN_PATH", str(folder))
        return {r.name: r for r in isolated_plugins.load_plugins(force=True) if str(folder) in r.origin}
    return run


def test_a_plugin_that_fails_after_registering_leaves_nothing_registered(load):
    from workbench.core.models.architectures import architectures

    reports = load(half_done=HALF_DONE)
    assert not reports["half_done"].ok and "failed after registering" in reports["half_done"].error
    assert "half-net" not in {a.name for a in architectures()}


def test_a_built_in_name_is_protected_unless_the_plugin_overrides_it(load):
    from workbench.core.models.architectures import get_architecture

    reports = load(shadows=SHADOWS, overrides=OVERRIDES)
    assert not reports["shadows"].ok and "exists already" in reports["shadows"].error
    assert get_architecture("lenet5").build(10) is not None  # the built-in still builds
    assert reports["overrides"].ok and reports["overrides"].added == ["architecture digits-net (replacing the existing one)"]


def test_plugin_prints_never_reach_stdout(load, capsys):
    reports = load(prints=PRINTS)
    out, err = capsys.readouterr()
    assert reports["prints"].ok and out == ""
    assert "hello from a plugin at import" in err and "hello from register" in err


def test_the_cli_json_output_stays_json_with_a_printing_plugin(tmp_path, monkeypatch, isolated_plugins, capsys,
                                                               digits_model_file):
    from cli_helpers import run_cli

    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "prints.py").write_text(textwrap.dedent(PRINTS))
    monkeypatch.setenv("WORKBENCH_PLUGIN_PATH", str(folder))
    rc, out, _ = run_cli(capsys, "evaluate", "--model", digits_model_file, "--data", "digits", "--json")
    assert rc == 0 and json.loads(out)["accuracy"] > 0.5


def test_broken_builders_and_loaders_are_errors_in_words(load, fresh_dataset_cache):
    from workbench.core.data.registry import dataset_status, load_dataset
    from workbench.core.models.architectures import get_architecture

    assert load(broken=BROKEN_CALLABLES)["broken"].ok
    with pytest.raises(WorkbenchError, match="build.*returned NoneType"):
        get_architecture("none-net").build(10)
    with pytest.raises(WorkbenchError, match="failed in build.*KeyError"):
        get_architecture("raise-net").build(10)
    with pytest.raises(WorkbenchError, match="failed in load.*no such file"):
        load_dataset("raise-data")
    with pytest.raises(WorkbenchError, match="returned NoneType, not a Dataset"):
        load_dataset("none-data")
    status = {row["name"]: row for row in dataset_status()}  # `workbench info` lists them without crashing
    assert not status["unsure-data"]["available"] and "could not tell" in status["unsure-data"]["reason"]


def test_a_custom_base_exception_at_import_is_reported(load):
    reports = load(custom=CUSTOM_BASE)
    assert not reports["custom"].ok and "Weird" in reports["custom"].error


def test_a_plugin_that_hangs_at_import_is_skipped_after_the_time_limit(load, monkeypatch, isolated_plugins):
    from workbench.core.models.architectures import architectures

    register = isolated_plugins._register

    def with_limit(name, origin, loader):
        # A short limit for the plugin that sleeps 30 s, the usual one for the others: a loaded machine may
        # take longer than a short limit to import even a small file.
        monkeypatch.setattr(isolated_plugins, "PLUGIN_TIMEOUT_S", 0.5 if name == "sleeps" else 30.0)
        register(name, origin, loader)

    monkeypatch.setattr(isolated_plugins, "_register", with_limit)
    reports = load(sleeps=SLEEPS, good=OVERRIDES.replace("override=True", "override=False").replace(
        '"digits-net"', '"good-net"'))
    # Skipped, not waited for: had loading waited the 30 s, the plugin would have registered late-net.
    assert not reports["sleeps"].ok and "did not finish loading" in reports["sleeps"].error
    assert reports["good"].ok and "good-net" in {a.name for a in architectures()}
    assert "late-net" not in {a.name for a in architectures()}


@pytest.mark.parametrize("statement", ["from workbench.core.dataset_registry import load_dataset",
                                       "import workbench.core.model_io"])
def test_a_plugin_that_imports_a_module_there_is_not_is_told_where_the_api_is(load, statement):
    reports = load(older=f"{statement}\n\ndef register(registry):\n    pass\n")
    error = reports["older"].error
    assert not reports["older"].ok and "ModuleNotFoundError" in error and "older.py, line 1" in error
    assert "workbench.core.data.registry (load_dataset)" in error and "plugins/README.md" in error


def test_a_plugin_that_misses_another_package_gets_no_api_hint(load):
    reports = load(needs='''import a_package_nobody_has\n\ndef register(registry):\n    pass\n''')
    assert "a_package_nobody_has" in reports["needs"].error and "plugins/README.md" not in reports["needs"].error



def test_an_abandoned_plugin_that_finishes_later_leaves_stdout_alone(load, monkeypatch, isolated_plugins, capsys):
    """Whatever runs when an abandoned plugin finally finishes keeps its stdout (a later command's `--json`
    document went to the stdout of the moment the plugin began loading)."""
    import io
    import sys
    import threading

    monkeypatch.setattr(isolated_plugins, "PLUGIN_TIMEOUT_S", 0.3)
    reports = load(slow='''
        import time
        time.sleep(1.0)
        print("late")
        ''')
    assert not reports["slow"].ok
    later = io.StringIO()
    monkeypatch.setattr(sys, "stdout", later)  # the next command's stdout
    for thread in threading.enumerate():
        if thread.name == "plugin slow":
            thread.join(10)
    assert sys.stdout is later
