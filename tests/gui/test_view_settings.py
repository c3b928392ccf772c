"""View settings survive a reopen: every view's remembered controls, its splitters and tabs come back
(also a combo box filled only once the data has loaded, and a control enabled only later), and
stored values that no longer fit are ignored. File → Recent projects lists the last projects, newest
first, and opens them; Help → Documentation shows the workbench's own pages, with working links."""

from __future__ import annotations

import json
import shutil

import pytest
from gui_helpers import flush_events
from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QApplication, QCheckBox, QComboBox, QSpinBox, QSplitter, QVBoxLayout, QWidget

pytestmark = pytest.mark.gui


def data_splitter(window) -> QSplitter:
    return window.views["data"].grid.parentWidget()


def coverage_body(window) -> QSplitter:
    return window.views["coverage"].matrix_tabs.parentWidget().parentWidget().parentWidget()


def test_each_kind_of_view_setting_comes_back_when_the_project_opens_again(qtbot, open_window, settle):
    from workbench.core.project.folder import Project

    window = open_window()
    settle(window)
    folder = window.session.project.folder
    # The Data view: filters of a combo box filled after the dataset loaded, and one that needs predictions.
    data = window.views["data"]
    assert data.outcome_box.isEnabled()  # the stored evaluation's predictions are there
    data.class_box.setCurrentIndex(2)  # Trouser
    data.outcome_box.setCurrentIndex(1)  # misclassified only
    data.zoom.setValue(2)
    data_splitter(window).setSizes([640, 420])
    flush_events()
    data_sizes = data_splitter(window).sizes()
    # The Robustness view: ε (set for the dataset when the view first shows), pool, strategy, budget, panels.
    robustness = window.views["robustness"]
    window.show_view("robustness")
    window.runner.cancel_all()  # what the view starts is not what this test is about
    assert robustness.eps_dataset == "fashion-mnist"
    robustness.eps_box.setValue(0.05)
    robustness.strategy_box.setCurrentIndex(robustness.strategy_box.findData("km-st"))
    robustness.budget_box.setValue(5.0)
    robustness.retrain.epochs_box.setValue(3)
    robustness.retrain.strategy_actions["mcp"].setChecked(True)
    robustness.retrain.budgets_edit.setText("1, 2, 8")
    robustness.tabs.setCurrentIndex(2)  # Fuzzing
    qtbot.mouseClick(robustness.fuzz.join_box, Qt.MouseButton.LeftButton)
    assert not robustness.fuzz.join_box.isChecked()
    window.runner.cancel_all()
    # The Coverage view: set A chosen with the keyboard, the difference toggle, log scale, m, a tab, a splitter.
    coverage = window.views["coverage"]
    window.show_view("coverage")
    assert coverage.a_box.count() >= 2 and coverage.a_box.currentData() == "fashion-mnist:test"
    qtbot.keyClick(coverage.a_box, Qt.Key.Key_Down)  # the user's choice: `activated`
    assert coverage.a_box.currentData() == "fashion-mnist:train"
    qtbot.mouseClick(coverage.difference, Qt.MouseButton.LeftButton)
    qtbot.keyClick(coverage.b_box, Qt.Key.Key_Up)  # set B, compared with A
    assert coverage.matrix_sets() == ("fashion-mnist:train", "fashion-mnist:test")
    coverage.log_scale.setChecked(False)
    coverage.m_box.setValue(4)
    coverage.matrix_tabs.setCurrentIndex(1)
    coverage_body(window).setSizes([400, 800])
    flush_events()
    coverage_sizes = coverage_body(window).sizes()
    window.runner.cancel_all()
    # The Importance and Training views, never shown.
    importance = window.views["importance"]
    importance.m_box.setValue(3)
    importance.normalise.setChecked(False)
    importance.opacity.setValue(30)
    window.views["training"].epochs.setValue(7)
    window.show_view("data")
    window.close()

    stored = json.loads((folder / "project.json").read_text())["gui"]["views"]
    assert stored["robustness"]["controls"]["strategy_box"]["data"] == "km-st"
    assert stored["coverage"]["values"]["set_keys"] == ["fashion-mnist:test", "fashion-mnist:train"]

    again = open_window(Project.open(folder))
    again.resize(window.size())  # the offscreen screen is smaller than the window was: restoring clamps it
    assert again.current_view() == "data"
    robustness = again.views["robustness"]
    assert robustness.strategy_box.currentData() == "km-st"
    assert robustness.budget_box.value() == 5.0 and robustness.eps_box.value() == pytest.approx(0.05)
    assert robustness.retrain.epochs_box.value() == 3 and robustness.retrain.strategy_actions["mcp"].isChecked()
    assert robustness.retrain.budgets_edit.text() == "1, 2, 8"
    assert not robustness.fuzz.join_box.isChecked() and robustness.tabs.currentIndex() == 2
    coverage = again.views["coverage"]
    assert coverage.difference.isChecked() and not coverage.log_scale.isChecked()
    assert coverage.m_box.value() == 4 and coverage.matrix_tabs.currentIndex() == 1
    assert coverage.a_box.count() == 0  # filled once the model and data are there: the choice waits for it
    importance = again.views["importance"]
    assert (importance.m_box.value(), importance.normalise.isChecked(), importance.opacity.value()) == (3, False, 30)
    assert again.views["training"].epochs.value() == 7

    settle(again)
    data = again.views["data"]
    qtbot.waitUntil(lambda: data.class_box.currentData() == 1 and data.outcome_box.currentIndex() == 1, timeout=30_000)
    assert data.zoom.value() == 2
    thumbnails = data.grid.thumbnails
    assert (thumbnails.class_filter, thumbnails.outcome) == (1, "wrong")  # the filters apply, not only show
    assert all(thumbnails.labels[thumbnails.rows] == 1)
    assert all(abs(a - b) <= 3 for a, b in zip(data_splitter(again).sizes(), data_sizes))

    again.show_view("robustness")
    again.runner.cancel_all()
    assert robustness.eps_box.value() == pytest.approx(0.05)  # the stored ε, not the dataset's default again
    again.show_view("coverage")
    qtbot.waitUntil(lambda: coverage.a_box.currentData() == "fashion-mnist:train", timeout=30_000)
    assert coverage.b_box.currentData() == "fashion-mnist:test"  # the view would choose the second set itself
    assert coverage.matrix_sets() == ("fashion-mnist:train", "fashion-mnist:test")
    assert all(abs(a - b) <= 3 for a, b in zip(coverage_body(again).sizes(), coverage_sizes))
    again.runner.cancel_all()


