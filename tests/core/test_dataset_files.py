"""Loaders for users' own data: IDX folders, NPZ, HDF5 (read lazily) and ImageFolder trees.

Every bad file is refused with a `WorkbenchError` that names the file and the check that failed.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from workbench.core.data.idx import read_idx
from workbench.core.data.registry import load_dataset
from workbench.core.errors import WorkbenchError

RNG = np.random.default_rng(1234)
X8 = RNG.integers(0, 256, (24, 8, 8), dtype=np.uint8)
Y8 = (np.arange(24) % 3).astype(np.uint8)


def _idx_bytes(array: np.ndarray, type_code: int) -> bytes:
    """An IDX file written by hand from the format description (big-endian header)."""
    header = bytes([0, 0, type_code, array.ndim]) + b"".join(struct.pack(">I", s) for s in array.shape)
    return header + array.tobytes()


def _write_idx(path: Path, array: np.ndarray, compress: bool = False) -> None:
    """A uint8 array written as an IDX file (gzipped with `compress`)."""
    data = _idx_bytes(array, 0x08)
    path.write_bytes(gzip.compress(data) if compress else data)


def _idx_folder(root: Path, x=X8, y=Y8, prefix="train", compress=False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    _write_idx(root / f"{prefix}-images-idx3-ubyte", x, compress)
    _write_idx(root / f"{prefix}-labels-idx1-ubyte", y, compress)
    return root


def _refused(path, *words):
    with pytest.raises(WorkbenchError) as err:
        load_dataset(str(path))
    text = str(err.value)
    for w in words:
        assert w in text, f"{w!r} not in {text!r}"
    assert err.value.hint, "every refusal says what to do"
    return err.value


# --- IDX -----------------------------------------------------------------------------------------

def test_idx_reader_against_hand_written_bytes(tmp_path):
    x = RNG.integers(0, 256, (3, 4, 5), dtype=np.uint8)
    (tmp_path / "a").write_bytes(_idx_bytes(x, 0x08))
    np.testing.assert_array_equal(read_idx(tmp_path / "a"), x)
    # big-endian int16 and float32 payloads
    v = np.array([[-2, 300], [7, -32000]], dtype=">i2")
    (tmp_path / "b").write_bytes(_idx_bytes(v, 0x0B))
    np.testing.assert_array_equal(read_idx(tmp_path / "b"), [[-2, 300], [7, -32000]])
    f = np.array([0.5, -1.25, 3.0], dtype=">f4")
    (tmp_path / "c").write_bytes(_idx_bytes(f, 0x0D))
    np.testing.assert_array_equal(read_idx(tmp_path / "c"), [0.5, -1.25, 3.0])


def test_idx_gzip_is_detected_by_magic_not_by_name(tmp_path):
    x = RNG.integers(0, 256, (2, 3, 3), dtype=np.uint8)
    (tmp_path / "plain.gz").write_bytes(_idx_bytes(x, 0x08))  # named .gz but not compressed
    (tmp_path / "packed").write_bytes(gzip.compress(_idx_bytes(x, 0x08)))  # compressed, no suffix
    np.testing.assert_array_equal(read_idx(tmp_path / "plain.gz"), x)
    np.testing.assert_array_equal(read_idx(tmp_path / "packed"), x)


@pytest.mark.parametrize("compress", [False, True])
def test_idx_folder_pairs_train_and_test(tmp_path, compress):
    root = _idx_folder(tmp_path / "mine", compress=compress)
    _idx_folder(root, X8[:6], Y8[:6], prefix="t10k", compress=compress)
    ds = load_dataset(str(root))
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 24, "test": 6}
    assert ds.class_names == ["0", "1", "2"]
    assert ds.image_shape == (1, 8, 8)
    np.testing.assert_array_equal(ds.split("train").images[:, 0], X8)
    np.testing.assert_array_equal(ds.split("test").labels, Y8[:6])


def test_idx_folder_accepts_test_prefix(tmp_path):
    ds = load_dataset(str(_idx_folder(tmp_path / "d", prefix="test")))
    assert list(ds.splits) == ["test"]


def test_idx_bad_magic(tmp_path):
    root = _idx_folder(tmp_path / "d")
    raw = bytearray((root / "train-images-idx3-ubyte").read_bytes())
    raw[0] = 7
    (root / "train-images-idx3-ubyte").write_bytes(bytes(raw))
    _refused(root, "train-images-idx3-ubyte", "magic")


def test_idx_bad_type_byte(tmp_path):
    root = _idx_folder(tmp_path / "d")
    raw = bytearray((root / "train-labels-idx1-ubyte").read_bytes())
    raw[2] = 0x42
    (root / "train-labels-idx1-ubyte").write_bytes(bytes(raw))
    _refused(root, "train-labels-idx1-ubyte", "magic")


def test_idx_truncated_data(tmp_path):
    root = _idx_folder(tmp_path / "d")
    raw = (root / "train-images-idx3-ubyte").read_bytes()
    (root / "train-images-idx3-ubyte").write_bytes(raw[:-10])
    err = _refused(root, "train-images-idx3-ubyte", "truncated")
    assert "(24, 8, 8)" in err.message  # says what the header promised


def test_idx_truncated_header(tmp_path):
    root = _idx_folder(tmp_path / "d")
    (root / "train-images-idx3-ubyte").write_bytes(bytes([0, 0, 8, 3, 0, 0]))
    _refused(root, "header", "truncated")


def test_idx_truncated_gzip(tmp_path):
    root = _idx_folder(tmp_path / "d", compress=True)
    raw = (root / "train-images-idx3-ubyte").read_bytes()
    (root / "train-images-idx3-ubyte").write_bytes(raw[: len(raw) // 2])
    _refused(root, "train-images-idx3-ubyte", "complete")


def test_idx_count_mismatch(tmp_path):
    root = _idx_folder(tmp_path / "d", X8, Y8[:20])
    _refused(root, "24 images", "20 labels")


def test_idx_images_without_labels(tmp_path):
    root = _idx_folder(tmp_path / "d")
    (root / "train-labels-idx1-ubyte").unlink()
    _refused(root, "train", "not both")


def test_idx_swapped_files(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    _write_idx(root / "train-images-idx3-ubyte", Y8)  # labels where images should be
    _write_idx(root / "train-labels-idx1-ubyte", X8)
    _refused(root, "expected (N, rows, cols)")


def test_idx_empty(tmp_path):
    root = _idx_folder(tmp_path / "d", X8[:0], Y8[:0])
    _refused(root, "holds no images")


# --- NPZ ------------------------------------------------------------------------------------------

def test_npz_single_split_uint8(tmp_path):
    np.savez(tmp_path / "d.npz", x=X8, y=Y8)
    ds = load_dataset(str(tmp_path / "d.npz"))
    assert list(ds.splits) == ["test"] and ds.image_shape == (1, 8, 8)
    np.testing.assert_allclose(ds.split("test").numpy()[:, 0], X8 / 255.0, atol=1e-7)
    np.testing.assert_array_equal(ds.split("test").labels, Y8)


def test_npz_keras_layout_class_names_one_hot_and_colour(tmp_path):
    x_train = RNG.random((10, 6, 5, 3)).astype(np.float32)  # N,H,W,C float in [0, 1]
    y_train = np.eye(4)[np.arange(10) % 4]  # one-hot
    x_test = RNG.random((3, 3, 6, 5)).astype(np.float64)  # N,C,H,W
    np.savez(tmp_path / "k.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=np.array([3, 0, 1]),
             class_names=np.array(["ant", "bee", "cat", "dog"]))
    ds = load_dataset(str(tmp_path / "k.npz"))
    assert ds.class_names == ["ant", "bee", "cat", "dog"]
    assert ds.image_shape == (3, 6, 5)
    np.testing.assert_array_equal(ds.split("train").labels, np.arange(10) % 4)
    np.testing.assert_allclose(ds.split("train").numpy(), x_train.transpose(0, 3, 1, 2))
    np.testing.assert_allclose(ds.split("test").numpy(), x_test.astype(np.float32))
    np.testing.assert_array_equal(ds.split("train").thumbnails()[0], np.rint(x_train[0] * 255).astype(np.uint8))


@pytest.mark.parametrize("name, arrays, words", [
    ("pickled", lambda: dict(x=np.array([object(), 1], dtype=object), y=Y8[:2]), ["pickled"]),
    ("keys", lambda: dict(images=X8, labels=Y8), ["images", "expected x and y"]),
    ("range", lambda: dict(x=X8 / 100.0, y=Y8), ["2.55", "[0, 1]"]),
    ("negative-floats", lambda: dict(x=X8 / 255.0 - 0.5, y=Y8), ["-0.5", "[0, 1]"]),
    ("nan", lambda: dict(x=np.full((2, 4, 4), np.nan), y=Y8[:2]), ["NaN"]),
    ("int-range", lambda: dict(x=X8.astype(np.int32) * 2, y=Y8), ["0–255"]),
    ("neg-label", lambda: dict(x=X8, y=Y8.astype(np.int64) - 1), ["negative class -1"]),
    ("label-range", lambda: dict(x=X8, y=Y8, class_names=np.array(["a", "b"])), ["class 2", "2 classes"]),
    ("count", lambda: dict(x=X8, y=Y8[:5]), ["24 images", "5 labels"]),
    ("empty", lambda: dict(x=X8[:0], y=Y8[:0]), ["holds no images"]),
    ("shape", lambda: dict(x=RNG.random((2, 4, 4, 5)), y=Y8[:2]), ["(2, 4, 4, 5)"]),
    ("fraction-labels", lambda: dict(x=X8, y=Y8 + 0.5), ["whole numbers"]),
    ("string-labels", lambda: dict(x=X8, y=np.array(["cat"] * 24)), ["integer class indices"]),
])
def test_npz_refusals(tmp_path, name, arrays, words):
    path = tmp_path / f"{name}.npz"
    np.savez(path, **arrays())
    err = _refused(path, *words)
    if name != "count":  # the message names the file (or the dataset made from it)
        assert path.stem in err.message


def test_npz_not_a_zip(tmp_path):
    (tmp_path / "junk.npz").write_bytes(RNG.integers(0, 256, 300, dtype=np.uint8).tobytes())
    err = _refused(tmp_path / "junk.npz", "junk.npz", "cannot be read as an NPZ file")
    assert "pickled" not in err.message


def test_npz_truncated(tmp_path):
    np.savez(tmp_path / "ok.npz", x=X8, y=Y8)
    raw = (tmp_path / "ok.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(raw[: len(raw) // 2])
    _refused(tmp_path / "cut.npz", "cut.npz")


# --- HDF5 -------------------------------------------------------------------------------------------

def _h5(path, **datasets):
    import h5py

    with h5py.File(path, "w") as f:
        attrs = datasets.pop("attrs", {})
        for k, v in datasets.items():
            f[k] = v
        for k, v in attrs.items():
            f.attrs[k] = v
    return path


def test_hdf5_root_with_class_names(tmp_path):
    path = _h5(tmp_path / "d.h5", x=X8, y=Y8, attrs={"class_names": ["a", "b", "c"]})
    ds = load_dataset(str(path))
    assert ds.class_names == ["a", "b", "c"]
    np.testing.assert_allclose(ds.split("test").numpy()[:, 0], X8 / 255.0, atol=1e-7)


def test_hdf5_train_test_groups(tmp_path):
    xf = RNG.random((7, 5, 5, 3)).astype(np.float32)
    path = _h5(tmp_path / "g.hdf5", **{"train/x": xf, "train/y": np.arange(7) % 2,
                                        "test/x": xf[:2], "test/y": np.array([1, 0])})
    ds = load_dataset(str(path))
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 7, "test": 2}
    assert ds.image_shape == (3, 5, 5)
    np.testing.assert_allclose(ds.split("train").numpy(), xf.transpose(0, 3, 1, 2))


def test_hdf5_is_read_lazily_in_batches(tmp_path):
    """Images are never read whole: each read asks for at most one batch, in any index order."""
    from workbench.core.data.readers import H5Images

    x = RNG.integers(0, 256, (50, 6, 6), dtype=np.uint8)
    ds = load_dataset(str(_h5(tmp_path / "big.h5", x=x, y=np.arange(50) % 5)))
    split = ds.split("test")
    assert isinstance(split.images, H5Images)
    reads = []

    class Recorder:
        def __init__(self, inner):
            self.inner, self.dtype = inner, inner.dtype

        def __len__(self):
            return len(self.inner)

        def __getitem__(self, index):
            out = self.inner[index]
            reads.append(len(out))
            return out

    split.images._ds = Recorder(split.images._ds)
    got = np.concatenate([xb.numpy() for _, xb, _ in split.batches(8)])
    np.testing.assert_allclose(got[:, 0], x / 255.0, atol=1e-7)
    assert reads and max(reads) <= 8 and len(reads) == 7
    # fancy, unsorted, repeated indices come back in the asked order
    idx = [17, 3, 3, 49, 0]
    np.testing.assert_array_equal(split.images[idx][:, 0], x[idx])
    np.testing.assert_array_equal(split.subset(idx).labels, (np.arange(50) % 5)[idx])


def test_hdf5_floats_outside_unit_range(tmp_path):
    _refused(_h5(tmp_path / "f.h5", x=X8 / 100.0, y=Y8), "f.h5", "[0, 1]")


def test_hdf5_bad_values_past_the_first_batch_are_caught_when_read(tmp_path):
    x = RNG.random((20, 4, 4)).astype(np.float32)
    x[15, 0, 0] = 7.0
    ds = load_dataset(str(_h5(tmp_path / "late.h5", x=x, y=np.zeros(20, np.int64))))
    with pytest.raises(WorkbenchError, match=r"\[0, 1\]"):
        for _ in ds.split("test").batches(8):
            pass


@pytest.mark.parametrize("name, content, words", [
    ("nox", {"images": X8}, ["no datasets x and y"]),
    ("neg", {"x": X8, "y": Y8.astype(np.int64) - 1}, ["negative class"]),
    ("empty", {"x": X8[:0], "y": Y8[:0]}, ["holds no images"]),
    ("dtype", {"x": X8.astype(np.int32), "y": Y8}, ["dtype int32"]),
])
def test_hdf5_refusals(tmp_path, name, content, words):
    _refused(_h5(tmp_path / f"{name}.h5", **content), *words)


def test_hdf5_not_hdf5(tmp_path):
    (tmp_path / "junk.h5").write_bytes(b"definitely not hdf5" * 20)
    _refused(tmp_path / "junk.h5", "junk.h5", "HDF5")


# --- ImageFolder --------------------------------------------------------------------------------------

def _tree(root: Path, classes, n=3, size=(6, 5), mode="L", splits=(None,)):
    from PIL import Image

    arrays = {}
    for split in splits:
        base = root / split if split else root
        for c in classes:
            (base / c).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                shape = size if mode == "L" else (*size, 3)
                a = RNG.integers(0, 256, shape, dtype=np.uint8)
                Image.fromarray(a, mode).save(base / c / f"{i}.png")
                arrays[(split, c, i)] = a
    return arrays


def test_image_folder_classes_sorted_by_name_grey(tmp_path):
    arrays = _tree(tmp_path / "imgs", ["zebra", "ant", "moth"])
    ds = load_dataset(str(tmp_path / "imgs"))
    assert ds.class_names == ["ant", "moth", "zebra"]
    assert ds.image_shape == (1, 6, 5)
    test = ds.split("test")
    assert np.bincount(test.labels).tolist() == [3, 3, 3]
    # the first image of class 'ant' (label 0) is ant/0.png
    np.testing.assert_array_equal(test.images[0, 0], arrays[(None, "ant", 0)])


def test_image_folder_rgb_with_train_and_test(tmp_path):
    arrays = _tree(tmp_path / "rgb", ["b", "a"], n=2, mode="RGB", splits=("train", "test"))
    ds = load_dataset(str(tmp_path / "rgb"))
    assert ds.image_shape == (3, 6, 5)
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 4, "test": 4}
    np.testing.assert_array_equal(ds.split("train").thumbnails()[0], arrays[("train", "a", 0)])


def test_image_folder_different_sizes_refused(tmp_path):
    from PIL import Image

    _tree(tmp_path / "t", ["a", "b"])
    Image.fromarray(np.zeros((9, 9), np.uint8)).save(tmp_path / "t" / "a" / "big.png")
    _refused(tmp_path / "t", "different sizes", "(9, 9)")


def test_image_folder_damaged_image_refused(tmp_path):
    _tree(tmp_path / "t", ["a", "b"])
    (tmp_path / "t" / "b" / "broken.png").write_bytes(b"not a png")
    _refused(tmp_path / "t", "broken.png")


def test_image_folder_without_images(tmp_path):
    (tmp_path / "empty" / "a").mkdir(parents=True)
    _refused(tmp_path / "empty", "holds no images")


def test_unknown_file_kind_and_missing_path(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    _refused(tmp_path / "notes.txt", "notes.txt")
    _refused(tmp_path / "nowhere.npz", "no such file")


# --- splits -----------------------------------------------------------------------------------------

def test_split_batches_cover_everything_in_order(digits):
    split = digits.split("test")
    starts, xs, ys = [], [], []
    for start, x, y in split.batches(100):
        starts.append(start)
        xs.append(x.numpy())
        ys.append(y.numpy())
    assert starts == list(range(0, len(split), 100))
    assert [len(y) for y in ys][-1] == len(split) % 100
    np.testing.assert_array_equal(np.concatenate(xs), split.numpy())
    np.testing.assert_array_equal(np.concatenate(ys), split.labels)
    idx = [5, 1, 300]
    (_, x, y), = list(split.batches(10, indices=idx))
    np.testing.assert_array_equal(x.numpy(), split.numpy()[idx])
    np.testing.assert_array_equal(y.numpy(), split.labels[idx])


def test_a_file_or_folder_dataset_has_one_name_before_and_after_loading(tmp_path):
    """The name shown before a dataset is loaded (a reopened project's list) is the one it has loaded."""
    import h5py
    from PIL import Image

    from workbench.core.data.readers import dataset_name, load_path

    x = np.random.default_rng(0).integers(0, 256, (4, 8, 8)).astype(np.uint8)
    y = np.array([0, 1, 0, 1])
    np.savez(tmp_path / "my_fashion_1k.npz", x=x, y=y)
    with h5py.File(tmp_path / "scans.v2.h5", "w") as f:
        f["x"], f["y"] = x, y
    for label in ("cat", "dog"):
        (tmp_path / "pets.2026" / label).mkdir(parents=True)
        Image.fromarray(x[0]).save(tmp_path / "pets.2026" / label / "a.png")
    for path, name in (("my_fashion_1k.npz", "my_fashion_1k"), ("scans.v2.h5", "scans.v2"), ("pets.2026", "pets.2026")):
        assert dataset_name(tmp_path / path) == load_path(tmp_path / path).name == name
