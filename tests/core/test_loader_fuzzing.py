"""Generated malformed data files thrown at the loaders: each is either read correctly or refused with
a `WorkbenchError` — never another exception, a hang, or a dataset of the wrong shape.

The generators mix well-formed files (whose contents the test knows and checks) with every kind of
damage the loaders must catch: IDX headers that lie, wrong type bytes and ranks, truncated or broken
gzip streams; NPZ arrays of every dtype and rank, labels shaped (N, 1) or holding NaN, huge or
negative values, class names of the wrong type; HDF5 files whose `x` or `y` is a group, a scalar or a
dangling link; PNG trees with undecodable files. The example count is small in the test command;
`benchmarks/bench_loader_fuzzing.py` runs many more.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.core.data.dataset import Dataset
from workbench.core.data.readers import load_path
from workbench.core.errors import WorkbenchError

EXAMPLES = int(os.environ.get("WORKBENCH_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "bool", "complex64",
          "uint16"]


OUTCOMES = {"read": 0, "refused": 0}  # what the generated files came to (the benchmark prints them)


def check_read_or_refused(path: Path, expected=None) -> None:
    """Load `path`: a `WorkbenchError` is fine; anything read must be a well-formed dataset (and equal
    to `expected` = {split: (images in [0, 1] as N×C×H×W, labels)} when the file was well formed)."""
    try:
        dataset = load_path(path)
    except WorkbenchError as exc:
        assert exc.message and len(exc.message) < 600, exc.message
        OUTCOMES["refused"] += 1
        return
    OUTCOMES["read"] += 1
    assert isinstance(dataset, Dataset)
    for name, split in dataset.splits.items():
        images, labels = split.numpy(), split.labels
        assert images.ndim == 4 and images.shape[1] in (1, 3) and images.dtype == np.float32
        assert len(images) == len(labels) and labels.ndim == 1 and labels.dtype == np.int64
        assert np.isfinite(images).all() and images.min(initial=0) >= 0 and images.max(initial=0) <= 1
        assert labels.size == 0 or (labels.min() >= 0 and labels.max() < dataset.num_classes)
        if expected is not None and name in expected:
            want_images, want_labels = expected[name]
            np.testing.assert_allclose(images, want_images, atol=1 / 512)
            np.testing.assert_array_equal(labels, want_labels)
    if expected is not None:
        assert set(dataset.splits) == set(expected)


# --- IDX ---------------------------------------------------------------------------------------------

def idx_bytes(array: np.ndarray, code: int) -> bytes:
    dtype = np.dtype(IDX_TYPES[code])
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(dtype).tobytes()


@st.composite
def idx_pairs(draw):
    n = draw(st.integers(0, 6))
    side = draw(st.integers(1, 6))
    code = draw(st.sampled_from(sorted(IDX_TYPES)))
    pixels = draw(st.sampled_from(["uint8", "scaled", "float01", "negative"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    images = rng.integers(0, 256, (n, side, side))
    if pixels == "float01" and code in (0x0D, 0x0E):
        images = rng.random((n, side, side))
    elif pixels == "negative":
        images = images - 128
    label_shape = draw(st.sampled_from([(n,), (n,), (n, 1), (n, 2), (max(0, n - 1),)]))
    labels = rng.integers(0, draw(st.sampled_from([1, 10, 200])), label_shape)  # fits every label type
    label_code = draw(st.sampled_from([0x08, 0x0C, 0x0D]))
    image_file, label_file = idx_bytes(images, code), idx_bytes(labels, label_code)
    damage = draw(st.sampled_from(["none"] * 6 + ["truncate", "extend", "magic", "rank", "type", "bad-gzip",
                                                  "truncated-gzip", "empty"]))
    target = draw(st.sampled_from(["images", "labels"]))
    raw = image_file if target == "images" else label_file
    if damage == "truncate":
        raw = raw[:draw(st.integers(0, max(0, len(raw) - 1)))]
    elif damage == "extend":
        raw = raw + b"\x00" * draw(st.integers(1, 9))
    elif damage == "magic":
        raw = b"\x01" + raw[1:]
    elif damage == "rank":
        raw = raw[:3] + bytes([draw(st.integers(0, 255))]) + raw[4:]
    elif damage == "type":
        raw = raw[:2] + bytes([draw(st.sampled_from([0x00, 0x0A, 0x0F, 0xFF]))]) + raw[3:]
    elif damage == "empty":
        raw = b""
    if target == "images":
        image_file = raw
    else:
        label_file = raw
    compress = draw(st.booleans())
    if compress or damage in ("bad-gzip", "truncated-gzip"):
        image_file, label_file = gzip.compress(image_file), gzip.compress(label_file)
        if damage == "bad-gzip":
            image_file = image_file[:10] + bytes(b ^ 0x5A for b in image_file[10:])
        elif damage == "truncated-gzip":
            label_file = label_file[:max(3, len(label_file) // 2)]
    well_formed = (damage == "none" and label_shape in ((n,), (n, 1)) and pixels != "negative"
                   and not (pixels == "float01" and code not in (0x0D, 0x0E)))
    return image_file, label_file, compress, well_formed, images, labels, code


@FUZZ
@given(idx_pairs())
def test_idx_folders(case):
    image_file, label_file, compress, well_formed, images, labels, code = case
    suffix = ".gz" if compress else ""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "data"
        folder.mkdir()
        (folder / f"t10k-images-idx3-ubyte{suffix}").write_bytes(image_file)
        (folder / f"t10k-labels-idx1-ubyte{suffix}").write_bytes(label_file)
        expected = None
        if well_formed and len(images) and code in (0x08,):  # uint8 pixels: their values are known
            expected = {"test": (images[:, None].astype(np.float32) / 255, labels.reshape(-1))}
        check_read_or_refused(folder, expected)


# --- NPZ ---------------------------------------------------------------------------------------------

def arrays(draw, n: int, what: str):
    """Images (`what` "x") or labels ("y") of n inputs: half of them well formed, half of any dtype,
    shape and values."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if draw(st.booleans()):
        if what == "x":
            return draw(st.sampled_from([lambda: rng.integers(0, 256, (n, 4, 4)).astype(np.uint8),
                                         lambda: rng.random((n, 4, 4, 3)).astype(np.float32),
                                         lambda: rng.integers(0, 256, (n, 1, 4, 4)).astype(np.int32)]))()
        return draw(st.sampled_from([lambda: rng.integers(0, 10, n), lambda: rng.integers(0, 10, (n, 1)),
                                     lambda: rng.integers(0, 10, n).astype(np.float64)]))()
    dtype = draw(st.sampled_from(DTYPES))
    if what == "x":
        shape = draw(st.sampled_from([(n, 4, 4), (n, 4, 4, 1), (n, 1, 4, 4), (n, 3, 4, 4), (n, 4, 4, 2), (n,),
                                      (), (n, 4), (n, 1, 1, 4, 4)]))
    else:
        shape = draw(st.sampled_from([(n,), (n, 1), (n, 3), (), (max(0, n - 1),), (n, 1, 1)]))
    kind = draw(st.sampled_from(["bytes", "unit", "big", "nan", "negative", "huge"]))
    values = {"bytes": lambda: rng.integers(0, 256, shape), "unit": lambda: rng.random(shape),
              "big": lambda: rng.random(shape) * 255, "nan": lambda: np.full(shape, np.nan),
              "negative": lambda: -rng.integers(1, 5, shape), "huge": lambda: np.full(shape, 2.0**40)}[kind]()
    with np.errstate(all="ignore"):
        return np.asarray(values).astype(dtype)


