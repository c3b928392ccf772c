"""The IDX format of MNIST and Fashion-MNIST: reading, gzip detected by magic bytes, and image/label pairs."""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import numpy as np

from workbench.core.data import Split
from workbench.core.errors import WorkbenchError

_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _read_bytes(path: str | os.PathLike) -> bytes:
    try:
        with open(path, "rb") as f:
            raw = f.read()
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise WorkbenchError(f"Cannot read IDX file {path}: {exc}",
                             "Check that the file exists and is a complete (gzipped) IDX file.") from exc


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (optionally gzipped) into a numpy array, validating header and length."""
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _TYPES:
        raise WorkbenchError(f"{path} is not an IDX file (bad magic number).",
                             "IDX files start with two zero bytes, a type byte and a rank byte.")
    dtype = np.dtype(_TYPES[raw[2]])
    rank = raw[3]
    header = 4 + 4 * rank
    if len(raw) < header:
        raise WorkbenchError(f"{path}: the IDX header is truncated.", "The file is damaged; fetch it again.")
    shape = struct.unpack(f">{rank}I", raw[4:header])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise WorkbenchError(
            f"{path}: the header promises {shape} ({expected} bytes of data) but the file holds "
            f"{len(raw) - header} bytes.", "The file is truncated or damaged; fetch it again.")
    return np.frombuffer(raw, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def load_idx_pair(images_path: Path, labels_path: Path) -> Split:
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3:
        raise WorkbenchError(f"{images_path} holds an array of shape {images.shape}; expected (N, rows, cols).",
                             "Pass an IDX image file (magic 0x00000803).")
    if len(images) != len(labels):
        raise WorkbenchError(f"{images_path.name} holds {len(images)} images but {labels_path.name} "
                             f"holds {len(labels)} labels.", "Pair the image file with its own label file.")
    return Split(images[:, None], labels.astype(np.int64))
