"""Bad input gets an error dialog (message, hint, Details) and the application keeps running:
corrupt and pickle-only model files, a model that does not fit the dataset, a model that returns
NaN, empty and unreadable datasets, a broken plugin, read-only and damaged project folders."""

from __future__ import annotations

import os

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from workbench.core.data.registry import FASHION_CLASSES
from workbench.core.errors import WorkbenchError

pytestmark = pytest.mark.gui


def assert_still_running(qtbot, window):
    """The window still reacts: views switch and the data view still shows the images."""
    # A recorded (never shown) dialog keeps the activation the offscreen platform gave it.
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=30_000)
    qtbot.keyClick(window, Qt.Key.Key_1, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.currentWidget() is window.views["data"]
    assert window.views["data"].grid.thumbnails.rowCount() == 1000
    assert window.isVisible()


def wait_for_dialog(qtbot, error_dialogs, count=1):
    qtbot.waitUntil(lambda: len(error_dialogs) >= count, timeout=20000)
    return error_dialogs[count - 1]


def test_corrupt_model_file_shows_the_error_dialog(qtbot, settled_window, error_dialogs, tmp_path):
    bad = tmp_path / "corrupt.pt"
    # seeded noise that is no pickle: unseeded bytes began, once in a few hundred runs, with a pickle's
    # protocol opcode and were read (rightly) as a pickled object instead
    bad.write_bytes(b"\x00" + np.random.default_rng(0).bytes(4095))
    models_before = settled_window.session.project.models
    settled_window.session.add_model_file(str(bad))
    dialog = wait_for_dialog(qtbot, error_dialogs)
    assert "corrupt.pt is not a PyTorch file" in dialog.message
    assert "damaged" in dialog.hint and "Error" not in dialog.message
    assert dialog.details and dialog.details_button.isVisibleTo(dialog)
    assert not dialog.details_box.isVisibleTo(dialog)
    qtbot.mouseClick(dialog.details_button, Qt.MouseButton.LeftButton)
    assert dialog.details_box.isVisibleTo(dialog)
    assert settled_window.session.project.models == models_before
    # Double-clicking the failed job in the jobs panel shows its error again.
    failed = next(j for j in settled_window.runner.jobs if j.record.state == "failed")
    panel = settled_window.jobs_panel
    panel.tree.itemDoubleClicked.emit(panel.item(failed), 0)
    assert len(error_dialogs) == 2 and error_dialogs[1].message == dialog.message
    assert_still_running(qtbot, settled_window)


def test_pickle_only_model_needs_the_trust_box(qtbot, settled_window, error_dialogs, tmp_path):
    import torch

    from workbench.core.models.architectures import lenet5

    path = tmp_path / "pickled.pt"
    torch.save(lenet5(), path)  # the whole module, pickled: not loadable with weights_only
    window = settled_window
    dialog = window.open_model_file()
    dialog.path.setText(str(path))
    qtbot.mouseClick(dialog.buttons.button(QDialogButtonBox.StandardButton.Open), Qt.MouseButton.LeftButton)
    # The failure is said in the dialog, which stays open with the path: no need to type it again.
    qtbot.waitUntil(dialog.error.isVisible, timeout=20000)
    assert "pickled Python object" in dialog.error.text() and "I trust this file" in dialog.error.text()
    assert dialog.isVisible() and dialog.path.text() == str(path)
    assert window.session.model_entry("pickled") is None
    assert_still_running(qtbot, window)

    dialog.trust.setChecked(True)
    with qtbot.waitSignal(window.session.model_added, timeout=20000) as added:
        qtbot.mouseClick(dialog.buttons.button(QDialogButtonBox.StandardButton.Open), Qt.MouseButton.LeftButton)
    assert added.args == ["pickled"]
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=30_000)
    assert window.selection.model == "pickled"
    bundle = window.session.models["pickled"]
    assert bundle.model.info.format == "pickle (trusted)"
    assert [layer.name for layer in bundle.catalogue][:2] == ["conv1", "relu1"]  # dataset's shape stood in
    assert error_dialogs == []