@st.composite
def npz_files(draw):
    n = draw(st.integers(0, 5))
    layout = draw(st.sampled_from(["xy", "xy", "splits", "splits", "other-names", "garbage", "truncated"]))
    x, y = arrays(draw, n, "x"), arrays(draw, n, "y")
    buffer = io.BytesIO()
    if layout == "xy":
        extra = {}
        names = draw(st.sampled_from(["none", "strings", "ints", "too-few", "2d"]))
        if names == "strings":
            extra["class_names"] = np.array([f"c{i}" for i in range(12)])
        elif names == "ints":
            extra["class_names"] = np.arange(12)
        elif names == "too-few":
            extra["class_names"] = np.array(["only"])
        elif names == "2d":
            extra["class_names"] = np.array([["a", "b"], ["c", "d"]])
        np.savez(buffer, x=x, y=y, **extra)
    elif layout == "splits":
        np.savez(buffer, x_train=x, y_train=y, x_test=x, y_test=y)
    elif layout == "other-names":
        np.savez(buffer, images=x, labels=y)
    else:
        np.savez(buffer, x=x, y=y)
    raw = buffer.getvalue()
    if layout == "garbage":
        raw = bytes(draw(st.binary(min_size=0, max_size=200)))
    elif layout == "truncated":
        raw = raw[:draw(st.integers(0, max(0, len(raw) - 1)))]
    return raw


@FUZZ
@given(npz_files())
def test_npz_files(raw):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.npz"
        path.write_bytes(raw)
        check_read_or_refused(path)


# --- HDF5 --------------------------------------------------------------------------------------------

