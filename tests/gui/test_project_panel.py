"""The project panel on a project holding several kinds of results: rows grouped by kind under
readable labels, the context menu's Open, Export and Delete, status-bar confirmations of exports,
own test sets listed by name, and a panel width that survives wide views and a restart."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gui_helpers import flush_events
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QFileDialog, QMessageBox

pytestmark = pytest.mark.gui

MODEL, DATASET = "lenet5-fashion", "fashion-mnist"
FIT = "coverage-fit-lenet5-fashion-idc-0123abcd"
COVERAGE = "coverage-lenet5-fashion-idc-4567cdef"
KMNC = "coverage-lenet5-fashion-kmnc-89ab0123"
IMPORTANCE = "importance-lenet5-fashion-fc1-lrp-0-cafe0001"
RUN = "converge-lenet5-fashion"
PICKS = "my picks"
TIME = r"\d\d:\d\d"  # made a moment ago: today, so the time alone
LAYERS = ["conv1", "pool1", "conv2", "pool2", "fc1", "fc2", "fc3"]


def make_project(folder, tmp_path):
    """A project with the demo's dataset and model, an own dataset from a file, and results of five
    kinds written as the jobs write them (index entries with their provenance, small arrays)."""
    from workbench.core.project.folder import Project
    from workbench.core.testsets import save_testset

    project = Project.create(folder, DATASET, [MODEL])
    own = tmp_path / "uploads" / "tmp-4f2a9" / "mine.npz"
    own.parent.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.savez(own, x=rng.random((40, 28, 28), dtype=np.float32), y=np.arange(40) % 10)
    project.add_dataset(str(own))
    train = {"dataset": DATASET, "split": "train", "images": 2000}
    test = {"dataset": DATASET, "split": "test", "images": 1000}
    idc = {"criterion": "idc", "params": {"layer": "fc1", "m": 4}}
    project.save_artifact("coverage-fit", FIT, {"fit.centroids": np.zeros((4, 2))}, model=MODEL, dataset=DATASET,
                          criterion="idc", train=train, state={"identity": idc})
    project.save_artifact("coverage", COVERAGE, {"cover.counts": np.zeros(16)}, model=MODEL, dataset=DATASET,
                          criterion="idc", identity=idc, train=train, test=test, fit_artifact=FIT)
    project.save_artifact("coverage", KMNC, {"cover.counts": np.zeros(258)}, model=MODEL, dataset=DATASET,
                          criterion="kmnc", identity={"criterion": "kmnc", "params": {"k": 1000, "layers": LAYERS}},
                          train=train, test={"dataset": DATASET, "split": PICKS, "images": 12}, fit_artifact=None)
    project.save_artifact("importance", IMPORTANCE, {"totals": np.zeros(120)}, model=MODEL, dataset=DATASET,
                          split="train", layer="fc1", rule={"dense": {"name": "lrp-0"}, "conv": {"name": "lrp-0"}})
    project.save_artifact("robustness", RUN, {"round": np.arange(3.0)}, what="convergence", model=MODEL,
                          dataset=DATASET, rows=[{"round": 0}, {"round": 1}, {"round": 2}], params={})
    save_testset(project, PICKS, {"x": rng.random((12, 1, 28, 28), dtype=np.float32), "y": np.arange(12) % 10},
                 role="selection", selected_from="fp_test", dataset=DATASET, model=MODEL)
    return Project.open(folder), own


@pytest.fixture
def panel_window(open_window, settle, tmp_path):
    project, own = make_project(tmp_path / "project", tmp_path)
    window = open_window(project)
    settle(window)
    window.own_dataset = own
    return window


def titles(panel, heading: str) -> list[str]:
    group = panel.groups[heading]
    return [group.child(i).text(0) for i in range(group.childCount())]


def test_results_are_grouped_by_kind_with_readable_labels(qtbot, panel_window, tmp_path):
    panel = panel_window.project_panel
    headings = [panel.tree.topLevelItem(i).text(0) for i in range(panel.tree.topLevelItemCount())]
    # Evaluations: the session evaluated the model on the test split when the window opened.
    assert headings == ["Datasets (2)", "Models (1)", "Test sets (3)", "Evaluations (1)", "Importance (1)",
                        "Coverage (2)", "Coverage fits (1)", "Robustness runs (1)"]
    # Two datasets in the project: the set names its dataset; one model: the title leaves it out.
    assert re.fullmatch(rf"IDC m=4 · fc1 · {DATASET}:test · {TIME}", panel.result_item(COVERAGE).text(0))
    # A stored test set's name is the project's own: it needs no dataset.
    assert re.fullmatch(rf"KMNC · 7 layers · {PICKS} · {TIME}", panel.result_item(KMNC).text(0))
    assert re.fullmatch(rf"IDC m=4 · fc1 · {DATASET}:train · {TIME}", titles(panel, "Coverage fits")[0])
    assert re.fullmatch(rf"LRP-0 · fc1 · {DATASET}:train · {TIME}", titles(panel, "Importance")[0])
    assert re.fullmatch(rf"Convergence \(3 rounds\) · {TIME}", titles(panel, "Robustness runs")[0])
    assert re.fullmatch(rf"\d+\.\d % on {DATASET}:test · {TIME}", titles(panel, "Evaluations")[0])
    assert not any("coverage-" in text for text in titles(panel, "Coverage"))
    # The artifact's name and what it measured are in the tooltip.
    tip = panel.result_item(COVERAGE).toolTip(0)
    assert COVERAGE in tip and "IDC of fashion-mnist:test, 1,000 inputs in lenet5-fashion" in tip
    assert "Layers: conv1, pool1" in panel.result_item(KMNC).toolTip(0)
    assert not panel.groups["Coverage fits"].isExpanded() and panel.groups["Coverage"].isExpanded()
    # A stored test set is listed once, under Test sets, by its name; no result row repeats it.
    assert any(text.startswith(f"{PICKS}  (12 images)") for text in titles(panel, "Test sets"))
    assert [i.payload["name"] for i in panel.items("result")].count(PICKS) == 0

    # The screenshot: the labels are readable at the default width.
    from workbench.gui.shell.main_window import PROJECT_WIDTH

    window = panel_window
    window.resize(1440, 900)
    window.resizeDocks([window.project_dock], [PROJECT_WIDTH], Qt.Orientation.Horizontal)
    qtbot.waitUntil(lambda: abs(window.project_dock.width() - PROJECT_WIDTH) <= 2, timeout=30_000)
    path = tmp_path / "panel.png"
    assert panel.grab().save(str(path))
    image = QImage(str(path))
    dark = sum(1 for x in range(0, image.width(), 2) for y in range(0, image.height(), 2)
               if QColor(image.pixel(x, y)).lightness() < 100)
    assert dark > 500  # text is drawn
    metrics = panel.tree.fontMetrics()
    # A row starts two indentations in (the groups' arrows, then its own level), after a small margin.
    room = panel.tree.viewport().width() - 2 * panel.tree.indentation() - 8
    for name in (COVERAGE, KMNC, IMPORTANCE, RUN):
        assert metrics.horizontalAdvance(panel.result_item(name).text(0)) < room, name  # not cut


def test_an_own_test_set_is_listed_by_its_name_with_the_path_in_the_tooltip(qtbot, panel_window):
    panel = panel_window.project_panel
    own = str(panel_window.own_dataset)
    row = next(i for i in panel.items("testset") if i.payload["split"] == "test" and i.payload["dataset"] == own)
    assert row.text(0).startswith(("mine:test", "mine.npz:test")) and "tmp-4f2a9" not in row.text(0)
    assert own in row.toolTip(0)
    dataset = next(i for i in panel.items("dataset") if i.payload["spec"] == own)
    assert "tmp-4f2a9" not in dataset.text(0) and own in dataset.toolTip(0)


def test_open_shows_the_view_of_each_kind(qtbot, panel_window):
    window, panel = panel_window, panel_window.project_panel
    window.show_view("data")
    panel.menu_action(panel.result_item(IMPORTANCE), "Open").trigger()
    assert window.current_view() == "importance" and window.selection.layer == "fc1"
    panel.menu_action(panel.items("result")[0], "Open").trigger()  # the evaluation
    assert window.current_view() == "model"
    picks = panel.result_item(PICKS)
    panel.menu_action(picks, "Browse images").trigger()
    assert window.current_view() == "data" and window.selection.split == PICKS
    # A coverage result: its criterion, IDC layer and set are what the Coverage view measures.
    window.views["coverage"].criteria = ["nc"]
    window.selection.set_layer("fc2")
    panel.menu_action(panel.result_item(COVERAGE), "Open").trigger()
    coverage = window.views["coverage"]
    assert window.current_view() == "coverage" and window.selection.layer == "fc1"
    assert "idc" in coverage.criteria
    qtbot.waitUntil(lambda: coverage.set_keys is not None, timeout=10000)
    assert coverage.set_keys == [f"{DATASET}:test", f"{DATASET}:train"]
    # One measured on a stored test set adds that set to those measured.
    panel.menu_action(panel.result_item(KMNC), "Open").trigger()
    assert coverage.set_keys == [f"{DATASET}:test", f"{DATASET}:train", f"stored:{PICKS}"]
    assert {"idc", "kmnc"} <= set(coverage.criteria)
    window.runner.cancel_all()


def test_export_copies_the_files_and_says_where(qtbot, panel_window, tmp_path, monkeypatch):
    window, panel = panel_window, panel_window.project_panel
    folder = tmp_path / "exported"
    folder.mkdir()
    asked = []
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: asked.append(a) or str(folder))
    panel.menu_action(panel.result_item(COVERAGE), "Export…").trigger()
    project = window.session.project
    result, fit = project.artifact_files(COVERAGE)
    assert sorted(p.name for p in folder.iterdir()) == sorted([result.name, fit.name])  # the fit it needs
    assert (folder / result.name).read_bytes() == result.read_bytes()
    message = window.statusBar().currentMessage()
    assert message.startswith(f"Exported 2 files to {folder}") and result.name in message
    assert "IDC m=4 · fc1" in asked[0][1]  # the dialog names what is exported
    # Exporting again asks before replacing; "No" leaves the files alone.
    (folder / result.name).write_bytes(b"mine")
    questions = []
    no = QMessageBox.StandardButton.No
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: questions.append(a[2]) or no)
    window.statusBar().clearMessage()
    panel.menu_action(panel.result_item(COVERAGE), "Export…").trigger()
    assert "already exist" in questions[0] and (folder / result.name).read_bytes() == b"mine"
    assert window.statusBar().currentMessage() == ""
    # A stored test set exports its one file; a cancelled dialog writes nothing.
    panel.menu_action(panel.result_item(PICKS), "Export…").trigger()  # a new file: no question asked
    picks = folder / project.artifact_files(PICKS)[0].name
    assert picks.exists() and len(questions) == 1
    assert window.statusBar().currentMessage() == f"Exported to {picks}"
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: "")
    assert panel.export_result(KMNC) == []


def test_delete_asks_first_and_takes_the_results_that_need_it(qtbot, panel_window, monkeypatch):
    window, panel = panel_window, panel_window.project_panel
    project = window.session.project
    fit_file = project.artifact_files(FIT)[0]
    answers, questions = [QMessageBox.StandardButton.No], []

    def question(parent, title, text, *rest):
        questions.append((title, text))
        return answers[0]

    monkeypatch.setattr(QMessageBox, "question", question)
    fit_row = next(i for i in panel.items("result") if i.payload["name"] == FIT)
    panel.menu_action(fit_row, "Delete…").trigger()
    assert FIT in project.artifacts() and fit_file.exists()
    title, text = questions[0]
    assert title == "Delete fitted coverage criterion" and "“IDC m=4 · fc1" in text
    assert "1 result cannot be read without it and is deleted too" in text
    answers[0] = QMessageBox.StandardButton.Yes
    panel.menu_action(panel.result_item(FIT), "Delete…").trigger()
    assert FIT not in project.artifacts() and COVERAGE not in project.artifacts() and not fit_file.exists()
    assert panel.result_item(FIT) is None and panel.result_item(COVERAGE) is None
    assert "Coverage fits" not in panel.groups and panel.groups["Coverage"].text(0) == "Coverage (1)"
    assert window.statusBar().currentMessage().startswith("Deleted IDC m=4 · fc1")
    assert "and 1 result made with it" in window.statusBar().currentMessage()
    # A stored test set is deleted from its row under Test sets.
    panel.menu_action(panel.result_item(PICKS), "Delete…").trigger()
    assert PICKS not in project.artifacts() and panel.result_item(PICKS) is None


def test_every_export_confirms_in_the_status_bar(qtbot, panel_window, tmp_path, monkeypatch):
    window = panel_window
    target = tmp_path / "shown.csv"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    window.show_view("data")
    window.views["data"]._export_csv()
    assert target.exists() and window.statusBar().currentMessage() == f"Exported to {target}"
    png = tmp_path / "confusion.png"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(png), ""))
    window.show_view("model")
    qtbot.waitUntil(lambda: window.views["model"].export.isEnabled(), timeout=20000)
    window.views["model"].export.menu().actions()[0].trigger()  # PNG image (2×)
    assert png.exists() and window.statusBar().currentMessage() == f"Exported to {png}"


def test_the_panel_keeps_its_width_through_wide_views_and_a_restart(qtbot, open_window, settle, panel_window):
    from PySide6.QtCore import Qt

    from workbench.core.project.folder import Project
    from workbench.gui.shell.project_panel import MIN_WIDTH

    window = panel_window
    for name in ("data", "model", "training", "importance", "coverage", "robustness", "data"):
        window.show_view(name)
        window.runner.cancel_all()  # what the views start is not what this test is about
        flush_events()  # the window laid out around the view
        assert window.project_dock.width() >= MIN_WIDTH, name
        assert window.minimumSizeHint().width() < 1024, name  # and the window still fits a small screen
    window.resizeDocks([window.project_dock], [300], Qt.Orientation.Horizontal)
    qtbot.waitUntil(lambda: abs(window.project_dock.width() - 300) <= 2, timeout=30_000)
    window.show_view("robustness")  # the widest view: it scrolls, the panel keeps its width
    window.runner.cancel_all()
    flush_events()
    assert abs(window.project_dock.width() - 300) <= 2
    window.close()  # the dock's width is saved with the layout
    again = open_window(Project.open(window.session.project.folder))
    qtbot.waitUntil(lambda: abs(again.project_dock.width() - 300) <= 2, timeout=30_000)
    again.runner.cancel_all()
