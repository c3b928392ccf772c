"""The command line says which index is which class and warns when the model seems to number them
otherwise: the bundled Fashion-MNIST LeNet-5 on an image folder of Fashion-MNIST images whose folder
names sort into another order (as found: a poor score and nothing said why); a classes.txt in the
model's order puts it right. A truncated IDX file ends the command with a message naming it."""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pytest

from cli_helpers import assert_clean_failure, run_cli, run_json
from workbench.core.data.class_names import FASHION_CLASSES

FOLDER_NAMES = [c.replace("/", "-") for c in FASHION_CLASSES]  # "T-shirt/top" cannot name a folder
IMAGES = 300


@pytest.fixture(scope="module")
def clothes(tmp_path_factory, slice_dir):
    """300 test images of the slice as clothes/<class name>/<i>.png: sorted, the names number the
    classes otherwise than Fashion-MNIST (Ankle boot is 0 here, 9 there)."""
    from PIL import Image

    x = np.frombuffer(gzip.decompress((slice_dir / "t10k-images-idx3-ubyte.gz").read_bytes())[16:], np.uint8)
    y = np.frombuffer(gzip.decompress((slice_dir / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:], np.uint8)
    root = tmp_path_factory.mktemp("folders") / "clothes"
    for i in range(IMAGES):
        folder = root / FOLDER_NAMES[y[i]]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(x.reshape(-1, 28, 28)[i]).save(folder / f"{i}.png")
    return root


@pytest.fixture
def ordered(clothes, tmp_path):
    """The same folder with a classes.txt in the model's (Fashion-MNIST's) order."""
    root = tmp_path / "clothes"
    shutil.copytree(clothes, root)
    (root / "classes.txt").write_text("\n".join(FOLDER_NAMES) + "\n")
    return root


def test_evaluate_shows_the_numbering_and_warns_of_another_order(clothes, capsys):
    rc, out, err = run_cli(capsys, "evaluate", "--model", "lenet5-fashion", "--data", clothes)
    assert rc == 0, err
    sorted_names = sorted(FOLDER_NAMES)
    assert ("Classes, numbered by class folder names sorted A→Z (no classes.txt): 0 Ankle boot · 1 Bag · 2 Coat"
            in out)
    assert f"9 {sorted_names[9]}" in out
    assert "warning: The model seems to number the classes in another order than the data" in out
    assert "its class 0 looks like the data's class 8 'T-shirt-top'" in out  # Fashion's 0 is the T-shirt
    assert "write a classes.txt at its root" in out
    assert "(these predictions suggest: " + ", ".join(FOLDER_NAMES) + ")" in out


def test_evaluate_json_carries_the_numbering_and_the_warning(clothes, capsys):
    rc, out, err = run_cli(capsys, "evaluate", "--model", "lenet5-fashion", "--data", clothes, "--json")
    assert rc == 0, err
    result = json.loads(out)
    assert result["class_names"] == sorted(FOLDER_NAMES)
    assert "sorted" in result["class_source"]
    warning = result["class_order_warning"]
    assert warning["accuracy"] == pytest.approx(result["accuracy"]) and result["accuracy"] < 0.5
    assert warning["permuted_accuracy"] > 0.8
    assert warning["suggested_order"] == FOLDER_NAMES
    assert {"model_class": 0, "data_class": 8, "data_name": "T-shirt-top"} in warning["pairs"]
    assert "warning: The model seems to number" in err  # said to the person at the terminal too


def test_a_classes_txt_in_the_models_order_puts_it_right(clothes, ordered, capsys):
    before = run_json(capsys, "evaluate", "--model", "lenet5-fashion", "--data", clothes)
    after = run_json(capsys, "evaluate", "--model", "lenet5-fashion", "--data", ordered)
    assert after["class_names"] == FOLDER_NAMES and after["class_source"] == "classes.txt"
    assert after["class_order_warning"] is None
    assert after["accuracy"] == pytest.approx(before["class_order_warning"]["permuted_accuracy"])
    rc, out, _ = run_cli(capsys, "evaluate", "--model", "lenet5-fashion", "--data", ordered)
    assert "Classes, numbered by classes.txt: 0 T-shirt-top · 1 Trouser" in out and "warning" not in out


def test_a_model_in_the_datas_order_gets_no_warning(slice_dir, capsys):
    result = run_json(capsys, "evaluate", "--model", "lenet5-fashion", "--data", slice_dir)
    assert result["class_order_warning"] is None and result["class_source"] == ""
    assert result["class_names"] == FASHION_CLASSES


def test_info_describes_one_dataset_with_its_numbering(ordered, capsys):
    rc, out, err = run_cli(capsys, "info", "--data", ordered)
    assert rc == 0, err
    assert "Splits: test 300 images" in out and "Image shape: 1×28×28" in out
    assert "Classes, numbered by classes.txt: 0 T-shirt-top · 1 Trouser · 2 Pullover" in out
    card = run_json(capsys, "info", "--data", ordered)
    assert card["classes"] == FOLDER_NAMES and card["class_source"] == "classes.txt"


def test_a_bad_classes_txt_ends_the_command_with_what_to_do(ordered, capsys):
    (ordered / "classes.txt").write_text("\n".join(FOLDER_NAMES[:9]) + "\n")  # Ankle boot left out
    rc, _, err = run_cli(capsys, "evaluate", "--model", "lenet5-fashion", "--data", ordered)
    assert_clean_failure(rc, err, "leaves out the class folder 'Ankle boot'", "Add every class folder")


def test_evaluate_on_an_idx_folder_with_a_truncated_image_file_names_it(slice_dir, tmp_path, capsys):
    """As found: the file was read and 200 images were used (accuracy 0.895)."""
    folder = tmp_path / "cut"
    folder.mkdir()
    for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        raw = gzip.decompress((slice_dir / f"{name}.gz").read_bytes())
        (folder / name).write_bytes(raw[:16 + 200 * 784] if "images" in name else raw)
    rc, out, err = run_cli(capsys, "evaluate", "--model", "lenet5-fashion", "--data", folder)
    assert_clean_failure(rc, err, str(folder / "t10k-images-idx3-ubyte"), "truncated", "Download or copy")
    assert out == ""
