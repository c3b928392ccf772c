"""File → Open dataset and File → Open model load what they name and close only once it has loaded: a
file that fails keeps the dialog open, with the path still typed and what went wrong said inside it
in the user's words (no error dialog over it, no exception's class name); while it loads the dialog
says so and the window goes on; a good file then closes it and joins the project."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from workbench.core.data.registry import FASHION_CLASSES

pytestmark = pytest.mark.gui

TIMEOUT_MS = 20_000
CLASS_NAME = re.compile(r"\b\w*(Error|Exception)\b")


def open_button(dialog):
    return dialog.buttons.button(QDialogButtonBox.StandardButton.Open)


def fashion_npz(path, n: int = 40):
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), y=np.arange(n) % 10)
    return path


def truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    return path


def test_a_truncated_npz_keeps_the_dataset_dialog_open_with_the_error_inside(qtbot, settled_window, tmp_path,
                                                                             error_dialogs):
    window = settled_window
    bad = truncated(fashion_npz(tmp_path / "cut.npz"))
    dialog = window.open_dataset_file()
    qtbot.waitExposed(dialog)
    qtbot.keyClicks(dialog.path, str(bad))
    qtbot.mouseClick(open_button(dialog), Qt.MouseButton.LeftButton)
    # Loading: Open says so, a busy bar runs, the fields are locked to what is loading.
    assert dialog.loading and dialog.busy.isVisible() and open_button(dialog).text() == "Loading…"
    assert not open_button(dialog).isEnabled() and not dialog.path.isEnabled()
    dialog.grab().save(str(tmp_path / "open-dataset-loading.png"))
    qtbot.waitUntil(lambda: dialog.error.isVisible(), timeout=TIMEOUT_MS)
    assert dialog.isVisible() and dialog.path.text() == str(bad) and dialog.path.isEnabled()
    assert "cut.npz" in dialog.error.text() and not CLASS_NAME.search(dialog.error.text())
    assert not dialog.busy.isVisible() and open_button(dialog).text() == "Open" and open_button(dialog).isEnabled()
    assert error_dialogs == [] and str(bad) not in window.session.project.datasets
    dialog.grab().save(str(tmp_path / "open-dataset-error.png"))

    # Details… shows the reader's own text in the error dialog, over this one.
    if dialog.details_button.isVisible():
        qtbot.mouseClick(dialog.details_button, Qt.MouseButton.LeftButton)
        assert len(error_dialogs) == 1 and error_dialogs[0].details
        error_dialogs.clear()

    # Typing another path clears the old message; a good file loads and closes the dialog.
    good = fashion_npz(tmp_path / "good.npz")
    dialog.path.clear()
    assert not dialog.error.isVisible()
    qtbot.keyClicks(dialog.path, str(good))
    with qtbot.waitSignal(window.session.dataset_added, timeout=TIMEOUT_MS) as added:
        qtbot.keyClick(dialog.path, Qt.Key.Key_Return)
    assert added.args == [str(good)]
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=30_000)
    assert str(good) in window.session.project.datasets and window.selection.dataset == str(good)
    assert error_dialogs == []


def test_cancel_while_loading_stops_the_load_and_adds_nothing(qtbot, settled_window, tmp_path, error_dialogs):
    window = settled_window
    good = fashion_npz(tmp_path / "slow.npz")
    dialog = window.open_dataset_file()
    dialog.path.setText(str(good))
    qtbot.mouseClick(open_button(dialog), Qt.MouseButton.LeftButton)
    job = dialog._job
    assert job is not None
    qtbot.mouseClick(dialog.buttons.button(QDialogButtonBox.StandardButton.Cancel), Qt.MouseButton.LeftButton)
    assert not dialog.isVisible()
    qtbot.waitUntil(lambda: not job.record.active, timeout=TIMEOUT_MS)
    if job.record.state == "cancelled":  # a load that finished before the cancel reached it is kept
        assert str(good) not in window.session.project.datasets
    assert error_dialogs == []


def test_a_truncated_npz_opened_as_a_model_is_said_in_words_inside_the_dialog(qtbot, settled_window, tmp_path,
                                                                               error_dialogs):
    import torch

    from workbench.core.models.architectures import lenet5
    from workbench.core.models.model_io import save_checkpoint

    window = settled_window
    bad = truncated(fashion_npz(tmp_path / "cut.npz"))
    dialog = window.open_model_file()
    qtbot.waitExposed(dialog)
    qtbot.keyClicks(dialog.path, str(bad))
    qtbot.mouseClick(open_button(dialog), Qt.MouseButton.LeftButton)
    assert dialog.busy.isVisible() and not dialog.trust.isEnabled()
    qtbot.waitUntil(lambda: dialog.error.isVisible(), timeout=TIMEOUT_MS)
    text = dialog.error.text()
    assert "cut.npz is a zip archive" in text and "cut off or damaged" in text and "copy or export it again" in text
    assert "(RuntimeError)" not in text and not CLASS_NAME.search(text)
    assert dialog.isVisible() and dialog.path.text() == str(bad) and error_dialogs == []
    dialog.grab().save(str(tmp_path / "open-model-error.png"))

    torch.manual_seed(0)
    good = save_checkpoint(tmp_path / "good.pt", lenet5(), "lenet5",
                           {"name": "good", "class_names": FASHION_CLASSES, "input_shape": [1, 28, 28]})
    dialog.path.setText(str(good))
    with qtbot.waitSignal(window.session.model_added, timeout=TIMEOUT_MS) as added:
        qtbot.mouseClick(open_button(dialog), Qt.MouseButton.LeftButton)
    assert added.args == ["good"]
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=30_000)
    assert window.session.model_entry("good") is not None and error_dialogs == []