@st.composite
def hdf5_layouts(draw):
    n = draw(st.integers(0, 5))
    return {"n": n, "x": draw(st.sampled_from(["array"] * 5 + ["group", "scalar", "soft-dangling", "external",
                                                              "strings"])),
            "y": draw(st.sampled_from(["array"] * 5 + ["group", "scalar", "soft-dangling", "column", "floats",
                                                      "complex"])),
            "names": draw(st.sampled_from(["none", "strings", "int", "float", "bytes-list"])),
            "where": draw(st.sampled_from(["root", "splits"])),
            "pixels": arrays(draw, n, "x"), "labels": arrays(draw, n, "y")}


def write_hdf5(path: Path, case: dict) -> None:
    import h5py

    n = case["n"]
    with h5py.File(path, "w") as f:
        groups = [f] if case["where"] == "root" else [f.create_group("train"), f.create_group("test")]
        for g in groups:
            for key in ("x", "y"):
                how = case[key]
                data = case["pixels"] if key == "x" else case["labels"]
                if how == "array":
                    g.create_dataset(key, data=data)
                elif how == "group":
                    g.create_group(key)
                elif how == "scalar":
                    g.create_dataset(key, data=3)
                elif how == "soft-dangling":
                    g[key] = h5py.SoftLink("/nowhere")
                elif how == "external":
                    g[key] = h5py.ExternalLink("missing-file.h5", "/x")
                elif how == "strings":
                    g.create_dataset(key, data=np.array([b"a"] * max(1, n)))
                elif how == "column":
                    g.create_dataset(key, data=np.zeros((n, 1), np.int64))
                elif how == "floats":
                    g.create_dataset(key, data=np.full(n, 1.5))
                elif how == "complex":
                    g.create_dataset(key, data=np.full(n, 1 + 1j))
        names = {"strings": np.array([b"a", b"b", b"c"]), "int": 7, "float": 2.5,
                 "bytes-list": [b"x"] * 300}.get(case["names"])
        if names is not None:
            f.attrs["class_names"] = names


@FUZZ
@given(hdf5_layouts())
def test_hdf5_files(case):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.h5"
        write_hdf5(path, case)
        check_read_or_refused(path)


# --- image folders -----------------------------------------------------------------------------------

def png_bytes(side: int, mode: str = "L") -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((side, side, 3 if mode == "RGB" else 1), np.uint8).squeeze(), mode).save(buffer, "PNG")
    return buffer.getvalue()


def huge_png_header() -> bytes:
    """A PNG whose header claims 30000 × 30000 pixels (its data would never decode)."""
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 30000, 30000, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 100)) + \
        chunk(b"IEND", b"")


@st.composite
def image_trees(draw):
    files = []
    for cls in range(draw(st.integers(1, 3))):
        for i in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["good", "good", "rgb", "other-size", "garbage", "truncated", "huge"]))
            raw = {"good": lambda: png_bytes(4), "rgb": lambda: png_bytes(4, "RGB"),
                   "other-size": lambda: png_bytes(5), "garbage": lambda: b"not a png at all",
                   "truncated": lambda: png_bytes(4)[:30], "huge": huge_png_header}[kind]()
            files.append((f"class{cls}", f"{i}.png", raw))
    return files


@FUZZ
@given(image_trees())
def test_image_folders(files):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "images"
        root.mkdir()
        for folder, name, raw in files:
            (root / folder).mkdir(exist_ok=True)
            (root / folder / name).write_bytes(raw)
        check_read_or_refused(root)


# --- what is not a regular file or folder ---------------------------------------------------------------

@pytest.mark.timeout(60)  # a hang fails here; the bound leaves room for a loaded machine
@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "unreadable-folder", "missing"])
def test_special_files_are_refused_without_hanging(tmp_path, kind):
    if kind == "fifo":
        path = tmp_path / "data.npz"
        os.mkfifo(path)
    elif kind == "dev-zero-link":
        path = tmp_path / "data.h5"
        path.symlink_to("/dev/zero")
    elif kind == "unreadable-folder":
        path = tmp_path / "images"
        (path / "a").mkdir(parents=True)
        (path / "a" / "0.png").write_bytes(png_bytes(4))
        path.chmod(0)
        if os.access(path, os.R_OK):  # root reads everything: nothing to refuse here
            path.chmod(0o755)
            pytest.skip("running as a user who can read any folder")
    else:
        path = tmp_path / "nothing.npz"
    try:
        with pytest.raises(WorkbenchError):
            load_path(path)
    finally:
        if kind == "unreadable-folder":
            path.chmod(0o755)
