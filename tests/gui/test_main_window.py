"""The main window on the demo project: real images and a real model, the Model view's confusion
matrix, training from the GUI, shortcuts, the screenshot path, and closing with jobs running."""

from __future__ import annotations

import time

import numpy as np
import pytest
from gui_helpers import flush_events
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage

from workbench.gui.session.jobs import CANCELLED, RUNNING

pytestmark = pytest.mark.gui


def grey_fraction(image: QImage, step: int = 3) -> float:
    """The share of sampled pixels that are neither white, black nor a flat UI colour: image content."""
    w, h = image.width(), image.height()
    values = [QColor(image.pixel(x, y)) for x in range(0, w, step) for y in range(0, h, step)]
    greys = [c for c in values if c.red() == c.green() == c.blue() and 20 < c.red() < 235]
    return len(greys) / len(values)


def test_demo_window_shows_real_images_with_predictions(qtbot, settled_window, demo_dir):
    window = settled_window
    assert window.session.project.folder == demo_dir
    assert window.selection.model == "lenet5-fashion" and window.selection.dataset == "fashion-mnist"
    data_view = window.views["data"]
    grid = data_view.grid
    assert window.tabs.currentWidget() is data_view
    assert grid.thumbnails.rowCount() == 1000  # the slice's test split
    predictions = grid.thumbnails.predictions
    assert predictions is not None and len(predictions) == 1000
    accuracy = (predictions == grid.thumbnails.labels).mean()
    assert accuracy > 0.8  # the bundled LeNet-5 really classifies these images
    assert "lenet5-fashion" in data_view.predictions_label.text()
    assert "Showing 1,000 of 1,000 images" in data_view.count_label.text()
    device = window.status.device_label.text()
    assert device == "Device: CPU" or device.startswith("Device: CUDA")
    shot = grid.viewport().grab().toImage()
    assert grey_fraction(shot) > 0.2  # thumbnails, not an empty canvas
    assert data_view.inspector.title.text().startswith("Image #")


def test_class_filter_in_the_data_view(qtbot, settled_window):
    view = settled_window.views["data"]
    view.class_box.setCurrentIndex(2)  # "Trouser"
    assert view.grid.thumbnails.rowCount() == int((view.grid.thumbnails.labels == 1).sum())
    assert set(view.grid.thumbnails.labels[view.grid.thumbnails.rows]) == {1}
    view.outcome_box.setCurrentIndex(1)  # misclassified only
    rows = view.grid.thumbnails.rows
    assert all(view.grid.thumbnails.predictions[rows] != 1)
    assert f"Showing {len(rows):,} of 1,000" in view.count_label.text()


def test_a_hidden_model_view_gets_its_result_ready_and_showing_it_only_paints(qtbot, settled_window):
    """The evaluation came while the Model view was hidden: it is laid out at the size it will show at and
    its matrix drawn, a step per turn, so that the switch to it lays out and draws nothing."""
    from PySide6.QtCore import QObject, QEvent

    window = settled_window
    view = window.views["model"]
    assert not view.isVisible()
    qtbot.waitUntil(lambda: view.result is not None, timeout=30_000)  # prepared, a step per turn
    assert view.heatmap.matrix.shape == (10, 10) and len(view.bars.values) == 10
    assert view.geometry() == window.tabs.currentWidget().geometry()  # laid out at the shown page's size

    class Resizes(QObject):
        count = 0

        def eventFilter(self, watched, event):
            Resizes.count += event.type() == QEvent.Type.Resize
            return False

    watcher = Resizes()
    for widget in (view.heatmap, view.heatmap.viewport(), view.bars, view.layers):
        widget.installEventFilter(watcher)
    drawn = []
    view.heatmap.set_matrix = lambda *args, **kwargs: drawn.append(args)
    window.show_view("model")
    flush_events()  # whatever the switch lays out or draws has happened now
    assert view.isVisible() and not drawn and Resizes.count == 0
    assert view.evaluation_stack.currentWidget() is view.heatmap


