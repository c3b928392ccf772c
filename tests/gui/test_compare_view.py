"""The Compare view on the demo project: three sets compared with the mouse, the table and plots equal to the
core comparison's figures, what each set adds with the inputs only it reaches, the differences, the report
exported, set algebra saved as a test set, and a set sent from the project panel."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from workbench.core.comparison.compare import compare_testsets
from workbench.core.comparison.report import figure_text
from workbench.core.execution.jobs import JobContext
from workbench.core.testsets import resolve, save_testset

pytestmark = pytest.mark.gui

TIMEOUT_MS = 180_000


def make_generated_set(window) -> None:
    data = window.session.datasets["fashion-mnist"].split("test")
    rng = np.random.default_rng(1)
    x = np.clip(data.numpy(np.arange(30)) + rng.normal(0, 0.2, (30, 1, 28, 28)).astype(np.float32), 0, 1)
    arrays = {"x": x, "y": data.labels[:30].astype(np.int64), "generator": np.array(["vae-a", "gan-b"] * 15),
              "kind": np.array(["vae", "gan"] * 15), "extent": np.array(["high"] * 30),
              "predicted": data.labels[:30].astype(np.int64), "proxy_selforacle_invalid": np.arange(30) % 3 == 0,
              "proxy_daiv_invalid": np.zeros(30, bool)}
    save_testset(window.session.project, "generated-x", arrays, role="generated", dataset="fashion-mnist")
    window.session.project_changed.emit()


def test_three_sets_compared_as_the_core_compares_them(qtbot, settled_window, tmp_path):
    window = settled_window
    make_generated_set(window)
    qtbot.keyClick(window, Qt.Key.Key_0, Qt.KeyboardModifier.ControlModifier)
    view = window.views["compare"]
    assert window.tabs.currentWidget() is view
    # The defaults: the test split, the newest generated set, the split's misclassified inputs; compared at once.
    assert view.chosen == ["fashion-mnist:test", "generated-x", "fashion-mnist:test[misclassified]"]
    qtbot.waitUntil(lambda: view.comparison is not None, timeout=TIMEOUT_MS)
    view.resamples_box.setValue(200)
    qtbot.mouseClick(view.compare_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.comparison is not None and view.comparison.settings["resamples"] == 200,
                    timeout=TIMEOUT_MS)
    c = view.comparison
    assert all(s.profile_reused for s in c.sets)  # the profiles of the first comparison were stored
    # The same comparison run here gives the same figures: the view adds nothing of its own.
    data = window.session.datasets["fashion-mnist"]
    again = compare_testsets(JobContext("cpu"), window.session.project, view.chosen,
                             window.session.models["lenet5-fashion"].model, data, None, 6, resamples=200)
    assert again.to_dict()["sets"] == c.to_dict()["sets"]
    headers = [view.table.horizontalHeaderItem(i).text() for i in range(view.table.columnCount())]
    assert headers == c.names()
    rows = [view.table.verticalHeaderItem(r).text() for r in range(view.table.rowCount())]
    r = rows.index("IDC coverage")
    for k, s in enumerate(c.to_dict()["sets"]):
        assert view.table.item(r, k).text() == figure_text("idc", s["figures"]["idc"]).replace(" [", "\n[", 1)
    assert "validity judged by" in rows and view.table.item(rows.index("validity judged by"), 1).text() == "proxy"
    # Plots, what each set adds, differences.
    view.tabs.setCurrentIndex(1)
    assert len(view.coverage_plot.getPlotItem().items) >= 6  # bars and error bars of three sets
    view.tabs.setCurrentIndex(2)
    view.adds_set.setCurrentText("fashion-mnist:test")
    view.adds_criterion.setCurrentText("nc")
    summary = c.sets[0]
    assert view.unique_grid.thumbnails.rowCount() == len(summary.unique_inputs["nc"])
    assert "only one set covers" in view.only_label.text()
    view.tabs.setCurrentIndex(3)
    assert view.differences.rowCount() == len(c.differences)
    # The report, and set algebra.
    path = tmp_path / "comparison.html"
    view.export_to(str(path), "html")
    qtbot.waitUntil(path.exists, timeout=TIMEOUT_MS)
    assert path.read_text().count("data:image/png;base64,") == 4
    view.operation_box.setCurrentIndex(view.operation_box.findData("difference"))
    view.algebra_name.setText("test-without-misclassified")
    qtbot.mouseClick(view.algebra_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Saved" in view.status.text(), timeout=TIMEOUT_MS)
    saved = resolve(type(window.session.project).open(window.session.project.folder), "test-without-misclassified")
    assert len(saved) == c.sets[0].size - c.sets[2].size
    # What the generated set adds, in the Coverage view's matrices: generated-x against the test split.
    view.tabs.setCurrentIndex(2)
    view.adds_set.setCurrentText("generated-x")
    view.against_box.setCurrentText("fashion-mnist:test")
    qtbot.mouseClick(view.against_button, Qt.MouseButton.LeftButton)
    coverage = window.views["coverage"]
    assert window.tabs.currentWidget() is coverage
    qtbot.waitUntil(lambda: coverage.a_box.currentData() == "stored:generated-x"
                    and coverage.difference.isChecked(), timeout=TIMEOUT_MS)
    assert coverage.b_box.currentData() == "fashion-mnist:test"
    # A set the Coverage view does not list is said so, in the Compare view.
    window.show_against("fashion-mnist:test[first=7]", "generated-x")
    assert window.tabs.currentWidget() is view and "not one of them" in view.status.text()


def test_a_set_sent_from_the_project_panel_joins_the_comparison(qtbot, settled_window):
    window = settled_window
    make_generated_set(window)
    view = window.views["compare"]
    view.chosen = ["fashion-mnist:test[first=200]"]
    panel = window.project_panel
    item = next(i for i in panel.items("testset") if i.payload["name"] == "generated-x")
    panel.menu_action(item, "Compare…").trigger()
    assert window.tabs.currentWidget() is view
    qtbot.waitUntil(lambda: view.comparison is not None, timeout=TIMEOUT_MS)
    assert view.comparison.names() == ["fashion-mnist:test[first=200]", "generated-x"]
    ticked = [view.set_list.item(i).text() for i in range(view.set_list.count())
              if view.set_list.item(i).checkState() == Qt.CheckState.Checked]
    assert any(t.startswith("generated-x") for t in ticked)
