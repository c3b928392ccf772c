"""The Coverage view on the demo project (the Fashion-MNIST slice and the bundled LeNet-5): the summary
table, growth curves, the IDC and KMNC matrices with their cells' inputs, the difference of two test
sets, linked neuron selection, bad input (m too large, a matrix too large to draw, a test set that
does not fit), export and the screenshot."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage

from workbench.gui.plotting.colors import BOTH_SETS, UNCOVERED

pytestmark = pytest.mark.gui

MODEL, DATASET, LAYER = "lenet5-fashion", "fashion-mnist", "fc2"
TEST, TRAIN = f"{DATASET}:test", f"{DATASET}:train"


def idle(window) -> bool:
    return window.session.is_ready and window.runner.is_idle()


def measured(window) -> bool:
    view = window.views["coverage"]
    runs = [view.runs.runs.get(k) for k in view.set_keys or []]
    return idle(window) and bool(runs) and all(r is not None and r.state in ("done", "failed") for r in runs)


def result(window, key: str, criterion: str):
    return window.views["coverage"].runs.runs[key].result(criterion)


def click(qtbot, graphics_view, scene_pos) -> None:
    qtbot.mouseClick(graphics_view.viewport(), Qt.MouseButton.LeftButton, pos=graphics_view.mapFromScene(scene_pos))


def mask_color(matrix, row: int, col: int) -> tuple[int, int, int, int]:
    return tuple(int(v) for v in matrix.mask_image.image[row, col])


def rgba(color: QColor) -> tuple[int, int, int, int]:
    return color.red(), color.green(), color.blue(), 255


def fc2_values(window, split: str) -> np.ndarray:
    """fc2's neuron values for a whole split, captured independently of the view."""
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.activations import NeuronDefinition, collect_activations

    model = window.session.models[MODEL].model
    data = window.session.datasets[DATASET]
    return collect_activations(JobContext("cpu"), model.module, data.split(split), NeuronDefinition(LAYER, "post"),
                               data.image_shape).astype(np.float64)