def test_model_view_shows_layers_accuracy_and_confusion_matrix(qtbot, settled_window):
    window = settled_window
    qtbot.keyClick(window, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    view = window.views["model"]
    assert window.tabs.currentWidget() is view
    assert view.stack.currentIndex() == 1
    names = [view.layers.item(r, 0).text() for r in range(view.layers.rowCount())]
    assert names[:3] == ["conv1", "relu1", "pool1"] and "fc3" in names
    assert view.evaluation_stack.currentWidget() is view.heatmap
    matrix = view.heatmap.matrix
    assert matrix.shape == (10, 10) and matrix.sum() == 1000
    assert matrix.dtype == np.float32 and matrix.flags["C_CONTIGUOUS"]
    assert np.trace(matrix) / matrix.sum() > 0.8
    assert f"{int(np.trace(matrix)):,} of 1,000 test images" in view.accuracy.text()
    assert view.heatmap.bar.levels() == (0.0, float(matrix.max()))
    assert len(view.bars.values) == 10
    view.heatmap.show_cell(4, 6)
    assert "Coat" in view.heatmap.readout_text and "Shirt" in view.heatmap.readout_text
    # The evaluation was stored in the project, with the weights' fingerprint.
    bundle = window.session.models["lenet5-fashion"]
    assert window.session.project.find_artifact("evaluation", model="lenet5-fashion",
                                                model_fingerprint=bundle.fingerprint, split="test")


def test_stored_evaluation_is_reused_when_the_project_opens_again(qtbot, open_window, settle):
    first = open_window()
    settle(first)
    first.close()
    from workbench.gui.shell.demo import open_demo_project

    project, _ = open_demo_project()
    second = open_window(project)
    settle(second)
    names = [job.name for job in second.runner.jobs]
    assert any(n.startswith("Load evaluation of lenet5-fashion") for n in names)
    assert not any(n.startswith("Evaluate ") for n in names)
    result = second.session.evaluation("lenet5-fashion", "fashion-mnist", "test")
    assert result["stored"] and result["confusion"].sum() == 1000


def test_training_from_the_gui_updates_the_curves_and_adds_the_model(qtbot, settled_window, settle):
    window = settled_window
    qtbot.keyClick(window, Qt.Key.Key_3, Qt.KeyboardModifier.ControlModifier)
    view = window.views["training"]
    assert window.tabs.currentWidget() is view
    view.arch_box.setCurrentIndex(view._arch_names.index("lenet1"))
    view.epochs.setValue(1)
    view.name.setText("lenet1-gui")
    view._name_edited = True
    qtbot.mouseClick(view.train_button, Qt.MouseButton.LeftButton)
    job = view.job
    assert job is not None
    with qtbot.waitSignal(view.trained, timeout=60000):
        pass
    assert len(view.curves.rows) == 1
    xs, ys = view.curves.loss_curve.getData()
    assert list(xs) == [1.0] and np.isfinite(ys).all()
    assert len(view.curves.test_curve.getData()[0]) == 1
    path = window.session.project.folder / "models" / "lenet1-gui.pt"
    assert path.exists() and path.with_suffix(".json").exists()
    assert window.session.model_entry("lenet1-gui") == {"name": "lenet1-gui", "spec": "models/lenet1-gui.pt"}
    assert window.selection.model == "lenet1-gui"
    assert "Saved lenet1-gui" in view.status.text()
    settle(window)  # the new model loads and is evaluated
    assert window.session.evaluation("lenet1-gui", "fashion-mnist", "test") is not None


def test_the_training_form_keeps_its_dataset_box_through_saves_and_lists_a_new_dataset(qtbot, settled_window):
    """A save that leaves the project's datasets as they were (most do) leaves the Training view's dataset
    box untouched; a dataset added to the project appears in it, with the chosen one still chosen."""
    window = settled_window
    view = window.views["training"]
    box = view.dataset_box
    chosen, count = view.current_dataset(), box.count()
    removed = []
    box.model().rowsRemoved.connect(lambda *_: removed.append(1))
    for _ in range(3):
        window.session.project_changed.emit()  # what every committed result announces
    assert not removed and box.count() == count and view.current_dataset() == chosen

    window.session.project.add_dataset("mnist")
    window.session.project_changed.emit()
    assert box.count() == count + 1 and view._datasets[-1] == "mnist"
    assert view.current_dataset() == chosen


def test_closing_the_window_during_training_stops_it_and_leaves_nothing(qtbot, open_window, settle):
    window = open_window()
    settle(window)
    view = window.views["training"]
    view.epochs.setValue(300)
    view.name.setText("never-saved")
    view._name_edited = True
    view.start_training()
    job = view.job
    qtbot.waitUntil(lambda: job.record.state == RUNNING and job.record.done > 0, timeout=60_000)
    window.close()  # returns once the job's thread has ended: 300 epochs would take minutes
    assert window.runner.active_thread_count() == 0
    qtbot.waitUntil(lambda: job.record.state == CANCELLED, timeout=30_000)
    models = window.session.project.folder / "models"
    assert not models.exists() or not any(models.iterdir())
    assert window.session.model_entry("never-saved") is None


def test_cancel_from_the_jobs_panel_stops_the_evaluation(qtbot, settled_window, monkeypatch):
    """The click cancels the running evaluation, which stores nothing (that an evaluation stops within a
    batch: tests/core/test_training.py; how soon a cancel ends a job: benchmarks/bench_cancel_latency.py)."""
    from workbench.core.models import evaluation

    evaluate_stored = evaluation.evaluate_stored

    def held_until_cancelled(ctx, *args, **kwargs):
        # The evaluation waits for the click, so it cannot finish before it, however fast the machine.
        deadline = time.monotonic() + 120
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.005)
        return evaluate_stored(ctx, *args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate_stored", held_until_cancelled)  # the session imports it per call
    window = settled_window
    job = window.session.evaluate("lenet5-fashion", "fashion-mnist", "train", force=True)
    qtbot.waitUntil(lambda: job.record.state == RUNNING, timeout=30_000)
    with qtbot.waitSignal(job.ended, timeout=30_000):
        window.jobs_panel.tree.itemWidget(window.jobs_panel.item(job), 5).click()
    assert job.record.state == CANCELLED
    assert window.session.project.find_artifact("evaluation", split="train") is None
    window.selection.set_split("train")
    qtbot.keyClick(window, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    assert "cancelled" in window.views["model"].evaluation_empty.title.text() + \
        window.views["model"].evaluation_empty.text.text()


def test_shortcuts_and_view_menu(qtbot, settled_window):
    window = settled_window
    qtbot.keyClick(window, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(window, Qt.Key.Key_W, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.indexOf(window.views["model"]) < 0 and window.tabs.count() == len(window.views) - 1
    qtbot.keyClick(window, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.indexOf(window.views["model"]) == 1
    qtbot.keyClick(window, Qt.Key.Key_F1)
    dialog = window.dialogs[-1]
    shown = {dialog.table.item(r, 1).text() for r in range(dialog.table.rowCount())}
    assert {"Open project", "Close view", "Full screen", "Keyboard shortcuts"} <= shown
    dialog.close()
    qtbot.keyClick(window, Qt.Key.Key_F11)
    assert window.isFullScreen()
    qtbot.keyClick(window, Qt.Key.Key_F11)
    assert not window.isFullScreen()
    window.action_map["toggle_jobs_dock"].trigger()
    assert not window.jobs_dock.isVisible()
    window.action_map["restore_layout"].trigger()
    assert window.jobs_dock.isVisible()


def test_layout_and_selection_are_saved_in_the_project(qtbot, open_window, settle):
    window = open_window()
    settle(window)
    window.show_view("training")
    window.selection.set_split("train")
    window.close()
    gui = window.session.project.settings["gui"]
    assert gui["layout"]["view"] == "training" and gui["selection"]["split"] == "train"
    from workbench.core.project.folder import Project

    again = open_window(Project.open(window.session.project.folder))
    assert again.current_view() == "training" and again.selection.split == "train"


def test_run_gui_screenshot_writes_a_png_with_real_data(qtbot, demo_dir, tmp_path, error_dialogs):
    from workbench.gui.shell.app import run_gui

    path = tmp_path / "shot.png"
    assert run_gui(view="model", screenshot=str(path)) == 0
    image = QImage(str(path))
    assert (image.width(), image.height()) == (1440, 900)
    assert grey_fraction(image, step=4) < 0.9  # not a blank grey frame
    viridis_yellow = sum(1 for x in range(0, 1440, 3) for y in range(0, 900, 3)
                         if (c := QColor(image.pixel(x, y))).red() > 200 and c.green() > 200 and c.blue() < 80)
    assert viridis_yellow > 50  # the confusion matrix's diagonal is drawn
    data_shot = tmp_path / "data.png"
    assert run_gui(view="data", screenshot=str(data_shot)) == 0
    assert grey_fraction(QImage(str(data_shot)), step=4) > 0.1  # thumbnails of real images


def test_unknown_view_is_refused(capsys):
    from workbench.gui.shell.app import run_gui

    assert run_gui(view="nonsense", screenshot="unused.png") == 2
    assert "unknown view" in capsys.readouterr().err


def test_window_shows_before_torch_is_imported(tmp_path):
    """A fresh process shows the window before PyTorch is even needed (start-up time: benchmarks/bench_gui.py)."""
    import os
    import subprocess
    import sys

    script = (
        "import sys, time\n"
        "t0 = time.perf_counter()\n"
        "from workbench.gui.shell.app import application, open_start_project\n"
        "from workbench.gui.shell.main_window import MainWindow\n"
        "app = application()\n"
        "project, notices, _ = open_start_project(None)\n"
        "torch_before = 'torch' in sys.modules\n"
        "window = MainWindow(project, notices)\n"
        "window.show()\n"
        "app.processEvents()\n"
        "print(time.perf_counter() - t0, torch_before)\n"
        "window.close()\n")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "WORKBENCH_DEMO_DIR": str(tmp_path / "demo")}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    _, torch_before = out.stdout.split()
    assert torch_before == "False"  # the window does not wait for PyTorch


def test_the_ui_thread_stays_responsive_while_a_model_trains(qtbot, settled_window):
    """A 10 ms timer keeps firing while training runs: the job runs beside the UI thread and hands it the
    interpreter at once when asked. (How late the ticks come is a figure of the machine, not a test:
    benchmarks/bench_ui_latency.py measures it, its quick retraining comparison included.)"""
    import sys

    from PySide6.QtCore import QTimer

    from workbench.gui.session.jobs import UI_SWITCH_INTERVAL_S

    window = settled_window
    assert sys.getswitchinterval() <= UI_SWITCH_INTERVAL_S
    view = window.views["training"]
    window.show_view("training")
    view.epochs.setValue(3)
    view.name.setText("responsive")
    view._name_edited = True
    view.start_training()
    ticks = []
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append(len(view.curves.rows)))  # the epochs finished at each tick
    timer.start()
    qtbot.waitUntil(lambda: len(view.curves.rows) >= 2, timeout=60000)
    timer.stop()
    view.job.cancel()
    qtbot.waitUntil(lambda: not view.job.record.active, timeout=30_000)
    assert ticks.count(1) > 0  # it fired while the second epoch trained (the first may end before it starts)


def test_demo_falls_back_and_says_how_to_install_fashion_mnist(qtbot, open_window, settle, tmp_path, monkeypatch):
    from workbench.core.data.registry import dataset_status
    from workbench.gui.shell.demo import open_demo_project

    monkeypatch.setenv("WORKBENCH_FASHION_MNIST_DIR", str(tmp_path / "nowhere"))
    available = {s["name"] for s in dataset_status() if s["available"]}
    project, notices = open_demo_project()
    assert project.datasets[0] == ("mnist-5k" if "mnist-5k" in available else "digits")
    window = open_window(project, notices)
    settle(window)
    texts = [n.text for n in window.notices.notices()]
    assert any("sudo apt-get install dataset-fashion-mnist" in t for t in texts)
    assert window.views["data"].grid.thumbnails.rowCount() > 0


def test_views_export_what_they_show(qtbot, settled_window, tmp_path):
    from workbench.gui.widgets.export import export_csv, export_png, export_svg

    model_view = settled_window.views["model"]
    settled_window.show_view("model")
    png = export_png(model_view.heatmap.scene(), tmp_path / "confusion.png")
    image = QImage(str(png))
    assert image.width() >= 2 * model_view.heatmap.width() - 2  # twice the on-screen size
    svg = export_svg(model_view.heatmap.scene(), tmp_path / "confusion.svg")
    assert "<svg" in svg.read_text()[:2000]
    csv_text = export_csv(model_view._confusion_rows, tmp_path / "confusion.csv").read_text().splitlines()
    assert csv_text[0].startswith("true \\ predicted,T-shirt/top") and len(csv_text) == 11
    header, rows = settled_window.views["data"].rows_for_export()
    assert header == ["index", "true_class", "true_name", "predicted_class", "predicted_name"]
    assert len(rows) == 1000
    curves = settled_window.views["training"].curves
    assert curves.csv_rows()[0][0] == "epoch" and len(curves.csv_rows()[1]) == 10  # the card's history


def test_opening_another_project_replaces_the_window(qtbot, settled_window, tmp_path, error_dialogs):
    from workbench.core.project.folder import Project

    folder = tmp_path / "other"
    Project.create(folder, "digits", [])
    window = settled_window
    assert window.open_project(tmp_path / "missing") is None
    assert "is not a project folder" in error_dialogs[-1].message and window.isVisible()
    other = window.open_project(folder)
    qtbot.addWidget(other)
    assert not window.isVisible() and window.runner.active_thread_count() == 0
    assert other.session.project.folder == folder and other.selection.dataset == "digits"
    assert other.views["model"].empty.title.text() == "No model in this project"
    assert other.views["model"].empty.button_texts() == ["Open model file…", "Train a model"]
    qtbot.waitUntil(lambda: other.session.is_ready and other.runner.is_idle(), timeout=30000)
    assert other.views["data"].grid.thumbnails.rowCount() == len(other.session.datasets["digits"].splits["test"])
    other.close()
    assert other.runner.active_thread_count() == 0


def test_project_panel_lists_the_project_and_opens_views(qtbot, settled_window):
    window = settled_window
    panel = window.project_panel
    assert [item.text(0) for item in panel.items("dataset")] == ["fashion-mnist"]
    assert [item.payload["name"] for item in panel.items("model")] == ["lenet5-fashion"]
    assert panel.items("testset")[0].text(0) == "fashion-mnist:test  (1,000 images)"
    result = panel.items("result")[0]
    assert result.payload["kind"] == "evaluation" and "%" in result.text(0)
    assert panel.items("model")[0].font(0).bold()  # the selected model
    window.show_view("training")
    panel.tree.itemActivated.emit(panel.items("testset")[0], 0)
    assert window.current_view() == "data"
    panel.tree.itemActivated.emit(result, 0)
    assert window.current_view() == "model"
    assert (window.selection.model, window.selection.split) == ("lenet5-fashion", "test")


def test_what_jobs_would_import_on_their_threads_is_imported_behind_the_splash(tmp_path):
    """An import on a lane thread holds the interpreter lock from the window: the explanation's first
    `torch.autograd.grad` imported SymPy there (0.35 s), a project's first read imported h5py."""
    import os
    import subprocess
    import sys

    script = """
import sys
from PySide6.QtWidgets import QApplication
from workbench.gui.shell.app import START_UP_IMPORTS, load_before_showing
load_before_showing(QApplication([]))
assert all(name in sys.modules for name in START_UP_IMPORTS), [n for n in START_UP_IMPORTS if n not in sys.modules]
imported = []
sys.addaudithook(lambda event, args: event == "import" and args[0] not in sys.modules and imported.append(args[0]))
import torch
x = torch.ones(3, requires_grad=True)
torch.autograd.grad((x * 2).sum(), x, grad_outputs=torch.ones(()))
import h5py
h5py.File(sys.argv[1], "w").close()
print("late imports:", imported)
assert not imported, imported
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "f.h5")], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stdout + done.stderr
