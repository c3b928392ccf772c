"""The IDX format of MNIST and Fashion-MNIST: reading, gzip detected by magic bytes, and image/label pairs.

The header is read first and says how many bytes follow, so a file is read in one pass of exactly
that length: a stream that promises more than `MAX_IDX_BYTES`, that is shorter or longer than its
header says, or whose gzip data is damaged is refused before anything is built from it.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from workbench.core.data.dataset import Split, as_image_array, as_labels, shape_text
from workbench.core.errors import WorkbenchError
from workbench.core.files import regular_file

_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
MAX_IDX_BYTES = 8 << 30  # an IDX file promising more than this is damage (all of MNIST is 55 MB)
MAX_RANK = 4


REFETCH = "Download or copy the file again: an interrupted download or copy leaves it incomplete."


def _read_exactly(stream, count: int, path, what: str) -> bytes:
    data = stream.read(count)
    if len(data) != count:
        raise WorkbenchError(f"{path} is truncated: it ends after {len(data):,} of the {count:,} bytes {what}.",
                             REFETCH)
    return data


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (optionally gzipped) into a numpy array, validating header and length."""
    path = regular_file(path, "IDX file")
    if path.stat().st_size == 0:
        raise WorkbenchError(f"The IDX file {path} is empty (0 bytes).", REFETCH)
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream = gzip.GzipFile(fileobj=raw) if gzipped else raw
            head = stream.read(4)
            if len(head) < 4:
                raise WorkbenchError(f"{path} is truncated: it ends after {len(head)} bytes, inside the IDX header.",
                                     REFETCH)
            if head[0] != 0 or head[1] != 0 or head[2] not in _TYPES:
                raise WorkbenchError(f"{path} is not an IDX file (bad magic number).",
                                     "IDX files start with two zero bytes, a type byte and a rank byte.")
            dtype, rank = np.dtype(_TYPES[head[2]]), head[3]
            if not 1 <= rank <= MAX_RANK:
                raise WorkbenchError(f"{path}: the IDX header gives {rank} dimensions; images have 3, labels 1.",
                                     "The file is damaged; fetch it again.")
            shape = struct.unpack(f">{rank}I", _read_exactly(stream, 4 * rank, path,
                                                             f"of the header's {rank} dimension sizes"))
            expected = math.prod(shape) * dtype.itemsize  # exact: numpy's product would overflow
            if expected > MAX_IDX_BYTES:
                raise WorkbenchError(f"{path}: the IDX header promises {shape_text(shape)}, {expected:,} bytes.",
                                     "The file is damaged; fetch it again.")
            data = _read_exactly(stream, expected, path, f"its header promises for {shape_text(shape)}")
            if stream.read(1):
                raise WorkbenchError(f"{path} holds more data than its header's {shape_text(shape)}: it is damaged, "
                                     "or its header was written for other data.", REFETCH)
    except WorkbenchError:
        raise
    except EOFError as exc:  # gzip's word for a compressed stream cut short
        raise WorkbenchError(f"{path} is truncated: its gzip stream ends before its end marker ({exc}).",
                             REFETCH) from exc
    except (OSError, zlib.error, gzip.BadGzipFile) as exc:
        raise WorkbenchError(f"Cannot read IDX file {path}: {exc}",
                             "Check that the file is a complete (gzipped) IDX file.") from exc
    return np.frombuffer(data, dtype).reshape(shape).astype(dtype.newbyteorder("="))


def load_idx_pair(images_path: Path, labels_path: Path) -> Split:
    """Images (N, rows, cols) of any IDX type whose values are pixels (0–255, or floats in [0, 1]) and
    their labels (N,), or a column (N, 1), checked like every other data file's."""
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3:
        raise WorkbenchError(f"{images_path} holds an array of shape {shape_text(images.shape)}; expected "
                             "(N, rows, cols).", "Pass an IDX image file (magic 0x00000803).")
    if len(images) != len(labels):
        raise WorkbenchError(f"{images_path.name} holds {len(images)} images but {labels_path.name} "
                             f"holds {len(labels)} labels.", "Pair the image file with its own label file.")
    return Split(as_image_array(images[:, None], f"{images_path.name} images"),
                 as_labels(labels, what=f"{labels_path.name} labels"))
