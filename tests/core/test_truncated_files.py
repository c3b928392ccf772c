"""Data files cut short or padded are refused, naming the file: an IDX folder whose image file is
truncated (it had been read: 200 images used), a gzip stream cut off, a header cut off, bytes past
what the header says, an empty file, image and label counts that disagree; in an image folder a PNG
cut in half (or by a few bytes: PIL decodes it once the pixels are in), a JPEG or BMP cut short, an
empty file and a file that is no image under a .png name."""

from __future__ import annotations

import gzip
import io
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from workbench.core.data.readers import load_path
from workbench.core.errors import WorkbenchError

IMAGES, LABELS = "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"


def refused(path, *words) -> WorkbenchError:
    with pytest.raises(WorkbenchError) as err:
        load_path(path)
    said = str(err.value)
    for w in words:
        assert w in said, f"{w!r} not in {said!r}"
    assert err.value.hint, "every refusal says what to do"
    return err.value


@pytest.fixture
def idx_copy(slice_dir, tmp_path) -> Path:
    """The test split of the vendored Fashion-MNIST slice (1,000 images), unpacked into a folder."""
    folder = tmp_path / "fashion-copy"
    folder.mkdir()
    for name in (IMAGES, LABELS):
        (folder / name).write_bytes(gzip.decompress((slice_dir / f"{name}.gz").read_bytes()))
    return folder


# --- IDX ---------------------------------------------------------------------------------------------

def test_the_whole_copy_reads(idx_copy):
    assert len(load_path(idx_copy).split("test")) == 1000


def test_an_image_file_cut_after_200_images_is_refused_naming_it(idx_copy):
    """As found: the file held 200 of the 1,000 images its header promises."""
    path = idx_copy / IMAGES
    path.write_bytes(path.read_bytes()[:16 + 200 * 28 * 28])
    err = refused(idx_copy, str(path), "truncated", "156,800 of the 784,000 bytes", "(1000, 28, 28)")
    assert "again" in err.hint


def test_a_gzipped_image_file_cut_in_half_is_refused_naming_it(slice_dir, tmp_path):
    folder = tmp_path / "gz"
    shutil.copytree(slice_dir, folder)
    path = folder / f"{IMAGES}.gz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    refused(folder, str(path), "truncated", "gzip stream ends")


@pytest.mark.parametrize("damage, words", [
    (lambda raw: raw[:2], ["truncated", "inside the IDX header"]),
    (lambda raw: raw[:10], ["truncated", "of the header's 3 dimension sizes"]),
    (lambda raw: raw[:-1], ["truncated", "783,999 of the 784,000 bytes"]),
    (lambda raw: raw + bytes(28 * 28), ["more data than its header's (1000, 28, 28)"]),
    (lambda raw: b"", ["empty (0 bytes)"]),
    (lambda raw: gzip.compress(raw)[:-9], ["truncated", "gzip stream ends"]),  # the size trailer cut off
], ids=["magic-cut", "header-cut", "one-byte-short", "one-image-extra", "zero-bytes", "gzip-trailer-cut"])
def test_an_image_file_of_the_wrong_length_is_refused(idx_copy, damage, words):
    path = idx_copy / IMAGES
    path.write_bytes(damage(path.read_bytes()))
    refused(idx_copy, str(path), *words)


def test_a_labels_file_cut_short_is_refused_too(idx_copy):
    path = idx_copy / LABELS
    path.write_bytes(path.read_bytes()[:-500])
    refused(idx_copy, str(path), "truncated")


def test_image_and_label_counts_that_disagree_are_refused(idx_copy):
    """Both files whole, each as its header says, but of other lengths: 200 images, 1,000 labels."""
    path = idx_copy / IMAGES
    raw = path.read_bytes()
    path.write_bytes(struct.pack(">4I", 0x0803, 200, 28, 28) + raw[16:16 + 200 * 784])
    refused(idx_copy, "200 images", "1000 labels")


def test_two_image_files_for_one_split_are_refused_not_guessed(idx_copy):
    (idx_copy / f"{IMAGES}-cut").write_bytes((idx_copy / IMAGES).read_bytes()[:5000])
    refused(idx_copy, "2 image files for the test split", f"{IMAGES}-cut", "Keep one")


