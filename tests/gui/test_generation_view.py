"""The Generation view on the demo project with the bundled Fashion-MNIST generators: a run driven with the
mouse whose gallery and summary equal the core job's own, the set saved as a test set and measured in the
Coverage view, the records exported, and Stop keeping what was found (marked partial)."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from PySide6.QtCore import Qt

from workbench.core.execution.jobs import JobContext
from workbench.core.generation.generated import generate_from_folders
from workbench.core.testsets import resolve

pytestmark = pytest.mark.gui

TIMEOUT_MS = 120_000


def check_only(view, kinds: tuple) -> list[str]:
    names = []
    for i in range(view.generator_list.count()):
        item = view.generator_list.item(i)
        keep = any(f"({kind})" in item.text() for kind in kinds)
        item.setCheckState(Qt.CheckState.Checked if keep else Qt.CheckState.Unchecked)
        if keep:
            names.append(item.data(Qt.ItemDataRole.UserRole + 1))
    return names


def test_a_run_fills_the_gallery_and_table_as_the_core_job_does(qtbot, settled_window, tmp_path, monkeypatch):
    window = settled_window
    qtbot.keyClick(window, Qt.Key.Key_8, Qt.KeyboardModifier.ControlModifier)
    view = window.views["generation"]
    assert window.tabs.currentWidget() is view
    listed = [view.generator_list.item(i).text() for i in range(view.generator_list.count())]
    assert any("(vae)" in t for t in listed) and any("(gan)" in t for t in listed) and any("(diffusion)" in t
                                                                                          for t in listed)
    checked = [view.generator_list.item(i).text() for i in range(view.generator_list.count())
               if view.generator_list.item(i).checkState() == Qt.CheckState.Checked]
    assert checked and all("(diffusion)" not in t for t in checked)  # the slow one is left to the user
    names = check_only(view, ("vae", "gan"))
    view.seeds_box.setValue(3)
    view.budget_box.setValue(6)
    view.proxies_box.setChecked(False)
    view.name_edit.setText("generated-gui")
    seeds_seen = []
    qtbot.mouseClick(view.run_button, Qt.MouseButton.LeftButton)
    assert view.run_button.text() == "Stop"
    qtbot.waitUntil(lambda: view.result is not None, timeout=TIMEOUT_MS)
    seeds_seen = list(view.live)
    result = view.result
    assert view.run_button.text() == "Generate" and "Finished" in view.status.text()
    # The same job run here gives the same inputs: the view adds nothing of its own.
    data = window.session.datasets["fashion-mnist"]
    folders = view.chosen_generators()
    assert [n for n, _ in folders] == names
    again = generate_from_folders(JobContext("cpu"), folders, window.session.models["lenet5-fashion"].model, data, 3,
                                  "high", 6, 0, proxies=False)
    np.testing.assert_array_equal(again.arrays["x"], result.arrays["x"])
    np.testing.assert_array_equal(again.arrays["found"], result.arrays["found"])
    assert len(seeds_seen) == len(result.arrays["y"])  # every searched seed came in live, as it ended
    assert len(view.gallery.pairs) == len(result.arrays["y"])
    assert view.table.rowCount() == len(names)
    rows = result.summary()
    for r, row in enumerate(rows):
        assert view.table.item(r, 0).text() == row["generator"]
        assert view.table.item(r, 3).text() == f"{row['found']} of {row['searched']}"
    # Misbehaviours only.
    view.found_only_box.setChecked(True)
    assert len(view.gallery.pairs) == int(np.sum(result.arrays["found"]))
    view.found_only_box.setChecked(False)
    # Saved as a test set of the project, read back like any other.
    testset = resolve(window.session.project, "generated-gui", data)
    assert len(testset) == len(result.arrays["y"]) and "found" in testset.columns
    # The records and images, exported into a folder named after the set.
    monkeypatch.setattr("workbench.gui.views.generation_view.QFileDialog.getExistingDirectory",
                        lambda *a, **k: str(tmp_path))
    qtbot.mouseClick(view.export_csv_button, Qt.MouseButton.LeftButton)
    with open(tmp_path / "generated-gui" / "records.csv") as f:
        records = list(csv.DictReader(f))
    assert len(records) == len(testset) and {"Filename", "Iteration", "Expected_label(X)"} <= set(records[0])
    assert all((tmp_path / "generated-gui" / r["Filename"]).is_file() for r in records)
    # Measure in Coverage: the Coverage view opens with the set among its sets.
    qtbot.mouseClick(view.coverage_button, Qt.MouseButton.LeftButton)
    coverage = window.views["coverage"]
    assert window.tabs.currentWidget() is coverage
    qtbot.waitUntil(lambda: "stored:generated-gui" in (coverage.set_keys or []), timeout=TIMEOUT_MS)
    qtbot.waitUntil(window.runner.is_idle, timeout=TIMEOUT_MS)


def test_stop_keeps_what_was_found_marked_partial(qtbot, settled_window):
    window = settled_window
    window.show_view("generation")
    view = window.views["generation"]
    check_only(view, ("gan",))
    view.seeds_box.setValue(4)
    view.budget_box.setValue(100_000)  # it would run for hours: only Stop ends it
    view.extent_box.setCurrentIndex(view.extent_box.findData("low"))  # steps too small to misbehave soon
    view.proxies_box.setChecked(False)
    view.name_edit.setText("generated-stopped")
    qtbot.mouseClick(view.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "generation 3" in view.status.text(), timeout=TIMEOUT_MS)
    qtbot.mouseClick(view.run_button, Qt.MouseButton.LeftButton)  # Stop
    # until the stopped search has saved what it found, the button cannot start another
    assert not view.run_button.isEnabled() and view.run_button.text() == "Stopping…"
    qtbot.waitUntil(lambda: view.result is not None, timeout=TIMEOUT_MS)
    assert view.run_button.isEnabled() and view.run_button.text() == "Generate"
    result = view.result
    assert result.partial and result.saved and "Stopped: partial results" in view.status.text()
    assert not np.all(result.arrays["finished"])  # the seeds still searching end with their best so far
    stored = window.session.project.load_artifact("generated-stopped", kind="testset")
    assert stored.provenance["partial"] is True
    qtbot.waitUntil(window.runner.is_idle, timeout=TIMEOUT_MS)
    # Opened again (a new session), the view shows the set saved last, read from the project.
    shown = len(view.gallery.pairs)
    view.result = None
    view.gallery.clear()
    view.table.setRowCount(0)
    view.show_latest()
    qtbot.waitUntil(lambda: view.result is not None, timeout=TIMEOUT_MS)
    assert view.result.name == "generated-stopped" and view.result.partial and len(view.gallery.pairs) == shown
    assert view.table.rowCount() == 1 and "saved last" in view.status.text()
