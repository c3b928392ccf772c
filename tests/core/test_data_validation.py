"""One validation path for every data file: labels and pixels that used to give silently wrong
numbers or misleading messages are read correctly or refused, whatever the file format."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from workbench.core.data.dataset import MAX_CLASSES, as_image_array, as_labels
from workbench.core.data.readers import load_path
from workbench.core.errors import WorkbenchError

IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(">i2"): 0x0B, np.dtype(">i4"): 0x0C,
             np.dtype(">f4"): 0x0D, np.dtype(">f8"): 0x0E}


def write_idx(path, array: np.ndarray) -> None:
    header = bytes([0, 0, IDX_CODES[array.dtype], array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.tobytes())


def idx_folder(tmp_path, images: np.ndarray, labels: np.ndarray):
    folder = tmp_path / "idx"
    folder.mkdir(exist_ok=True)
    write_idx(folder / "t10k-images-idx3-ubyte", images)
    write_idx(folder / "t10k-labels-idx1-ubyte", labels)
    return folder


def npz(tmp_path, **arrays):
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return path


def h5(tmp_path, **arrays):
    import h5py

    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=value)
    return path


PIXELS = np.arange(5 * 4 * 4).reshape(5, 4, 4) % 256


@pytest.mark.parametrize("fmt", ["idx", "npz", "h5"])
def test_labels_in_a_column_are_labels_not_one_hot_rows(tmp_path, fmt):
    labels = np.array([3, 1, 4, 1, 5])
    column = labels.reshape(-1, 1)
    if fmt == "idx":
        path = idx_folder(tmp_path, PIXELS.astype(np.uint8), column.astype(np.uint8))
    else:
        path = (npz if fmt == "npz" else h5)(tmp_path, x=PIXELS.astype(np.uint8), y=column)
    np.testing.assert_array_equal(load_path(path).split("test").labels, labels)


@pytest.mark.parametrize("dtype", [">i2", ">i4"])
def test_idx_integer_pixels_of_other_types_are_scaled(tmp_path, dtype):
    data = load_path(idx_folder(tmp_path, PIXELS.astype(dtype), np.zeros(5, np.uint8)))  # 0–255 values
    np.testing.assert_allclose(data.split("test").numpy()[:, 0], PIXELS / 255, atol=1e-6)


@pytest.mark.parametrize("dtype", [">f4", ">f8"])
def test_idx_float_pixels_are_read_in_0_1_and_refused_over_one(tmp_path, dtype):
    data = load_path(idx_folder(tmp_path, (PIXELS / 255).astype(dtype), np.zeros(5, np.uint8)))
    np.testing.assert_allclose(data.split("test").numpy()[:, 0], PIXELS / 255, atol=1e-6)
    with pytest.raises(WorkbenchError, match="Divide 0–255 data by 255"):
        load_path(idx_folder(tmp_path, PIXELS.astype(dtype), np.zeros(5, np.uint8)))


def test_idx_int8_pixels_that_wrapped_negative_are_refused(tmp_path):
    with pytest.raises(WorkbenchError, match="expected 0–255"):
        load_path(idx_folder(tmp_path, (PIXELS - 128).astype(np.int8), np.zeros(5, np.uint8)))


@pytest.mark.parametrize("labels, message", [
    (np.array([0.0, 1.5, 2.0]), "not whole numbers"),
    (np.array([0.0, np.nan, 2.0]), "NaN"),
    (np.array([0, 2**40, 1]), "beyond"),
    (np.array([0.0, 2.0**40, 1.0]), "beyond"),
    (np.array([1 + 1j, 0, 0]), "dtype complex"),
    (np.array(["a", "b", "c"]), "dtype <U1"),
    (np.array([[0, 1], [1, 1], [1, 0]]), "not one-hot"),
    (np.array([0, -1, 2]), "negative"),
], ids=["fraction", "nan", "huge-int", "huge-float", "complex", "text", "two-hot", "negative"])
def test_bad_labels_are_refused_with_what_is_wrong(labels, message):
    with pytest.raises(WorkbenchError, match=message) as caught:
        as_labels(labels, what="y")
    assert "-9223372036854775808" not in caught.value.message


def test_whole_float_labels_and_one_hot_rows_are_read():
    np.testing.assert_array_equal(as_labels(np.array([2.0, 0.0, 1.0])), [2, 0, 1])
    np.testing.assert_array_equal(as_labels(np.eye(3)[[2, 0, 1]]), [2, 0, 1])
    assert MAX_CLASSES >= 1000


def test_a_shape_with_many_dimensions_gives_a_short_message():
    with pytest.raises(WorkbenchError) as caught:
        as_image_array(np.zeros((1,) * 40, np.uint8), "x")
    assert len(caught.value.message) < 300 and "40 dimensions" in caught.value.message


def test_stored_class_names_of_the_wrong_type_are_refused(tmp_path):
    import h5py

    path = h5(tmp_path, x=PIXELS.astype(np.uint8), y=np.zeros(5, np.int64))
    for names in (7, 2.5, np.arange(3)):
        with h5py.File(path, "a") as f:
            f.attrs["class_names"] = names
        with pytest.raises(WorkbenchError, match="class_names"):
            load_path(path)


def test_a_gzip_stream_that_fails_to_decompress_is_refused(tmp_path):
    import gzip

    folder = idx_folder(tmp_path, PIXELS.astype(np.uint8), np.zeros(5, np.uint8))
    raw = gzip.compress((folder / "t10k-images-idx3-ubyte").read_bytes())
    (folder / "t10k-images-idx3-ubyte").unlink()
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(raw[:12] + bytes(b ^ 0x33 for b in raw[12:]))
    with pytest.raises(WorkbenchError, match="Cannot read IDX file"):
        load_path(folder)


def test_an_npz_that_cannot_be_read_says_so(tmp_path):
    import os

    path = npz(tmp_path, x=PIXELS.astype(np.uint8), y=np.zeros(5, np.int64))
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who can read any file")
        with pytest.raises(WorkbenchError, match="permission denied"):
            load_path(path)
    finally:
        path.chmod(0o644)


def test_an_idx_header_whose_size_overflows_is_refused_before_reading(tmp_path):
    folder = idx_folder(tmp_path, PIXELS.astype(np.uint8), np.zeros(5, np.uint8))
    huge = bytes([0, 0, 0x08, 4]) + struct.pack(">4I", 2**32 - 1, 2**32 - 1, 2**32 - 1, 2**32 - 1)
    (folder / "t10k-images-idx3-ubyte").write_bytes(huge + b"\x00" * 64)
    with pytest.raises(WorkbenchError, match="promises"):
        load_path(folder)


def test_labels_with_no_class_per_image_are_refused():
    with pytest.raises(WorkbenchError, match="no class per image"):
        as_labels(np.zeros((4, 0)))