@pytest.fixture
def coverage_window(qtbot, settled_window):
    """The demo window showing the Coverage view with the test and training splits measured."""
    window = settled_window
    qtbot.keyClick(window, Qt.Key.Key_5, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.currentWidget() is window.views["coverage"]
    qtbot.waitUntil(lambda: measured(window), timeout=90000)
    return window


def test_summary_table_and_growth_curves_fill_in_for_every_set(qtbot, coverage_window):
    window = coverage_window
    view = window.views["coverage"]
    assert view.set_keys == [TEST, TRAIN] and window.selection.layer == LAYER
    assert view.table.criteria == ["idc", "nc", "kmnc", "nbc", "snac", "tknc"]
    assert view.table.set_keys == [TEST, TRAIN]
    for key in (TEST, TRAIN):
        for name in view.table.criteria:
            value = result(window, key, name).value
            text = view.table.text(name, key)
            assert text.startswith(f"{100 * value.fraction:.1f} % — {value.covered:,} / {value.total:,}"), text
    assert result(window, TRAIN, "snac").value.covered == 0  # the ranges come from the training data itself
    assert "⚠" in view.table.text("kmnc", TEST)  # constant neurons can never be covered: said, not hidden
    tip = view.table.item(view.table.criteria.index("kmnc"), 1).toolTip()
    assert "can never be covered" in tip
    # One curve per set, a point every 100 inputs, ending at the table's value.
    view.table.choose("idc")
    curves = {c.title: c for c in view.growth.curves}
    assert set(curves) == {"test", "train"}
    assert len(curves["test"].inputs) == 10 and len(curves["train"].inputs) == 20
    assert curves["test"].inputs[-1] == 1000 and curves["train"].inputs[-1] == 2000
    assert curves["test"].percent[-1] == pytest.approx(100 * result(window, TEST, "idc").value.fraction)
    assert np.all(np.diff(curves["test"].percent) >= 0)  # coverage never falls
    view.table.choose("kmnc")
    assert view.growth_title.text() == "Growth of KMNC with the number of inputs"
    assert view.growth.curves[0].percent[-1] == pytest.approx(100 * result(window, TEST, "kmnc").value.fraction)
    # The results are stored in the project, and a second window reads them back instead of measuring.
    project = window.session.project
    assert project.find_artifact("coverage", criterion="idc") is not None
    assert project.find_artifact("coverage-fit", criterion="kmnc") is not None


def test_the_table_fills_in_while_a_set_is_measured(qtbot, coverage_window):
    window = coverage_window
    view = window.views["coverage"]
    seen = []
    view.runs.changed.connect(lambda key: view.runs.runs[key].state == "running" and
                              seen.append((key, view.table.text("nc", key), len(view.growth.curves))))
    view.runs.again()  # fit and measure afresh: the values arrive batch by batch
    qtbot.waitUntil(lambda: measured(window), timeout=90000)
    running = [text for key, text, _ in seen if key == TRAIN and "so far" in text]
    assert running, seen  # partial values were shown while measuring
    assert not result(window, TRAIN, "nc").reused


def test_idc_matrix_has_the_layout_of_the_clusters_and_distinct_uncovered_cells(qtbot, coverage_window):
    window = coverage_window
    view = window.views["coverage"]
    idc = result(window, TEST, "idc").criterion
    k = idc.cluster_counts
    assert len(idc.neurons) == 6
    expected = (int(np.prod(k[:3])), int(np.prod(k[3:])))
    matrix = view.idc.matrix
    assert matrix.counts.shape == expected
    np.testing.assert_array_equal(matrix.counts, idc.layout().counts)
    assert matrix.counts.sum() == 1000  # every test input falls in exactly one combination
    uncovered = np.argwhere(matrix.counts == 0)
    covered = np.argwhere(matrix.counts > 0)
    assert len(uncovered) and len(covered)
    assert all(mask_color(matrix, r, c) == rgba(UNCOVERED) for r, c in uncovered)
    assert all(mask_color(matrix, r, c)[3] == 0 for r, c in covered)  # the colour map shows through
    assert matrix.count_image.image.dtype == np.float32 and matrix.count_image.image.flags["C_CONTIGUOUS"]
    assert f"({len(uncovered)} of {matrix.counts.size} cells)" in view.idc.legend.texts()[0]
    assert "log" in matrix.bar.axis.labelText
    # The headers: rows by the first three neurons, columns by the last three, with their centroids.
    assert matrix.left.axis.neurons == [int(n) for n in idc.neurons[:3]]
    assert matrix.top.axis.neurons == [int(n) for n in idc.neurons[3:]]
    np.testing.assert_allclose(matrix.top.axis.centroids[0], idc.centroids[3])
    assert f"{idc.centroids[3][0]:.3g}" in matrix.top.label_texts()
    # Hovering reads a cell out.
    r, c = uncovered[0]
    matrix.show_cell(int(r), int(c))
    assert "uncovered" in matrix.readout_text and f"n{idc.neurons[0]}" in matrix.readout_text


def test_clicking_a_cell_lists_exactly_its_inputs_with_labels(qtbot, coverage_window):
    window = coverage_window
    view, session = window.views["coverage"], window.session
    idc = result(window, TEST, "idc").criterion
    matrix = view.idc.matrix
    # The busiest combination is chosen to begin with.
    busiest = np.unravel_index(int(np.argmax(matrix.counts)), matrix.counts.shape)
    assert view.cell == ("idc", int(busiest[0]), int(busiest[1]))
    counts = matrix.counts.copy()
    counts[busiest] = 0
    r, c = (int(v) for v in np.argwhere(counts > 0)[-1])
    click(qtbot, matrix, matrix.cell_center(r, c))
    assert view.cell == ("idc", r, c) and matrix.selected == (r, c)
    code = view.idc.layout_a.code(r, c)
    expected = idc.inputs_in(code)
    assert len(expected) == matrix.counts[r, c]
    np.testing.assert_array_equal(view.cell_inputs.shown_indices(), np.sort(expected))
    thumbnails = view.cell_inputs.grid.thumbnails
    labels = session.datasets[DATASET].splits["test"].labels
    predictions = session.evaluation(MODEL, DATASET, "test")["predictions"]
    assert [thumbnails.label_at(i) for i in range(thumbnails.rowCount())] == labels[np.sort(expected)].tolist()
    assert [thumbnails.prediction_at(i) for i in range(thumbnails.rowCount())] == \
        predictions[np.sort(expected)].tolist()
    assert f"Row {r + 1}, column {c + 1}: {len(expected):,} input" in view.cell_inputs.title.text()
    # The current thumbnail is the linked selection's input; Enter inspects it in the Importance view.
    assert window.selection.input == ("test", int(np.sort(expected)[0]))
    grid = view.cell_inputs.grid
    if len(expected) > 1:
        grid.setFocus()
        qtbot.keyClick(grid, Qt.Key.Key_Right)
        assert window.selection.input == ("test", int(np.sort(expected)[1]))
    view.cell_inputs.inspect_button.click()
    assert window.current_view() == "importance"
    qtbot.waitUntil(lambda: window.views["importance"].inspector.explanation is not None and idle(window),
                    timeout=60000)
    assert window.views["importance"].inspector.explanation.index == window.selection.input[1]


def test_difference_of_two_sets_classifies_cells_as_a_direct_computation_does(qtbot, coverage_window):
    window = coverage_window
    view = window.views["coverage"]
    idc = result(window, TEST, "idc").criterion
    # The combination each input reaches, computed straight from fc2's activations.
    reached = {split: set(idc.profile({LAYER: fc2_values(window, split)}).tolist()) for split in ("test", "train")}
    view.difference.setChecked(True)
    matrix = view.idc.matrix
    assert matrix.mode == "difference" and not matrix.bar.isVisible()
    color_test, color_train = view.color_of(TEST), view.color_of(TRAIN)
    tally = {"only_a": 0, "only_b": 0, "both": 0, "neither": 0}
    rows, cols = matrix.counts.shape
    for r in range(rows):
        for c in range(cols):
            code = view.idc.layout_a.code(r, c)
            in_test, in_train = code in reached["test"], code in reached["train"]
            expected = (rgba(BOTH_SETS) if in_test and in_train else rgba(color_test) if in_test
                        else rgba(color_train) if in_train else rgba(UNCOVERED))
            assert mask_color(matrix, r, c) == expected, (r, c)
            tally["both" if in_test and in_train else "only_a" if in_test else "only_b" if in_train
                  else "neither"] += 1
    legend = view.idc.legend.texts()
    assert legend == [f"only test ({tally['only_a']})", f"only train ({tally['only_b']})",
                      f"both ({tally['both']})", f"neither ({tally['neither']})"]
    # A cell's inputs can be listed for either set.
    r, c = view.cell[1], view.cell[2]
    assert view.cell_inputs.set_box.count() == 2
    train_positions = result(window, TRAIN, "idc").criterion.inputs_in(view.idc.layout_a.code(r, c))
    view.cell_inputs.set_box.setCurrentIndex(1)
    view.cell_inputs.set_box.activated.emit(1)
    np.testing.assert_array_equal(view.cell_inputs.shown_indices(), np.sort(train_positions))
    # Compared with the misclassified test inputs instead: the set is measured, then drawn.
    wrong = f"{DATASET}:test:misclassified"
    view.choose_sets([TEST, wrong])
    qtbot.waitUntil(lambda: measured(window), timeout=90000)
    view.b_box.setCurrentIndex(1)
    view.b_box.activated.emit(1)
    run = view.runs.runs[wrong]
    predictions = window.session.evaluation(MODEL, DATASET, "test")["predictions"]
    labels = window.session.datasets[DATASET].splits["test"].labels
    np.testing.assert_array_equal(run.test_indices, np.flatnonzero(predictions != labels))
    assert matrix.mode == "difference" and view.idc.b.key == wrong
    assert "only test" in view.idc.legend.texts()[0] and "only test ✗ wrong (0)" == view.idc.legend.texts()[1]


def test_kmnc_matrix_cell_lists_the_inputs_in_that_section(qtbot, coverage_window):
    window = coverage_window
    view = window.views["coverage"]
    view.matrix_tabs.setCurrentWidget(view.kmnc)
    kmnc = result(window, TEST, "kmnc").criterion
    panel, matrix = view.kmnc, view.kmnc.matrix
    assert panel.layer_box.currentData() == LAYER  # the IDC layer's neurons first
    offset = panel.offset
    layers = list(kmnc.layer_sizes)
    assert matrix.counts.shape == (84, 1000)
    assert offset == sum(kmnc.layer_sizes[name] for name in layers[:layers.index(LAYER)])
    np.testing.assert_array_equal(matrix.counts, kmnc.matrix()[offset:offset + 84])
    never = [int(n) - offset for n in kmnc.never_coverable if offset <= n < offset + 84]
    assert never and matrix.unavailable_rows == never
    assert any("never coverable" in text for text in panel.legend.texts())
    neuron = next(n for n in range(84) if n not in never)
    section = int(np.argmax(matrix.counts[neuron]))
    click(qtbot, matrix, matrix.cell_center(neuron, section))
    assert view.cell == ("kmnc", neuron, section)
    assert window.selection.neuron == neuron  # the row is a neuron of the selected layer
    qtbot.waitUntil(lambda: view.cell_inputs.shown is not None and idle(window), timeout=60000)
    values = fc2_values(window, "test")[:, neuron]
    low, high = kmnc.low[offset + neuron], kmnc.high[offset + neuron]
    index = np.minimum(np.floor((values - low) / (high - low) * kmnc.k), kmnc.k - 1)
    expected = np.flatnonzero((values >= low) & (values <= high) & (index == section))
    assert len(expected) == matrix.counts[neuron, section]
    np.testing.assert_array_equal(view.cell_inputs.shown_indices(), expected)
    assert f"{LAYER}[{neuron}], section {section + 1:,}" in view.cell_inputs.title.text()
    matrix.show_cell(never[0], 0)
    assert "never be covered" in matrix.readout_text


def test_linked_neuron_selection_with_the_importance_view(qtbot, coverage_window):
    window = coverage_window
    view = window.views["coverage"]
    idc = result(window, TEST, "idc").criterion
    matrix = view.idc.matrix
    top_neuron, left_neuron = int(idc.neurons[4]), int(idc.neurons[1])
    # Clicking a strip on the matrix's axis selects that neuron everywhere.
    click(qtbot, matrix, matrix.neuron_position(top_neuron))
    assert window.selection.neuron == top_neuron
    assert matrix.top.outline.isVisible() and not matrix.left.outline.isVisible()
    assert window.views["importance"].heatmap.selected == top_neuron
    # Selecting a neuron in the Importance view outlines it on the other axis here.
    window.show_view("importance")
    importance = window.views["importance"]
    qtbot.waitUntil(lambda: importance.result is not None and idle(window), timeout=60000)
    heatmap = importance.heatmap
    click(qtbot, heatmap, heatmap.cell_center(0, left_neuron))
    assert window.selection.neuron == left_neuron
    window.show_view("coverage")
    assert matrix.selected_neuron == left_neuron
    assert matrix.left.outline.isVisible() and not matrix.top.outline.isVisible()
    assert matrix.left.outline.rect().left() == 1  # the second row strip
    # A neuron outside the top m is simply not outlined.
    other = next(n for n in range(84) if n not in idc.neurons)
    window.selection.set_neuron(other)
    assert not matrix.left.outline.isVisible() and not matrix.top.outline.isVisible()


def test_m_larger_than_the_layer_is_a_message_with_a_smaller_m(qtbot, coverage_window, error_dialogs):
    window = coverage_window
    view = window.views["coverage"]
    window.selection.set_layer("conv2")  # 16 channels
    view.m_box.setValue(20)
    view.m_timer.timeout.emit()
    qtbot.waitUntil(lambda: measured(window) and view.runs.current.m == 20, timeout=90000)
    panel = view.idc
    assert not panel.showing()
    assert "larger than the 16 neurons" in panel.stack.empty.text.text()
    assert panel.stack.empty.button_texts()[0] == "Use m = 6"
    assert view.table.text("idc", TEST) == "failed"
    assert view.table.text("nc", TEST).endswith("/ 258")  # the other criteria are measured all the same
    assert error_dialogs == []
    panel.stack.empty.click("Use m = 6")
    view.m_timer.timeout.emit()
    qtbot.waitUntil(lambda: measured(window) and view.runs.current.m == 6 and panel.showing(), timeout=90000)
    assert len(result(window, TEST, "idc").criterion.neurons) == 6


def test_a_matrix_too_large_to_draw_offers_the_largest_m_that_fits(qtbot, coverage_window, error_dialogs):
    window = coverage_window
    view = window.views["coverage"]
    view.m_box.setValue(20)
    view.m_timer.timeout.emit()
    qtbot.waitUntil(lambda: measured(window) and view.runs.current.m == 20, timeout=90000)
    idc = result(window, TEST, "idc").criterion
    assert idc.incc_size > 1 << 16
    panel = view.idc
    assert not panel.showing() and "too large to draw" in panel.stack.empty.title.text()
    k = idc.cluster_counts
    fits = max(m for m in range(1, 21) if np.prod(k[:m]) <= 1 << 16)
    assert panel.stack.empty.button_texts() == [f"Show m = {fits}"]
    assert view.table.text("idc", TEST).endswith(f"/ {idc.incc_size:,}")  # coverage is still reported
    panel.stack.empty.click(f"Show m = {fits}")
    view.m_timer.timeout.emit()
    qtbot.waitUntil(lambda: measured(window) and view.runs.current.m == fits and panel.showing(), timeout=90000)
    assert panel.matrix.counts.size == np.prod(k[:fits]) and error_dialogs == []


def test_a_test_set_that_does_not_fit_the_model_is_said_and_nothing_is_damaged(qtbot, coverage_window, error_dialogs):
    window = coverage_window
    view, session = window.views["coverage"], window.session
    before = dict(session.project.artifacts())
    with qtbot.waitSignal(session.dataset_added, timeout=30000):
        session.add_dataset("digits")  # 8×8 images: not for a 28×28 model
    window.show_view("coverage")
    window.selection.set_dataset(DATASET)
    view.choose_sets([TEST, "digits:test"])
    qtbot.waitUntil(lambda: measured(window), timeout=90000)
    run = view.runs.runs["digits:test"]
    assert run.state == "failed" and "shape" in run.error.message  # a set that measured nothing failed
    assert view.table.text("nc", "digits:test") == "failed"
    assert "shape" in view.table.item(view.table.criteria.index("nc"), 2).toolTip()
    assert view.table.text("nc", TEST).endswith("/ 258")
    assert error_dialogs == []
    # Showing that set's matrix says why there is none.
    view.a_box.setCurrentIndex(1)
    view.a_box.activated.emit(1)
    assert not view.idc.showing() and "shape" in view.idc.stack.empty.text.text()
    after = session.project.artifacts()
    assert all(after.get(name) == entry for name, entry in before.items())  # nothing saved was touched


def test_surprise_coverage_is_optional_and_a_singular_density_is_reported(qtbot, coverage_window, error_dialogs):
    window = coverage_window
    view = window.views["coverage"]
    assert "lsa" not in view.table.criteria  # slower: chosen, not measured by default
    view.choose_criteria(view.criteria + ["lsa"])
    qtbot.waitUntil(lambda: measured(window) and "lsa" in view.runs.current.criteria, timeout=90000)
    assert view.table.criteria[-1] == "lsa" and view.table.item(len(view.table.criteria) - 1, 0).text() == "LSC"
    lsa = result(window, TEST, "lsa")
    assert view.table.text("lsa", TEST).startswith(f"{100 * lsa.value.fraction:.1f} % — {lsa.value.covered:,} / 1,000")
    singular = [w for w in lsa.warnings if "singular density" in w]
    assert singular  # one class of the slice has too few distinct traces: said, never a silent 0
    assert view.table.text("lsa", TEST).endswith("⚠")
    assert singular[0] in view.table.item(len(view.table.criteria) - 1, 1).toolTip()
    assert view.table.text("idc", TEST).endswith("/ 64") and error_dialogs == []


def test_export_writes_png_and_csv(qtbot, coverage_window, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    view = coverage_window.views["coverage"]
    for name, write, widget in (("idc", view.export_idc_png, view.idc.matrix),
                                ("growth", view.export_growth_png, view.growth)):
        image = QImage(str(write(tmp_path / f"{name}.png")))
        assert image.width() >= 2 * widget.width() - 2
    target = tmp_path / "out.csv"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), "CSV table (*.csv)"))
    view._update_export_actions()
    view.export_actions["summary_csv"].trigger()
    rows = list(csv.reader(target.open()))
    assert rows[0][:6] == ["criterion", "test_set", "test_set_key", "coverage_fraction", "covered", "total"]
    assert len(rows) == 1 + 6 * 2
    idc_row = next(r for r in rows if r[0] == "idc" and r[1] == "test")
    assert int(idc_row[4]) == result(coverage_window, TEST, "idc").value.covered
    view.export_actions["idc_csv"].trigger()
    rows = list(csv.reader(target.open()))
    assert len(rows) == 1 + view.idc.matrix.counts.size and rows[0][-1] == "inputs_test"
    assert sum(int(r[-1]) for r in rows[1:]) == 1000
    view.export_actions["growth_csv"].trigger()
    assert len(list(csv.reader(target.open()))) == 1 + 6 * (10 + 20)
    view.export_actions["cell_csv"].trigger()
    rows = list(csv.reader(target.open()))
    assert len(rows) == 1 + len(view.cell_inputs.shown_indices()) and rows[1][0] == "test"
    view.matrix_tabs.setCurrentWidget(view.kmnc)
    view._update_export_actions()
    view.export_actions["kmnc_csv"].trigger()
    rows = list(csv.reader(target.open()))
    assert rows[0][:4] == ["neuron", "section", "low", "high"]
    assert sum(int(r[4]) > 0 for r in rows[1:]) == result(coverage_window, TEST, "kmnc").value.covered
    assert QImage(str(view.export_kmnc_png(tmp_path / "kmnc.png"))).width() >= 2 * view.kmnc.matrix.width() - 2


def test_run_gui_screenshot_of_the_coverage_view(qtbot, demo_dir, tmp_path, error_dialogs):
    from workbench.core.project.folder import Project
    from workbench.gui.shell.app import run_gui

    path = tmp_path / "coverage.png"
    assert run_gui(view="coverage", screenshot=str(path)) == 0
    image = QImage(str(path))
    assert (image.width(), image.height()) == (1440, 900)
    pixels = [QColor(image.pixel(x, y)) for x in range(0, 1440, 3) for y in range(0, 900, 3)]
    uncovered = sum(1 for c in pixels if (c.red(), c.green(), c.blue()) == (0xcf, 0xcf, 0xcf))
    purple = sum(1 for c in pixels if c.blue() > 80 and c.red() < 90 and c.green() < 60)  # viridis' low end
    assert uncovered > 30 and purple > 10  # covered and uncovered cells are both drawn
    greys = sum(1 for c in pixels if c.red() == c.green() == c.blue() and 40 < c.red() < 200)
    assert greys > 300  # the chosen cell's thumbnails
    project = Project.open(demo_dir)
    assert project.find_artifact("coverage", criterion="idc") is not None