def test_model_that_does_not_fit_the_dataset(qtbot, settled_window, error_dialogs, settle):
    window = settled_window
    window.add_dataset("digits")  # 8×8 images: LeNet-5 takes 28×28
    qtbot.waitUntil(lambda: "digits" in window.session.project.datasets, timeout=20000)
    assert window.selection.dataset == "digits"
    settle(window)
    qtbot.keyClick(window, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    view = window.views["model"]
    assert view.evaluation_empty.title.text() == "This model does not fit this dataset"
    assert "1×28×28" in view.evaluation_empty.text.text() and "1×8×8" in view.evaluation_empty.text.text()
    assert error_dialogs == []  # nothing was tried behind the user's back
    qtbot.keyClick(window, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)  # evaluate anyway
    dialog = wait_for_dialog(qtbot, error_dialogs)
    assert "expects images of shape (1, 28, 28)" in dialog.message
    window.selection.set_dataset("fashion-mnist")
    assert_still_running(qtbot, window)


def test_model_returning_nan_is_reported(qtbot, settled_window, error_dialogs, tmp_path):
    import torch

    from workbench.core.models.architectures import lenet5
    from workbench.core.models.model_io import save_checkpoint

    module = lenet5()
    with torch.no_grad():
        module.fc3.weight.fill_(float("nan"))
    path = save_checkpoint(tmp_path / "nan-model.pt", module, "lenet5",
                           {"name": "nan-model", "class_names": FASHION_CLASSES, "input_shape": [1, 28, 28]})
    window = settled_window
    with qtbot.waitSignal(window.session.model_added, timeout=20000):
        window.session.add_model_file(str(path))
    dialog = wait_for_dialog(qtbot, error_dialogs)
    assert "returned NaN or infinite scores" in dialog.message
    view = window.views["model"]
    qtbot.waitUntil(lambda: view.evaluation_empty.title.text() == "The evaluation failed")
    assert view.evaluation_empty.button_texts() == ["Try again"]
    assert window.session.project.find_artifact("evaluation", model="nan-model") is None
    assert_still_running(qtbot, window)


@pytest.mark.parametrize("content", ["empty", "junk"])
def test_empty_or_unreadable_dataset_file(qtbot, settled_window, error_dialogs, tmp_path, content):
    path = tmp_path / f"{content}.npz"
    if content == "empty":
        np.savez(path, x=np.zeros((0, 28, 28), np.uint8), y=np.zeros(0, np.int64))
    else:
        path.write_bytes(b"this is not a zip archive" * 100)
    window = settled_window
    dialog = window.open_dataset_file()
    dialog.path.setText(str(path))
    dialog.buttons.button(QDialogButtonBox.StandardButton.Open).click()
    # Said inside the dialog, which stays open with the path: no need to type it again.
    qtbot.waitUntil(lambda: dialog.error.isVisible(), timeout=20000)
    assert dialog.isVisible() and dialog.path.text() == str(path)
    if content == "empty":
        assert "Dataset 'empty' holds no images" in dialog.error.text()
    else:
        assert path.name in dialog.error.text()
    assert str(path) not in window.session.project.datasets
    assert error_dialogs == []
    dialog.reject()
    assert_still_running(qtbot, window)


def test_broken_plugin_is_reported_and_the_app_starts(qtbot, open_window, settle, tmp_path, monkeypatch):
    from workbench.core import plugins

    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "broken_plugin.py").write_text("raise RuntimeError('this plugin is broken on purpose')\n")
    monkeypatch.setenv("WORKBENCH_PLUGIN_PATH", str(folder))
    monkeypatch.setattr(plugins, "_REPORTS", [])
    monkeypatch.setattr(plugins, "_LOADED", False)
    window = open_window()
    settle(window)
    texts = [n.text for n in window.notices.notices()]
    assert any("broken_plugin" in t and "could not be loaded" in t for t in texts)
    assert "broken_plugin" in window.statusBar().currentMessage()
    assert_still_running(qtbot, window)


def test_read_only_project_opens_and_saves_nothing(qtbot, open_window, settle, error_dialogs, demo_dir,
                                                   monkeypatch):
    from workbench.core.project.folder import Project
    from workbench.gui.shell.demo import open_demo_project

    open_demo_project()  # create it while it is writable
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if (
        mode == os.W_OK and os.fspath(path) == os.fspath(demo_dir)) else real_access(path, mode, *a, **k))
    project = Project.open(demo_dir)
    assert project.read_only
    window = open_window(project)
    settle(window)
    assert "read-only" in window.windowTitle()
    assert any("read-only" in n.text for n in window.notices.notices())
    # The evaluation is shown, though it could not be stored.
    assert window.session.evaluation("lenet5-fashion", "fashion-mnist", "test") is not None
    assert not (demo_dir / "artifacts").exists()
    window.views["training"].start_training()
    dialog = wait_for_dialog(qtbot, error_dialogs)
    assert "read-only" in dialog.message
    assert_still_running(qtbot, window)


