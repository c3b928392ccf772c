"""Plugins from WORKBENCH_PLUGIN_PATH and the `workbench.plugins` entry-point group; broken ones are
reported and skipped while the others still load."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

GOOD = '''
def build(num_classes=10):
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))

def tiny():
    from workbench.core.data.dataset import Dataset, DatasetCard, Split
    x = np.zeros((4, 1, 8, 8), np.uint8)
    return Dataset("plug-data", ["a", "b"], {"test": Split(x, np.array([0, 1, 0, 1]))},
                   DatasetCard("tiny", "a plugin", "MIT"))

import numpy as np

def register(registry):
    registry.add_architecture("plug-net", build, (1, 8, 8), "a plugin net")
    registry.add_dataset("plug-data", tiny, "a plugin dataset")
    registry.add_criterion("plug-criterion", dict)
'''


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def plugin_folder(tmp_path, monkeypatch, isolated_plugins):
    folder = tmp_path / "plugins"
    _write(folder, "good.py", GOOD)
    _write(folder, "syntax_error.py", "def register(registry)\n    pass\n")
    _write(folder, "raises.py", "def register(registry):\n    raise RuntimeError('plugin exploded')\n")
    _write(folder, "no_register.py", "VALUE = 1\n")
    _write(folder, "bad_import.py", "import module_that_is_not_installed_xyz\n")
    _write(folder, "exits.py", "import sys\nsys.exit(3)\n")
    _write(folder, "pkg_plugin/__init__.py", "def register(registry):\n    registry.add_generator('pkg-gen', list)\n")
    _write(folder, "_private.py", "raise RuntimeError('never imported')\n")
    _write(folder, "notes.txt", "not a plugin")
    monkeypatch.setenv("WORKBENCH_PLUGIN_PATH", str(folder))
    return folder


def test_folder_plugins_load_and_broken_ones_are_reported(plugin_folder):
    from workbench.core import plugins

    reports = {r.name: r for r in plugins.load_plugins(force=True) if str(plugin_folder) in r.origin}
    assert set(reports) == {"good", "syntax_error", "raises", "no_register", "bad_import", "exits", "pkg_plugin"}
    assert reports["good"].ok
    assert reports["good"].added == ["architecture plug-net", "dataset plug-data", "criterion plug-criterion"]
    assert reports["pkg_plugin"].ok and reports["pkg_plugin"].added == ["generator pkg-gen"]
    assert not reports["syntax_error"].ok and "SyntaxError" in reports["syntax_error"].error
    assert "syntax_error.py" in reports["syntax_error"].error and "line 1" in reports["syntax_error"].error
    assert not reports["raises"].ok and "plugin exploded" in reports["raises"].error
    assert "raises.py, line 2" in reports["raises"].error
    assert not reports["no_register"].ok and "register" in reports["no_register"].error
    assert not reports["bad_import"].ok and "module_that_is_not_installed_xyz" in reports["bad_import"].error
    assert not reports["exits"].ok and "SystemExit" in reports["exits"].error
    assert list(plugins._REPORTS) == plugins.load_plugins()  # loaded once; force reloads


def test_plugin_additions_are_usable(plugin_folder, fresh_dataset_cache):
    from workbench.core import plugins
    from workbench.core.data.registry import dataset_status, load_dataset
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.architectures import get_architecture
    from workbench.core.models.training import train

    plugins.load_plugins(force=True)
    assert get_architecture("plug-net").input_shape == (1, 8, 8)
    assert "plug-data" in {r["name"] for r in dataset_status()}
    assert load_dataset("plug-data").class_names == ["a", "b"]
    assert plugins.REGISTRY.extensions["criterion"]["plug-criterion"] is dict
    assert plugins.REGISTRY.extensions["generator"]["pkg-gen"] is list
    result = train(JobContext("cpu"), "plug-net", load_dataset("digits"), epochs=1)
    assert result.model.module(torch.zeros(1, 1, 8, 8)).shape == (1, 10)


def test_entry_point_plugins(tmp_path, monkeypatch, isolated_plugins):
    """An installed distribution declaring the group is found through importlib.metadata."""
    site = tmp_path / "site"
    _write(site, "wb_test_ep_good.py", "def register(registry):\n    registry.add_criterion('ep-criterion', set)\n")
    _write(site, "wb_test_ep_bad.py", "def register(registry):\n    raise ValueError('bad entry point')\n")
    dist = site / "wb_test_plugins-0.1.dist-info"
    _write(dist, "METADATA", "Metadata-Version: 2.1\nName: wb-test-plugins\nVersion: 0.1\n")
    _write(dist, "entry_points.txt", "[workbench.plugins]\nep_good = wb_test_ep_good\nep_bad = wb_test_ep_bad\n"
                                     "ep_missing = wb_test_ep_not_there\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("WORKBENCH_PLUGIN_PATH", raising=False)
    reports = {r.name: r for r in isolated_plugins.load_plugins(force=True)}
    assert reports["ep_good"].ok and reports["ep_good"].origin == "entry point wb_test_ep_good"
    assert isolated_plugins.REGISTRY.extensions["criterion"]["ep-criterion"] is set
    assert not reports["ep_bad"].ok and "bad entry point" in reports["ep_bad"].error
    assert not reports["ep_missing"].ok and "ModuleNotFoundError" in reports["ep_missing"].error


def test_plugin_path_may_list_several_folders(tmp_path, monkeypatch, isolated_plugins):
    import os

    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "one.py", "def register(r):\n    r.add_criterion('one', int)\n")
    _write(b, "two.py", "def register(r):\n    r.add_criterion('two', int)\n")
    monkeypatch.setenv("WORKBENCH_PLUGIN_PATH", os.pathsep.join([str(a), str(tmp_path / "missing"), str(b)]))
    assert {a, b} <= set(isolated_plugins.plugin_folders())
    names = {r.name for r in isolated_plugins.load_plugins(force=True) if r.ok}
    assert {"one", "two"} <= names


def test_a_dataset_built_from_another_registered_dataset_loads(monkeypatch):
    """A plugin's loader may call load_dataset itself (the example plugin does): no deadlock."""
    from workbench.core.data import registry as dataset_registry
    from workbench.core.data.dataset import Dataset

    def derived() -> Dataset:
        digits = dataset_registry.load_dataset("digits")
        return Dataset("digits-test-only", digits.class_names, {"test": digits.split("test")}, digits.card)

    monkeypatch.setitem(dataset_registry._REGISTRY, "digits-test-only",
                        dataset_registry.DatasetEntry("digits-test-only", "digits, test split", derived))
    monkeypatch.delitem(dataset_registry._CACHE, "digits-test-only", raising=False)
    try:
        loaded = dataset_registry.load_dataset("digits-test-only")
        assert list(loaded.splits) == ["test"] and len(loaded.split("test")) == 359
    finally:
        dataset_registry._CACHE.pop("digits-test-only", None)


def test_the_example_criterion_plugin_measures_and_saves(monkeypatch):
    """plugins/example_criterion.py: covered above half the training maximum, and its state round-trips."""
    import importlib.util

    import numpy as np

    from workbench.core.resources import source_plugins_dir

    spec = importlib.util.spec_from_file_location("example_criterion", source_plugins_dir() / "example_criterion.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    train = np.array([[4.0, 2.0, 0.0], [1.0, 1.0, 0.0]])
    test = np.array([[2.5, 0.5, 3.0], [1.0, 0.9, 1.0]])
    criterion = plugin.HalfMaxCoverage().fit(train)
    criterion.update(test)
    # neuron 0: 2.5 > 4/2 covered; neuron 1: 0.9 < 2/2 not; neuron 2 never positive in training: never
    assert (criterion.coverage().covered, criterion.coverage().total) == (1, 3)
    assert criterion.profile(test).tolist() == [[True, False, False], [False, False, False]]
    restored = plugin.HalfMaxCoverage()
    restored.load_state_dict(criterion.state_dict())
    assert restored.coverage().covered == 1 and restored.matrix().tolist() == [[1, 0, 0]]