def test_stored_view_settings_that_no_longer_fit_are_ignored(qtbot, open_window, settle):
    from workbench.gui.shell.demo import open_demo_project

    project, notices = open_demo_project()
    project.set_gui(views={
        "data": {"controls": {"class_box": {"text": "No such class", "data": 99}, "zoom": "large",
                              "outcome_box": 5, "gone_box": 1},
                 "splitters": {"MessageOrContent[0]/QWidget[0]/QSplitter[0]": [1, 2, 3]}, "tabs": [1]},
        "robustness": {"controls": {"strategy_box": {"text": "Retired strategy", "data": "retired"},
                                    "budget_box": "five", "eps_box": float("1e9"),
                                    "retrain.strategy_actions[be-st]": "yes", "fuzz.join_box": 0},
                       "values": {"eps_dataset": 5}},
        "coverage": "not a dict",
        "importance": {"controls": {"m_box": 10 ** 9, "normalise": None}, "values": None},
    })
    window = open_window(project, notices)
    settle(window)
    data, robustness = window.views["data"], window.views["robustness"]
    assert data.class_box.currentIndex() == 0 and data.zoom.value() == 1 and data.outcome_box.currentIndex() == 0
    assert robustness.strategy_box.currentData() == "be-st" and robustness.budget_box.value() == 2.0
    assert robustness.eps_dataset is None and robustness.fuzz.join_box.isChecked()
    assert robustness.retrain.strategy_actions["be-st"].isChecked()
    importance = window.views["importance"]
    assert importance.m_box.value() == 6 and importance.normalise.isChecked()
    assert window.views["coverage"].difference.isChecked() is False
    window.close()
    stored = window.session.project.settings["gui"]["views"]
    assert stored["data"]["controls"]["zoom"] == 1  # what the control holds now replaces the wrong value
    assert stored["coverage"]["controls"]["log_scale"] is True


class Filled(QWidget):
    """A view whose combo box is filled later, as views fill theirs: signals blocked, cleared, the
    items added and the first one chosen."""

    remembered = ("box", "flag", "count")

    def __init__(self):
        super().__init__()
        self.box, self.flag, self.count = QComboBox(), QCheckBox("flag"), QSpinBox()
        self.count.setRange(1, 6)
        self.chosen = []
        self.box.currentIndexChanged.connect(lambda i: self.chosen.append(self.box.itemData(i)))
        layout = QVBoxLayout(self)
        for widget in (self.box, self.flag, self.count):
            layout.addWidget(widget)

    def fill(self, names) -> None:
        self.box.blockSignals(True)
        self.box.clear()
        for name in names:
            self.box.addItem(name.title(), name)
        self.box.setCurrentIndex(0)
        self.box.blockSignals(False)


