"""The Importance view on the demo project (the Fashion-MNIST slice and the bundled LeNet-5): the
class × neuron relevance heatmap and its top-m marks, neuron selection by clicking, the gallery,
the input inspector, the ablation check, export, cancellation, bad input and the screenshot."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QColor, QImage

from workbench.gui.session.jobs import CANCELLED

pytestmark = pytest.mark.gui

LAYER = "fc2"  # LeNet-5's IDC default layer: 84 neurons


def idle(window) -> bool:
    return window.session.is_ready and window.runner.is_idle()


@pytest.fixture
def importance_window(qtbot, settled_window):
    """The demo window showing the Importance view with everything computed."""
    window = settled_window
    qtbot.keyClick(window, Qt.Key.Key_4, Qt.KeyboardModifier.ControlModifier)
    view = window.views["importance"]
    assert window.tabs.currentWidget() is view
    qtbot.waitUntil(lambda: view.result is not None and idle(window), timeout=60000)
    return window


def view_point(graphics_view, scene_pos) -> QPoint:
    return graphics_view.mapFromScene(scene_pos)


def test_view_computes_the_relevance_heatmap_with_top_m_marks(qtbot, importance_window):
    window = importance_window
    view, session = window.views["importance"], window.session
    assert window.selection.layer == LAYER and view.layer_box.currentText().startswith("fc2")
    assert "IDC default" in view.layer_box.currentText()
    result = session.importance("lenet5-fashion", "fashion-mnist", LAYER)
    assert result is view.result and result.per_class.shape == (10, 84)
    heatmap = view.heatmap
    assert heatmap.matrix.shape == (10, 84) and heatmap.matrix.dtype == np.float32
    assert heatmap.matrix.flags["C_CONTIGUOUS"]
    low, high = heatmap.levels
    assert low == -high and high > 0  # diverging levels, symmetric around zero
    assert heatmap.image.image is not None and np.isfinite(heatmap.image.image).all()
    assert heatmap.row_labels[0] == "T-shirt/top"
    top = result.top(6)
    assert list(heatmap.top_columns) == list(top) and len(top) == 6
    assert [len(row) for row in heatmap.class_top] == [6] * 10
    np.testing.assert_allclose(heatmap.bars.values, result.totals)
    assert set(np.asarray(heatmap.bars.marked).tolist()) == set(top.tolist())
    # The most relevant neuron is selected, so its gallery is there.
    assert window.selection.neuron == int(result.ranking[0])
    assert view.gallery.title.text() == f"Neuron {result.ranking[0]} of {LAYER}"
    assert len(view.gallery.by_relevance.tiles) == 9 and len(view.gallery.by_activation.tiles) == 9
    scores = [t.score for t in view.gallery.by_relevance.tiles]
    assert scores == sorted(scores, reverse=True)
    assert view.ablation.result is not None and view.ablation.result.m == 6
    assert "accuracy" in view.ablation.verdict.text().lower()
    # Stored by the session, with what it was made of.
    name = session.project.find_artifact("importance", layer=LAYER, per_class=True)
    assert name is not None and result.artifact == name
    assert "correctly classified" in view.summary.text()
    heatmap.show_cell(1, int(top[0]))
    assert f"Neuron <b>{top[0]}</b> · class <b>Trouser</b>" in heatmap.readout_text and "rank" in heatmap.readout_text
    # The stored result opens this view from the project panel, at its layer.
    window.show_view("data")
    panel = window.project_panel
    item = next(i for i in panel.items("result") if i.payload["name"] == name)
    panel.tree.itemActivated.emit(item, 0)
    assert window.current_view() == "importance" and window.selection.layer == LAYER


def test_the_bars_fill_in_while_the_relevance_is_summed(qtbot, importance_window):
    window = importance_window
    view = window.views["importance"]
    seen = []
    window.session.importance_progress.connect(
        lambda key, progress: seen.append((view.heatmap.matrix.shape, len(view.heatmap.bars.values), view.summary.text())))
    with qtbot.waitSignal(window.session.importance_ready, timeout=30000):
        view.recompute_button.click()
    assert len(seen) >= 2  # one update per batch of 512 of the 2,000 training images
    assert all(shape == (1, 84) and bars == 84 for shape, bars, _ in seen)
    assert "of 2,000 training images" in seen[0][2]
    qtbot.waitUntil(lambda: idle(window), timeout=30000)
    assert view.heatmap.matrix.shape == (10, 84) and not view.result.reused


def test_normalise_per_class_scales_each_row(qtbot, importance_window):
    view = importance_window.views["importance"]
    assert view.normalise.isChecked()
    rows = np.abs(view.heatmap.matrix).max(axis=1)
    np.testing.assert_allclose(rows, 1.0, rtol=1e-6)
    view.normalise.setChecked(False)
    np.testing.assert_allclose(view.heatmap.matrix, view.result.per_class.astype(np.float32), rtol=1e-6)
    assert "sum over images" in view.heatmap.bar.axis.labelText


def test_changing_m_updates_the_marks_and_the_ablation(qtbot, importance_window):
    window = importance_window
    view = window.views["importance"]
    assert view.m_box.maximum() == 84  # the spin box bounds m by the layer's neurons
    view.m_box.setValue(500)
    assert view.m_box.value() == 84
    view.m_box.setValue(3)
    assert list(view.heatmap.top_columns) == list(view.result.top(3))
    assert len(np.asarray(view.heatmap.bars.marked)) == 3
    assert all(len(row) == 3 for row in view.heatmap.class_top)
    qtbot.waitUntil(lambda: view.ablation.result is not None and view.ablation.result.m == 3, timeout=30000)
    assert set(view.ablation.result.important_neurons) == set(view.result.top(3).tolist())
    # An impossible m reaching the core is said in the view, not raised.
    view.m_box.blockSignals(True)
    view.m_box.setMaximum(1000)
    view.m_box.setValue(1000)
    view.m_box.blockSignals(False)
    assert len(view.top()) == 0 and "larger than the 84 neurons" in view.summary.text()


def test_clicking_a_cell_or_a_bar_selects_the_neuron_and_starts_its_gallery(qtbot, importance_window):
    window = importance_window
    view, selection = window.views["importance"], window.selection
    heatmap = view.heatmap
    neuron = int(view.result.ranking[-1])  # not the one selected now
    with qtbot.waitSignal(window.runner.job_added, timeout=30_000) as added:
        qtbot.mouseClick(heatmap.viewport(), Qt.MouseButton.LeftButton,
                         pos=view_point(heatmap, heatmap.cell_center(4, neuron)))
    assert selection.neuron == neuron
    assert added.args[0].name.startswith(f"Gallery of neuron {neuron} of {LAYER}")
    assert heatmap.outline.isVisible() and heatmap.outline.rect().left() == neuron
    qtbot.waitUntil(lambda: idle(window), timeout=30000)
    assert view.gallery.title.text() == f"Neuron {neuron} of {LAYER}"
    gallery = view.jobs.result("gallery", view.gallery_key())
    assert gallery.neuron == neuron and view.gallery.has_tiles()

    bars = heatmap.bars
    other = int(view.result.ranking[1])
    middle = sum(bars.vb.viewRange()[1]) / 2
    bar_point = bars.vb.mapViewToScene(QPointF(other + 0.5, middle))
    qtbot.mouseClick(heatmap.viewport(), Qt.MouseButton.LeftButton, pos=view_point(heatmap, bar_point))
    assert selection.neuron == other and bars.selected == other
    qtbot.waitUntil(lambda: idle(window), timeout=30000)
    assert view.jobs.result("gallery", view.gallery_key()).neuron == other


def test_input_inspector_shows_the_overlay_and_relevance_per_neuron(qtbot, importance_window):
    window = importance_window
    view = window.views["importance"]
    inspector = view.inspector
    assert window.selection.input == ("test", 0) and inspector.explanation.index == 0
    # The Data view's current image is the linked selection's input too.
    data_view = window.views["data"]
    window.show_view("data")
    data_view.grid.setCurrentIndex(data_view.grid.thumbnails.index(3))
    assert window.selection.input == ("test", 3)
    window.show_view("importance")
    qtbot.waitUntil(lambda: inspector.explanation.index == 3 and idle(window), timeout=30000)
    inspector.choose("test", 7)
    assert window.selection.input == ("test", 7)
    # Until image 7's explanation comes, the heading names the image asked for, as the index box does.
    assert inspector.explanation.index == 3 and inspector.title.text() == "Test image #7: explaining…"
    qtbot.waitUntil(lambda: inspector.explanation is not None and inspector.explanation.index == 7 and idle(window),
                    timeout=30000)
    explanation = inspector.explanation
    assert explanation.heatmap.shape == (28, 28) and explanation.layer_relevance.shape == (84,)
    np.testing.assert_allclose(inspector.bars.plot.values, explanation.layer_relevance, rtol=1e-6)
    assert inspector.title.text() == "Test image #7"
    truth = window.session.datasets["fashion-mnist"].splits["test"].labels[7]
    assert inspector.truth.text() == window.session.datasets["fashion-mnist"].class_names[truth]
    # The overlay is the heatmap's colours over the grey image, stronger with more opacity.
    view.opacity.setValue(100)
    image = inspector.image.pixmap().toImage()
    assert image.width() == 28 * 5  # whole-number scaling
    coloured = sum(1 for x in range(0, image.width(), 2) for y in range(0, image.height(), 2)
                   if len({(c := QColor(image.pixel(x, y))).red(), c.green(), c.blue()}) > 1)
    view.opacity.setValue(0)
    plain = inspector.image.pixmap().toImage()
    greys = sum(1 for x in range(0, plain.width(), 2) for y in range(0, plain.height(), 2)
                if len({(c := QColor(plain.pixel(x, y))).red(), c.green(), c.blue()}) == 1)
    assert coloured > 50 and greys == (plain.width() // 2) * (plain.height() // 2)
    # Explaining the selected neuron instead of the prediction.
    inspector.mode_box.setCurrentIndex(1)
    qtbot.waitUntil(lambda: inspector.explanation.neuron == window.selection.neuron and idle(window), timeout=30000)
    assert "neuron" in inspector.explained.text()
    # A gallery image goes to the inspector by keyboard: arrow keys, then Enter.
    grid = view.gallery.by_relevance
    grid.setFocus()
    qtbot.keyClick(grid, Qt.Key.Key_Right)
    qtbot.keyClick(grid, Qt.Key.Key_Return)
    assert window.selection.input == ("train", grid.tiles[1].index)
    qtbot.waitUntil(lambda: inspector.explanation.index == grid.tiles[1].index and idle(window), timeout=30000)
    assert inspector.title.text() == f"Train image #{grid.tiles[1].index:,}"


def test_export_writes_png_and_csv(qtbot, importance_window, tmp_path, monkeypatch):
    import csv

    view = importance_window.views["importance"]
    png = view.export_heatmap_png(tmp_path / "relevance.png")
    image = QImage(str(png))
    assert image.width() >= 2 * view.heatmap.width() - 2
    view.export_gallery_png(tmp_path / "gallery.png")
    gallery = QImage(str(tmp_path / "gallery.png"))
    assert gallery.width() == 2 * view.gallery.width()
    # The CSV goes through the Export menu, as the user would save it.
    from PySide6.QtWidgets import QFileDialog

    target = tmp_path / "relevance.csv"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), "CSV table (*.csv)"))
    view._update_export_actions()
    assert all(action.isEnabled() for action in view.export_actions.values())
    view.export_actions["relevance_csv"].trigger()
    rows = list(csv.reader(target.open()))
    assert rows[0][:4] == ["neuron", "rank", "relevance_all_classes", "top_6"] and len(rows[0]) == 14
    assert len(rows) == 85 and sum(int(r[3]) for r in rows[1:]) == 6
    assert {int(r[1]) for r in rows[1:]} == set(range(1, 85))
    header, gallery_rows = view.gallery_rows()
    assert header[2] == "ranked_by" and len(gallery_rows) == 18
    header, ablation_rows = view.ablation.rows()
    assert ablation_rows[0][0] == "none" and len(ablation_rows) == 2 + 5


def test_a_cancelled_importance_job_leaves_no_artifact(qtbot, importance_window):
    window = importance_window
    view, session = window.views["importance"], window.session
    stored = session.project.find_artifact("importance", layer=LAYER)
    window.selection.set_layer("conv2")
    key = ("lenet5-fashion", "fashion-mnist", "conv2")
    job = session.importance_jobs[key]
    job.cancel()
    qtbot.waitUntil(lambda: not job.record.active, timeout=30_000)
    assert job.record.state == CANCELLED
    qtbot.waitUntil(lambda: idle(window), timeout=30000)
    assert session.project.find_artifact("importance", layer="conv2") is None
    assert session.project.find_artifact("importance", layer=LAYER) == stored  # the saved result is intact
    assert view.heatmap_stack.currentWidget() is view.heatmap_stack.empty
    assert "cancelled" in view.heatmap_stack.empty.text.text()
    assert view.heatmap_stack.empty.button_texts()[0] == "Compute again"
    view.heatmap_stack.empty.click("Compute again")
    qtbot.waitUntil(lambda: view.result is not None and idle(window), timeout=30000)
    assert view.result.per_class.shape == (10, 16)  # conv2's channels
    assert session.project.find_artifact("importance", layer="conv2") is not None


def test_a_class_without_correct_inputs_is_hatched_not_an_error(qtbot, importance_window, error_dialogs):
    window = importance_window
    view, session = window.views["importance"], window.session
    key = ("lenet5-fashion", "fashion-mnist", LAYER)
    emptied = copy.copy(session.importances[key])
    emptied.counts = emptied.counts.copy()
    emptied.counts[3] = 0
    emptied.per_class = emptied.per_class.copy()
    emptied.per_class[3] = 0.0
    emptied.per_class[5, 0] = np.nan  # NaN relevance: hatched too
    session.importances[key] = emptied
    view.refresh()
    assert view.result is emptied
    heatmap = view.heatmap
    assert heatmap.empty_rows == [3] and np.isnan(heatmap.matrix[3]).all() and np.isnan(heatmap.matrix[5, 0])
    assert np.isfinite(heatmap.image.image).all()  # the image itself never holds NaN
    assert len(heatmap._hatches) == 2
    assert "Dress" in view.summary.text() and "NaN" in view.summary.text()
    assert heatmap.class_top[3].size == 0
    heatmap.show_cell(3, 0)
    assert "no correctly classified" in heatmap.readout_text
    assert error_dialogs == []


def test_a_layer_lrp_cannot_handle_is_a_message_and_the_app_keeps_running(qtbot, settled_window, error_dialogs,
                                                                          tmp_path):
    import torch
    from torch import nn

    window = settled_window
    path = tmp_path / "lrn.pt"
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.Unflatten(1, (2, 4, 4)), nn.LocalResponseNorm(2),
                             nn.Flatten(), nn.ReLU(), nn.Linear(32, 10)), path)
    with qtbot.waitSignal(window.session.model_added, timeout=30000):
        window.session.add_model_file(str(path), trust=True)
    window.show_view("importance")
    view = window.views["importance"]
    qtbot.waitUntil(lambda: idle(window) and view.heatmap_stack.currentWidget() is view.heatmap_stack.empty
                    and "No relevance" in view.heatmap_stack.empty.title.text(), timeout=30000)
    assert window.selection.layer == "1"  # the last Linear before the output
    assert "LocalResponseNorm" in view.heatmap_stack.empty.text.text()
    assert view.heatmap_stack.empty.button_texts() == ["Compute again", "Details…"]
    assert window.session.project.find_artifact("importance", model="lrn") is None
    assert error_dialogs == []  # said in the view; Details… opens the dialog
    view.heatmap_stack.empty.click("Details…")
    assert len(error_dialogs) == 1 and "LocalResponseNorm" in error_dialogs[0].message
    # An unknown layer name falls back to the default instead of failing.
    window.selection.set_layer("no-such-layer")
    assert window.selection.layer == "1"
    # Back to the demo model: the view works again.
    window.selection.set_model("lenet5-fashion")
    qtbot.waitUntil(lambda: view.result is not None and idle(window), timeout=30000)
    assert view.heatmap.matrix.shape == (10, 84)
    window.activateWindow()  # a recorded (never shown) dialog keeps the activation the offscreen platform gave it
    qtbot.waitUntil(window.isActiveWindow, timeout=30_000)
    qtbot.keyClick(window, Qt.Key.Key_1, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.currentWidget() is window.views["data"] and window.isVisible()


def test_bars_and_heatmap_widgets_start_empty_and_mark_what_they_are_given(qtbot):
    from workbench.gui.widgets.neuron_bars import NeuronBars
    from workbench.gui.widgets.relevance_heatmap import RelevanceHeatmap

    bars = NeuronBars()
    qtbot.addWidget(bars)
    bars.plot.set_selected(None)  # nothing to draw yet: no error
    bars.set_values(np.array([1.0, -2.0, np.nan, 4.0]), marked=[3], selected=1)
    assert bars.plot.bars.opts["height"].tolist() == [1.0, -2.0, 0.0, 4.0]  # NaN draws no bar
    heatmap = RelevanceHeatmap()
    qtbot.addWidget(heatmap)
    heatmap.set_selected(3)
    heatmap.set_matrix(np.array([[1.0, -3.0], [0.5, 0.0]]), ["a", "b"], empty_rows=[1])
    assert heatmap.levels == (-3.0, 3.0) and np.isnan(heatmap.matrix[1]).all()
    assert heatmap.plot.getAxis("left")._tickLevels[0][-1][1] == "b  (none)"


def test_selection_clears_what_no_longer_applies(qapp):
    from workbench.gui.session.selection import Selection

    selection = Selection()
    seen = []
    selection.changed.connect(seen.append)
    selection.set_model("a")
    selection.set_layer("fc2")
    selection.set_neuron(5)
    selection.set_input("test", 3)
    assert (selection.layer, selection.neuron, selection.input) == ("fc2", 5, ("test", 3))
    selection.set_layer("fc1")
    assert selection.neuron is None
    selection.set_neuron(2)
    selection.set_model("b")
    assert selection.layer is None and selection.neuron is None
    selection.set_dataset("digits")
    assert selection.input is None
    assert seen == ["model", "layer", "neuron", "input", "layer", "neuron", "model", "dataset"]


def test_run_gui_screenshot_of_the_importance_view(qtbot, demo_dir, tmp_path, error_dialogs):
    from workbench.gui.shell.app import run_gui

    path = tmp_path / "importance.png"
    assert run_gui(view="importance", screenshot=str(path)) == 0
    image = QImage(str(path))
    assert (image.width(), image.height()) == (1440, 900)
    pixels = [QColor(image.pixel(x, y)) for x in range(0, 1440, 3) for y in range(0, 900, 3)]
    reds = sum(1 for c in pixels if c.red() > 170 and c.green() < 90 and c.blue() < 90)
    blues = sum(1 for c in pixels if c.blue() > 170 and c.red() < 110 and c.green() < 140)
    assert reds > 50 and blues > 5  # the diverging heatmap is drawn
    greys = sum(1 for c in pixels if c.red() == c.green() == c.blue() and 60 < c.red() < 235)
    assert greys > 300  # thumbnails and the inspected image
    from workbench.core.project.folder import Project

    project = Project.open(demo_dir)
    assert project.find_artifact("importance", layer=LAYER) is not None
    assert project.find_artifact("ablation", layer=LAYER) is not None
