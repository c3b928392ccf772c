"""Image folders: classes numbered by sorted folder names (torchvision's ImageFolder order) unless a
classes.txt at the root gives the order; a classes.txt that names a missing folder, repeats a name or
leaves out a folder with images is refused, saying which line or folder and what to do."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workbench.core.data.readers import CLASSES_FILE, SORTED_FOLDERS, load_path
from workbench.core.errors import WorkbenchError

RNG = np.random.default_rng(5)


def tree(root: Path, counts: dict[str, int], splits=(None,)) -> dict:
    """root/<class>/<i>.png with `counts[class]` images each (0: an empty folder); returns the pixels."""
    from PIL import Image

    pixels = {}
    for split in splits:
        base = root / split if split else root
        for name, count in counts.items():
            (base / name).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                a = RNG.integers(0, 256, (4, 4), dtype=np.uint8)
                Image.fromarray(a).save(base / name / f"{i}.png")
                pixels[(split, name, i)] = a
    return pixels


def test_without_classes_txt_classes_are_numbered_by_sorted_folder_names(tmp_path):
    tree(tmp_path / "pets", {"fox": 1, "cat": 2, "dog": 3})
    ds = load_path(tmp_path / "pets")
    assert ds.class_names == ["cat", "dog", "fox"]
    assert ds.class_source == SORTED_FOLDERS and "sorted" in ds.card_dict()["class_source"]
    assert np.bincount(ds.split("test").labels).tolist() == [2, 3, 1]


def test_classes_txt_sets_the_numbering(tmp_path):
    pixels = tree(tmp_path / "pets", {"fox": 1, "cat": 2, "dog": 3})
    (tmp_path / "pets" / CLASSES_FILE).write_text("# the order the model was trained in\n\nfox\n  dog \r\ncat\n")
    ds = load_path(tmp_path / "pets")
    assert ds.class_names == ["fox", "dog", "cat"]
    assert ds.class_source == CLASSES_FILE
    test = ds.split("test")
    assert np.bincount(test.labels).tolist() == [1, 3, 2]
    # label 0 is the fox: its one image comes first, and is the fox's
    assert test.labels[0] == 0
    np.testing.assert_array_equal(test.images[0, 0], pixels[(None, "fox", 0)])
    assert all(test.labels[1:4] == 1) and all(test.labels[4:] == 2)


def test_classes_txt_at_the_root_numbers_both_splits_and_may_list_an_empty_folder(tmp_path):
    tree(tmp_path / "pets", {"b": 2, "a": 2, "empty": 0}, splits=("train", "test"))
    (tmp_path / "pets" / CLASSES_FILE).write_text("b\nempty\na\n")
    ds = load_path(tmp_path / "pets")
    assert ds.class_names == ["b", "empty", "a"]
    for split in ("train", "test"):
        assert np.bincount(ds.split(split).labels, minlength=3).tolist() == [2, 0, 2]


def test_an_unlisted_folder_without_images_is_no_class(tmp_path):
    tree(tmp_path / "pets", {"cat": 1, "dog": 1, "notes": 0})
    (tmp_path / "pets" / CLASSES_FILE).write_text("dog\ncat\n")
    assert load_path(tmp_path / "pets").class_names == ["dog", "cat"]


@pytest.mark.parametrize("text, words", [
    ("dog\ncat\ncow\n", ["'cow'", "line 3", "no folder 'cow'", "Fix the name"]),
    ("dog\ncat\ndog\n", ["'dog' twice", "lines 1 and 3", "once"]),
    ("dog\n", ["leaves out the class folder 'cat'", "holds images", "Add every class folder"]),
    ("fox\n", ["leaves out the class folders 'cat', 'dog'", "hold images"]),
    ("\n# nothing yet\n", ["lists no classes"]),
    ("../pets\ncat\ndog\n", ["'../pets'", "no folder"]),  # a path out of the folder is no class folder
    ("cat/.\ndog\n", ["'cat/.'", "no folder"]),
], ids=["missing-folder", "repeated", "left-out", "left-out-several", "empty", "path-outside", "path-inside"])
def test_a_bad_classes_txt_is_refused_saying_what_is_wrong(tmp_path, text, words):
    tree(tmp_path / "pets", {"cat": 1, "dog": 1, "fox": 0})
    (tmp_path / "pets" / CLASSES_FILE).write_text(text)
    with pytest.raises(WorkbenchError) as err:
        load_path(tmp_path / "pets")
    said = str(err.value)
    assert str(tmp_path / "pets" / CLASSES_FILE) in said
    for w in words:
        assert w in said, f"{w!r} not in {said!r}"
    assert "one a line" in err.value.hint  # and how the file is written


def test_a_classes_txt_that_is_not_text_or_sits_in_a_split_is_refused(tmp_path):
    tree(tmp_path / "pets", {"cat": 1, "dog": 1})
    (tmp_path / "pets" / CLASSES_FILE).write_bytes(b"\xff\xfe\x00cat")
    with pytest.raises(WorkbenchError, match="not UTF-8 text"):
        load_path(tmp_path / "pets")
    tree(tmp_path / "split", {"cat": 1, "dog": 1}, splits=("train", "test"))
    (tmp_path / "split" / "train" / CLASSES_FILE).write_text("dog\ncat\n")
    with pytest.raises(WorkbenchError, match="read from the dataset's root only") as err:
        load_path(tmp_path / "split")
    assert str(tmp_path / "split" / CLASSES_FILE) in err.value.hint


def test_datasets_from_files_say_nothing_of_folder_names(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((2, 4, 4), np.uint8), y=[0, 1])
    assert load_path(tmp_path / "d.npz").class_source == ""