def test_a_remembered_choice_waits_for_its_item_and_yields_to_the_user(qtbot):
    from workbench.gui.session.view_settings import ViewSettings

    first = Filled()
    qtbot.addWidget(first)
    first.fill(["cat", "dog", "owl"])
    first.box.setCurrentIndex(2)
    first.flag.setChecked(True)
    first.count.setValue(5)
    saved = ViewSettings(first).state()
    assert saved["controls"]["box"] == {"text": "Owl", "data": "owl"}

    second = Filled()
    qtbot.addWidget(second)
    settings = ViewSettings(second, saved)
    assert second.flag.isChecked() and second.count.value() == 5
    assert "box" in settings.waiting and settings.state()["controls"]["box"]["data"] == "owl"  # kept while waiting
    second.fill(["cat", "dog"])  # not there yet
    flush_events()  # the retry it scheduled has run
    assert second.box.currentData() == "cat" and "box" in settings.waiting
    second.fill(["cat", "dog", "owl"])
    qtbot.waitUntil(lambda: second.box.currentData() == "owl", timeout=30_000)
    assert second.chosen[-1] == "owl" and not settings.waiting  # the view heard of it; watching stopped
    second.fill(["owl", "cat"])  # filled again later: the view's own choice stands
    flush_events()
    assert second.box.currentData() == "owl"

    third = Filled()
    qtbot.addWidget(third)
    third.show()
    settings = ViewSettings(third, saved)
    third.fill(["cat"])
    qtbot.keyClick(third.box, Qt.Key.Key_Down)  # the user chose before the item came: their choice stays
    assert not settings.waiting
    third.fill(["cat", "owl"])
    flush_events()
    assert third.box.currentData() == "cat"


def test_recent_projects_are_listed_newest_first_and_open(qtbot, open_window, settle, tmp_path, app_settings_dir):
    from workbench.core.project.folder import Project
    from workbench.gui.session.app_settings import recent_projects
    from workbench.gui.shell.main_window import MainWindow

    first, second = tmp_path / "first project", tmp_path / "second & last"
    for folder in (first, second):
        Project.create(folder, "digits", [])
    window = open_window(Project.open(first))
    settle(window)
    other = window.open_project(second)
    qtbot.addWidget(other)
    settle(other)
    assert recent_projects()[:2] == [second.resolve(), first.resolve()]
    assert (app_settings_dir / "workbench.ini").is_file()  # the test's settings file, not the user's

    other.fill_recent_menu()
    entries = [a for a in other.recent_menu.actions() if a.data()]
    assert [a.data() for a in entries[:2]] == [str(second.resolve()), str(first.resolve())]
    assert entries[0].text().startswith("&1  second && last")  # an "&" in a name is shown, not a shortcut
    assert all(a.isEnabled() for a in entries[:2])
    file_menu = other.menus["File"]
    assert other.recent_menu.menuAction() in file_menu.actions()

    entries[1].trigger()  # opens the first project again, as File → Open project does
    qtbot.waitUntil(lambda: not other.isVisible(), timeout=30_000)
    reopened = next(w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible())
    qtbot.addWidget(reopened)
    assert reopened.session.project.folder.resolve() == first.resolve()
    settle(reopened)
    assert recent_projects()[:2] == [first.resolve(), second.resolve()]

    shutil.rmtree(second)
    reopened.fill_recent_menu()
    entries = {a.data(): a for a in reopened.recent_menu.actions() if a.data()}
    assert entries[str(second.resolve())].isEnabled() is False  # a deleted folder is not offered
    assert "(missing)" in entries[str(second.resolve())].text()
    next(a for a in reopened.recent_menu.actions() if a.objectName() == "clearRecentProjects").trigger()
    assert recent_projects() == []
    texts = [a.text() for a in reopened.recent_menu.actions() if not a.isSeparator()]
    assert texts[0] == "No recent projects"
    reopened.close()


def test_help_documentation_shows_the_pages_and_follows_links(qtbot, settled_window):
    window = settled_window
    window.action_map["documentation"].trigger()
    docs = window.documentation
    qtbot.waitUntil(docs.isVisible, timeout=30_000)
    titles = docs.titles()
    assert {"Importance-Driven Coverage (IDC)", "Neuron importance with LRP", "First-order loss and test selection",
            "Classic coverage criteria and surprise adequacy"} <= set(titles)
    methods = docs.items["docs/methods/README.md"]
    assert methods.childCount() >= 5  # the method pages are listed under Methods
    assert docs.current == "README.md"
    assert "A desktop workbench for testing deep-learning image classifiers" in docs.browser.toPlainText()
    docs.follow(QUrl("docs/methods/idc.md"))  # a relative link on the README
    assert docs.current == "docs/methods/idc.md"
    assert docs.browser.toPlainText().startswith("Importance-Driven Coverage (IDC)")
    assert docs.tree.currentItem() is docs.items["docs/methods/idc.md"]
    docs.browser.anchorClicked.emit(QUrl("importance.md#rules"))  # a link on that page, to a section of another
    assert docs.current == "docs/methods/importance.md" and docs.browser.verticalScrollBar().value() > 0
    docs.follow(QUrl("../architecture.md"))
    assert docs.current == "docs/architecture.md"
    qtbot.mouseClick(docs.back_button, Qt.MouseButton.LeftButton)
    assert docs.current == "docs/methods/importance.md"
    docs.tree.setCurrentItem(docs.items["docs/methods/README.md"])  # a click in the list
    assert docs.current == "docs/methods/README.md"
    window.action_map["documentation"].trigger()
    assert window.documentation is docs  # one window, raised again