# --- image folders ------------------------------------------------------------------------------------

def encoded(fmt: str, mode: str = "L", seed: int = 0) -> bytes:
    """A 28×28 picture with structure (a blob on a gradient), encoded as `fmt`."""
    from PIL import Image

    y, x = np.mgrid[:28, :28]
    a = (x * 6 + 120 * np.exp(-((x - 10 - seed) ** 2 + (y - 14) ** 2) / 40)).clip(0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(a).convert(mode).save(buffer, fmt)
    return buffer.getvalue()


def image_folder(root: Path, odd_name: str, odd_bytes: bytes) -> Path:
    """root/cat/0..2.png and root/dog/0..1.png, whole, and root/dog/<odd_name> holding `odd_bytes`."""
    for name, count in (("cat", 3), ("dog", 2)):
        (root / name).mkdir(parents=True)
        for i in range(count):
            (root / name / f"{i}.png").write_bytes(encoded("PNG", seed=i))
    (root / "dog" / odd_name).write_bytes(odd_bytes)
    return root


def test_a_png_cut_in_half_is_refused_naming_it(tmp_path):
    whole = encoded("PNG")
    root = image_folder(tmp_path / "pets", "cut.png", whole[: len(whole) // 2])
    err = refused(root, str(root / "dog" / "cut.png"), "cut short")
    assert "Remove or replace" in err.hint


def test_every_prefix_of_a_png_is_refused_and_the_whole_file_read(tmp_path):
    """PIL decodes a PNG whose last 20 bytes are gone (checksums, the closing chunk): no cut is let through."""
    whole = encoded("PNG", seed=3)
    root = image_folder(tmp_path / "pets", "odd.png", whole)
    assert len(load_path(root).split("test")) == 6
    let_through = []
    for cut in range(1, len(whole)):
        (root / "dog" / "odd.png").write_bytes(whole[:cut])
        try:
            load_path(root)
            let_through.append(cut)
        except WorkbenchError as exc:
            assert "odd.png" in exc.message
    assert let_through == []


@pytest.mark.parametrize("fmt, suffix", [("JPEG", ".jpg"), ("BMP", ".bmp")])
def test_a_jpeg_or_bmp_cut_short_is_refused(tmp_path, fmt, suffix):
    whole = encoded(fmt)
    for cut in (len(whole) // 2, len(whole) - 2):
        root = image_folder(tmp_path / f"pets-{cut}", "cut" + suffix, whole[:cut])
        refused(root, str(root / "dog" / f"cut{suffix}"), "cut short")


def test_a_png_with_a_damaged_chunk_is_refused(tmp_path):
    whole = bytearray(encoded("PNG"))
    at = whole.index(b"IDAT") + 20
    whole[at] ^= 0xFF  # a flipped byte in the pixel data: its chunk's checksum no longer matches
    root = image_folder(tmp_path / "pets", "flipped.png", bytes(whole))
    refused(root, str(root / "dog" / "flipped.png"))


@pytest.mark.parametrize("odd_bytes, words", [
    (b"", ["empty (0 bytes)"]),
    (b"name,label\ncat.png,0\n", ["not an image the workbench reads", "PNG, JPEG or BMP"]),
], ids=["zero-bytes", "text-named-png"])
def test_an_empty_file_or_one_that_is_no_image_is_refused(tmp_path, odd_bytes, words):
    root = image_folder(tmp_path / "pets", "odd.png", odd_bytes)
    refused(root, str(root / "dog" / "odd.png"), *words)


def test_a_whole_jpeg_under_a_png_name_is_read(tmp_path):
    root = image_folder(tmp_path / "pets", "photo.png", encoded("JPEG"))
    assert len(load_path(root).split("test")) == 6


def test_reading_never_turns_on_pils_truncated_image_loading(tmp_path):
    from PIL import ImageFile

    whole = encoded("PNG")
    root = image_folder(tmp_path / "pets", "cut.png", whole[:-30])
    refused(root, "cut.png")
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
