"""Which index is which class, in the Data view, and the warning when the model seems to number the
classes otherwise, in the Model view (and a pointer to it beside the Data view's predictions): the
bundled Fashion-MNIST LeNet-5 on an image folder whose sorted folder names number the classes in
another order. The demo project (data and model in one order) shows the numbering and no warning."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from PySide6.QtCore import Qt

from workbench.core.data.class_names import FASHION_CLASSES

pytestmark = pytest.mark.gui

FOLDER_NAMES = [c.replace("/", "-") for c in FASHION_CLASSES]


def clothes_folder(root, slice_dir, count: int = 300):
    from PIL import Image

    x = np.frombuffer(gzip.decompress((slice_dir / "t10k-images-idx3-ubyte.gz").read_bytes())[16:], np.uint8)
    y = np.frombuffer(gzip.decompress((slice_dir / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:], np.uint8)
    for i in range(count):
        folder = root / FOLDER_NAMES[y[i]]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(x.reshape(-1, 28, 28)[i]).save(folder / f"{i}.png")
    return root


def test_the_views_show_the_numbering_and_warn_of_another_order(qtbot, open_window, settle, tmp_path,
                                                                 fashion_slice_as_fashion_mnist):
    from workbench.core.project.folder import Project

    data = clothes_folder(tmp_path / "clothes", fashion_slice_as_fashion_mnist)
    window = open_window(Project.create(tmp_path / "project", str(data), ["lenet5-fashion"]))
    settle(window)
    data_view = window.views["data"]
    assert window.tabs.currentWidget() is data_view
    qtbot.waitUntil(lambda: "correct" in data_view.predictions_label.text(), timeout=30000)
    label = data_view.classes_label
    assert label.isVisible()
    assert label.text().startswith("Classes, numbered by class folder names sorted A→Z (no classes.txt): "
                                   "0 Ankle boot · 1 Bag · 2 Coat")
    assert "Index → class" in label.toolTip() and "<td align='right'>9</td><td>Trouser</td>" in label.toolTip()
    assert "another class order would give" in data_view.predictions_label.text()
    data_view.grab().save(str(tmp_path / "data-view-classes.png"))

    qtbot.keyClick(window, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)  # the Model view
    model_view = window.views["model"]
    qtbot.waitUntil(lambda: model_view.result is not None, timeout=30000)
    warning = model_view.class_order
    assert warning.isVisible()
    text = warning.text()
    assert "another order than the data" in text and "class 8 &#x27;T-shirt-top&#x27;" in text
    assert "classes.txt" in text and ", ".join(FOLDER_NAMES) in text
    assert model_view.grab().save(str(tmp_path / "model-view-class-order.png"))


def test_a_model_in_the_datas_order_gets_the_numbering_and_no_warning(qtbot, settled_window):
    window = settled_window
    data_view = window.views["data"]
    qtbot.waitUntil(lambda: "correct" in data_view.predictions_label.text(), timeout=30000)
    assert data_view.classes_label.text() == ("Classes: 0 T-shirt/top · 1 Trouser · 2 Pullover · 3 Dress · 4 Coat · "
                                              "5 Sandal · 6 Shirt · 7 Sneaker · 8 Bag · 9 Ankle boot")
    assert "another class order" not in data_view.predictions_label.text()
    qtbot.keyClick(window, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    model_view = window.views["model"]
    qtbot.waitUntil(lambda: model_view.result is not None, timeout=30000)
    assert not model_view.class_order.isVisible()