def test_damaged_results_are_listed_and_the_rest_opens(qtbot, open_window, settle, demo_dir):
    from workbench.core.project.folder import Project

    first = open_window()
    settle(first)
    first.close()
    artifact = next((demo_dir / "artifacts").rglob("*.h5"))
    artifact.write_bytes(b"\x89HDF damaged beyond repair")
    window = open_window(Project.open(demo_dir))
    settle(window)
    panel = window.project_panel
    assert "Problems" in panel.groups
    assert any("damaged" in item.payload["text"] for item in panel.items("problem"))
    assert any("could not be read" in n.text for n in window.notices.notices())
    # The damaged evaluation is not reused: it is computed again and the view works.
    assert window.session.evaluation("lenet5-fashion", "fashion-mnist", "test") is not None
    assert_still_running(qtbot, window)


def test_damaged_project_file_falls_back_to_the_demo(qtbot, demo_dir, tmp_path):
    from workbench.gui.shell.app import open_start_project

    folder = tmp_path / "broken-project"
    folder.mkdir()
    (folder / "project.json").write_text("{ not json")
    project, notices, error = open_start_project(str(folder))
    assert isinstance(error, WorkbenchError) and "damaged" in error.message
    assert project.folder == demo_dir
    assert any("demo project opened instead" in text for text, _ in notices)


def test_unexpected_exceptions_in_slots_reach_the_dialog(qtbot, error_dialogs):
    import sys

    from workbench.gui.widgets.error_dialog import install_excepthook

    restore = install_excepthook(lambda: None)
    try:
        try:
            raise KeyError("no such thing")
        except KeyError as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
    finally:
        restore()
    assert error_dialogs and error_dialogs[0].message.startswith("Unexpected error: KeyError")
    assert "Traceback" in error_dialogs[0].details


def test_torchvision_dataset_missing_from_the_cache_offline(qtbot, settled_window, error_dialogs, tmp_path,
                                                            monkeypatch):
    """Without the Download box nothing is fetched: the message names the cache and the way to fill it."""
    monkeypatch.setenv("WORKBENCH_DATA_CACHE", str(tmp_path / "cache"))
    window = settled_window
    dialog = window.open_dataset_file()
    dialog.torchvision.setCurrentText("KMNIST")
    assert not dialog.path.isEnabled() and dialog.download.isEnabled()
    assert dialog.choice() == "torchvision:KMNIST" and not dialog.allow_download()
    dialog.buttons.button(QDialogButtonBox.StandardButton.Open).click()
    qtbot.waitUntil(lambda: dialog.error.isVisible(), timeout=20000)
    shown = dialog.error.text()
    assert "KMNIST" in shown and "Download" in shown and str(tmp_path / "cache") in shown
    assert dialog.isVisible() and dialog.torchvision.currentText() == "KMNIST" and error_dialogs == []
    dialog.reject()
    assert not (tmp_path / "cache" / "torchvision" / "KMNIST").exists() or \
        not any((tmp_path / "cache" / "torchvision" / "KMNIST").rglob("*.gz"))
    assert "torchvision:KMNIST" not in window.session.project.datasets
    assert_still_running(qtbot, window)


def test_a_state_dict_opens_with_its_architecture_inferred(qtbot, settled_window, error_dialogs, tmp_path):
    import torch

    from workbench.core.models.architectures import lenet5

    path = tmp_path / "weights.pt"
    torch.save(lenet5().state_dict(), path)  # bare weights: names and shapes fit lenet5 alone
    window = settled_window
    dialog = window.open_model_file()
    dialog.path.setText(str(path))
    with qtbot.waitSignal(window.session.model_added, timeout=20000) as added:
        qtbot.mouseClick(dialog.buttons.button(QDialogButtonBox.StandardButton.Open), Qt.MouseButton.LeftButton)
    bundle = window.session.models[added.args[0]]
    assert bundle.model.info.arch == "lenet5" and error_dialogs == []
    assert window.session.model_entry(added.args[0])["arch"] == "lenet5"  # recorded for the next opening
