"""The main window: menus, the selection tool bar, project and jobs docks, views, status bar.

It owns the job runner, the shared selection and the session of one project. Opening another
project opens a new window and closes this one, so no state leaks between projects. Closing the
window cancels running jobs and waits for their threads, then saves the layout into the project.
"""

from __future__ import annotations

import sys
from pathlib import Path

import PySide6
import pyqtgraph
from PySide6.QtCore import QByteArray, Qt
from PySide6.QtWidgets import QDockWidget, QFileDialog, QMainWindow, QMenu, QMessageBox, QVBoxLayout, QWidget

import workbench
from workbench.core.errors import WorkbenchError
from workbench.core.project.folder import SETTINGS, Project
from workbench.gui.shell.actions import ShortcutsDialog, build_actions
from workbench.gui.session.app_settings import (
    add_recent_project,
    clear_recent_projects,
    recent_projects,
    store_distribution,
    stored_distribution,
)
from workbench.gui.plotting.frame_paint import window_event
from workbench.gui.plotting.plot_style import configure_pyqtgraph
from workbench.gui.session.jobs import FAILED, LONG, THREAD, Job, JobRunner
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.session.view_settings import ViewSettings
from workbench.gui.shell.distribution_dialog import DistributionDialog, connect
from workbench.gui.shell.documentation import DocumentationWindow
from workbench.gui.shell.open_dialogs import OpenDatasetDialog, OpenModelDialog
from workbench.gui.shell.project_panel import ProjectPanel
from workbench.gui.shell.selection_toolbar import SelectionToolBar
from workbench.gui.shell.status_bar import StatusBar
from workbench.gui.views.compare_view import CompareView
from workbench.gui.views.coverage_view import CoverageView
from workbench.gui.views.data_view import DataView
from workbench.gui.views.generation_view import GenerationView
from workbench.gui.views.generators_view import GeneratorsView
from workbench.gui.views.importance_view import ImportanceView
from workbench.gui.views.labeling_view import LabelingView
from workbench.gui.views.model_view import ModelView
from workbench.gui.views.robustness_view import RobustnessView
from workbench.gui.views.training_view import TrainingView
from workbench.gui.widgets.error_dialog import report_error, report_problems
from workbench.gui.widgets.export import export_notices
from workbench.gui.widgets.jobs_panel import JobsPanel
from workbench.gui.widgets.notice_bar import NoticeBar
from workbench.gui.widgets.view_area import ViewArea

VIEW_TITLES = {"data": "Data", "model": "Model", "training": "Training", "importance": "Importance",
               "coverage": "Coverage", "robustness": "Robustness", "generators": "Generators",
               "generation": "Generation", "labelling": "Labelling", "compare": "Compare"}
DEFAULT_SIZE = (1440, 900)
PROJECT_WIDTH = 300  # the project dock's width until the user changes it: room for a result's label
_open_windows: set["MainWindow"] = set()  # windows opened from another window, kept alive here


class MainWindow(QMainWindow):
    def __init__(self, project: Project, notices: list[tuple[str, str]] = (), parent: QWidget | None = None,
                 long_jobs: str = THREAD):
        """`long_jobs`: where the long lane runs its jobs, THREAD or PROCESS (`gui.session.jobs`)."""
        super().__init__(parent)
        configure_pyqtgraph()
        self.setObjectName("mainWindow")
        self.runner = JobRunner(self, long_jobs=long_jobs)
        self.runner.distribution = stored_distribution()
        self.selection = Selection(self)
        self.session = Session(project, self.runner, self)
        self._initial_selection()
        self.dialogs: list[QWidget] = []  # open dialogs, for tests and for closing with the window
        self.documentation: DocumentationWindow | None = None

        self.views = {"data": DataView(self.session, self.selection),
                      "model": ModelView(self.session, self.selection),
                      "training": TrainingView(self.session, self.selection),
                      "importance": ImportanceView(self.session, self.selection),
                      "coverage": CoverageView(self.session, self.selection),
                      "robustness": RobustnessView(self.session, self.selection),
                      "generators": GeneratorsView(self.session, self.selection),
                      "generation": GenerationView(self.session, self.selection),
                      "labelling": LabelingView(self.session, self.selection),
                      "compare": CompareView(self.session, self.selection)}
        self.view_area = ViewArea()  # the tabs ask for the shown view's width only, and scroll
        self.tabs = self.view_area.tabs
        self.tabs.setObjectName("viewTabs")
        self.tabs.setDocumentMode(True)
        for name, title in VIEW_TITLES.items():
            self.tabs.addTab(self.views[name], title)
        self.notices = NoticeBar()
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.notices)
        layout.addWidget(self.view_area, 1)
        self.setCentralWidget(central)

        self.project_panel = ProjectPanel(self.session, self.selection)
        self.project_dock = self._dock("Project", "projectDock", self.project_panel,
                                       Qt.DockWidgetArea.LeftDockWidgetArea)
        self.jobs_panel = JobsPanel(self.runner)
        self.jobs_dock = self._dock("Jobs", "jobsDock", self.jobs_panel, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.resizeDocks([self.project_dock], [PROJECT_WIDTH], Qt.Orientation.Horizontal)
        self.resizeDocks([self.jobs_dock], [170], Qt.Orientation.Vertical)

        self.action_map, self.menus = build_actions(self, self._handlers())
        self._build_recent_menu()
        self._build_project_menu()
        self._build_toolbar()
        self.status = StatusBar(self.session, self.runner, self)
        self.setStatusBar(self.status)
        self._connect()
        self.default_state = self.saveState()
        self._restore_layout()
        add_recent_project(project.folder)
        self._show_start_notices(notices)
        self._update_title()
        self.session.start()

    def event(self, event) -> bool:
        return window_event(super().event, event)  # its paints are a frame (`gui/plotting/frame_paint.py`)

    # --- construction ---------------------------------------------------------------------------------

    def _initial_selection(self) -> None:
        project = self.session.project
        saved = project.settings.get("gui", {}).get("selection", {})
        models = [m["name"] for m in project.models]
        model = saved.get("model") if saved.get("model") in models else (models[0] if models else None)
        dataset = saved.get("dataset") if saved.get("dataset") in project.datasets else None
        if dataset is None and project.datasets:
            # Prefer the dataset the model was trained on, as the bundled model cards say.
            wanted = self._card_dataset(model)
            dataset = wanted if wanted in project.datasets else project.datasets[0]
        self.selection.model, self.selection.dataset = model, dataset
        self.selection.split = saved.get("split") or "test"

    @staticmethod
    def _card_dataset(model: str | None) -> str | None:
        if model is None:
            return None
        from workbench.core.models.model_io import bundled_models

        return next((c.get("dataset") for c in bundled_models() if c["name"] == model), None)

    def _dock(self, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _handlers(self) -> dict:
        return {
            "open_project": self.choose_project, "new_project": self.new_project, "open_demo": self.open_demo,
            "open_model": self.open_model_file, "open_dataset": self.open_dataset_file, "quit": self.close,
            "evaluate": self.evaluate_selected, "train": lambda: self.show_view("training"),
            "view_data": lambda: self.show_view("data"), "view_model": lambda: self.show_view("model"),
            "view_training": lambda: self.show_view("training"),
            "view_importance": lambda: self.show_view("importance"),
            "view_coverage": lambda: self.show_view("coverage"),
            "view_robustness": lambda: self.show_view("robustness"),
            "view_generators": lambda: self.show_view("generators"),
            "view_generation": lambda: self.show_view("generation"),
            "view_labelling": lambda: self.show_view("labelling"),
            "view_compare": lambda: self.show_view("compare"), "close_view": self.close_current_view,
            "toggle_project_dock": self.project_dock.toggleViewAction(),
            "toggle_jobs_dock": self.jobs_dock.toggleViewAction(),
            "restore_layout": self.restore_default_layout, "full_screen": self.set_full_screen,
            "cancel_all": self.runner.cancel_all, "clear_jobs": self.jobs_panel.clear_finished,
            "run_long_jobs_on": self.choose_distribution,
            "documentation": self.show_documentation, "shortcuts": self.show_shortcuts, "about": self.show_about,
        }

    def choose_distribution(self) -> DistributionDialog:
        """Jobs → Run long jobs on…: the dialog (shown, not waited for), its choice kept for the next jobs."""
        dialog = DistributionDialog(self.runner.distribution, lambda distribution: self.runner.submit(
            "Connect to Ray", connect, distribution, uses_device=False, lane=LONG, portable=True,
            report_errors=False), self)
        dialog.setObjectName("distributionDialog")
        dialog.chosen.connect(self._use_distribution)
        dialog.show()
        return dialog

    def _use_distribution(self, distribution) -> None:
        store_distribution(distribution)
        self.runner.distribution = distribution
        self.statusBar().showMessage(f"Long jobs that can shard run on {distribution.describe()} from now on.", 8000)

    def _build_recent_menu(self) -> None:
        """File → Recent projects, under the demo project's entry; filled each time it opens."""
        menu = self.menus["File"]
        self.recent_menu = QMenu("&Recent projects", menu)
        self.recent_menu.setObjectName("recentProjectsMenu")
        self.recent_menu.setToolTipsVisible(True)
        actions = menu.actions()
        after_demo = actions[actions.index(self.action_map["open_demo"]) + 1]  # the separator above Open model
        menu.insertMenu(after_demo, self.recent_menu)
        self.recent_menu.aboutToShow.connect(self.fill_recent_menu)
        self.fill_recent_menu()

    def fill_recent_menu(self) -> None:
        """The last opened project folders, newest first; one that is gone (or no longer a project) is
        listed greyed out, and Clear recent empties the list."""
        menu = self.recent_menu
        menu.clear()
        folders = recent_projects()
        home = Path.home()
        for number, folder in enumerate(folders, start=1):
            shown = str(folder)
            if folder.is_relative_to(home):
                shown = "~/" + folder.relative_to(home).as_posix()
            exists = (folder / SETTINGS).is_file()
            text = f"{folder.name}   {shown}" + ("" if exists else "   (missing)")
            action = menu.addAction(f"&{number}  " + text.replace("&", "&&"),  # a folder's "&" is no shortcut
                                    lambda folder=folder: self.open_project(folder))
            action.setData(str(folder))
            action.setEnabled(exists)
            action.setToolTip(str(folder) if exists else f"{folder} no longer holds a project")
        if not folders:
            menu.addAction("No recent projects").setEnabled(False)
        menu.addSeparator()
        clear = menu.addAction("&Clear recent", self.clear_recent)
        clear.setObjectName("clearRecentProjects")
        clear.setEnabled(bool(folders))

    def clear_recent(self) -> None:
        clear_recent_projects()
        self.fill_recent_menu()

    def _build_project_menu(self) -> None:
        menu = self.menus["Project"]
        menu.addSeparator()
        self.add_dataset_menu = menu.addMenu("Add &dataset")
        self.add_model_menu = menu.addMenu("Add &bundled model")
        for submenu in (self.add_dataset_menu, self.add_model_menu):
            submenu.setToolTipsVisible(True)
        self.add_dataset_menu.aboutToShow.connect(self._fill_add_dataset_menu)
        self.add_model_menu.aboutToShow.connect(self._fill_add_model_menu)

    def _fill_add_dataset_menu(self) -> None:
        from workbench.core.data.registry import dataset_status

        menu = self.add_dataset_menu
        menu.clear()
        for status in dataset_status():
            present = status["name"] in self.session.project.datasets
            text = status["title"] + ("  (in the project)" if present else "")
            action = menu.addAction(text, lambda spec=status["name"]: self.add_dataset(spec))
            action.setEnabled(status["available"] and not present)
            if not status["available"]:
                action.setToolTip(f"Not installed: {status['reason']}. Install: {status['install']}")
        menu.addSeparator()
        menu.addAction("From a file or folder…", self.open_dataset_file)

    def _fill_add_model_menu(self) -> None:
        from workbench.core.models.model_io import bundled_models

        menu = self.add_model_menu
        menu.clear()
        present = {m["name"] for m in self.session.project.models}
        for card in bundled_models():
            accuracy = f" — {card['test_accuracy'] * 100:.1f} % on {card.get('dataset')}" if card.get(
                "test_accuracy") else ""
            action = menu.addAction(f"{card['name']}{accuracy}",
                                    lambda name=card["name"]: self.add_bundled_model(name))
            action.setEnabled(card["available"] and card["name"] not in present)
            action.setToolTip(card.get("title", "") if card["available"]
                              else f"Not installed. Install: {card.get('install') or 'reinstall the workbench'}")

    def _build_toolbar(self) -> None:
        self.selection_bar = SelectionToolBar(self.session, self.selection, self)
        for action_id in ("open_model", "evaluate", "train"):
            self.selection_bar.addAction(self.action_map[action_id])
        self.addToolBar(self.selection_bar)
        self._update_evaluate_action()

    def _update_evaluate_action(self) -> None:
        self.action_map["evaluate"].setEnabled(self.selection.model is not None and self.selection.dataset is not None)

    def _connect(self) -> None:
        self.runner.job_failed.connect(self._on_job_failed)
        self.session.error.connect(lambda exc: report_error(self, exc))
        self.session.message.connect(lambda text: self.statusBar().showMessage(text, 8000))
        self.runner.job_notice.connect(lambda job, text: self.statusBar().showMessage(f"{job.name}: {text}", 15000))
        self.runner.workers_unavailable.connect(self._on_workers_unavailable)
        self.project_panel.message.connect(self.show_message)
        export_notices().written.connect(self.show_message)
        self.session.ready.connect(self._on_ready)
        self.session.model_added.connect(self._on_model_added)
        self.session.dataset_added.connect(self._on_dataset_added)
        self.selection.changed.connect(lambda what: what in ("model", "dataset") and self._update_evaluate_action())
        self.session.project_changed.connect(self._update_evaluate_action)
        self.project_panel.open_requested.connect(self.open_item)
        self.project_panel.evaluate_requested.connect(self._evaluate_model)
        self.jobs_panel.open_requested.connect(self.open_job)
        self.views["model"].open_model_requested.connect(self.open_model_file)
        self.views["importance"].open_model_requested.connect(self.open_model_file)
        self.views["coverage"].open_model_requested.connect(self.open_model_file)
        self.views["coverage"].inspect_requested.connect(lambda: self.show_view("importance"))
        self.views["robustness"].open_model_requested.connect(self.open_model_file)
        self.views["model"].train_requested.connect(lambda: self.show_view("training"))
        self.views["training"].trained.connect(lambda _: self.show_view("training"))
        self.views["generation"].open_in_coverage.connect(self.measure_in_coverage)
        self.views["labelling"].open_in_coverage.connect(self.measure_in_coverage)
        self.views["generation"].open_in_labelling.connect(self.label)
        self.project_panel.label_requested.connect(self.label)
        self.project_panel.compare_requested.connect(lambda name: self.compare([name]))
        self.views["generation"].open_in_compare.connect(self.compare)
        self.views["labelling"].open_in_compare.connect(self.compare)
        self.views["compare"].open_in_coverage.connect(self.measure_in_coverage)
        self.views["compare"].show_against.connect(self.show_against)

    def measure_in_coverage(self, testset: str) -> None:
        """Show the Coverage view with the stored test set `testset` among its measured sets."""
        coverage = self.views["coverage"]
        coverage.add_stored_set(testset)
        self.show_view("coverage")

    def show_against(self, a: str, b: str) -> None:
        """The Coverage view's matrices of test set `a` against `b` (the cells only one covers, both, neither)."""
        coverage = self.views["coverage"]
        self.show_view("coverage")
        if not coverage.show_against(a, b):
            self.show_view("compare")
            self.views["compare"].status.setText(f"The Coverage view measures the project's listed test sets; "
                                                 f"{a if coverage.key_of(a) is None else b} is not one of them. "
                                                 "Save it as a test set (Set algebra) to see it there.")

    def compare(self, testsets: list[str]) -> None:
        """Show the Compare view with `testsets` among the sets compared."""
        self.views["compare"].add_sets(testsets)
        self.show_view("compare")

    def label(self, testset: str) -> None:
        """Show the Labelling view with the test set `testset` chosen."""
        self.views["labelling"].choose(testset)
        self.show_view("labelling")

    # --- start-up --------------------------------------------------------------------------------------

    def _show_start_notices(self, notices) -> None:
        for text, level in notices:
            self.notices.add(text, level)
        project = self.session.project
        if project.read_only:
            self.notices.add(f"The project folder {project.folder} is read-only: everything can be viewed, but new "
                             "results and models cannot be saved. Copy it somewhere writable to work in it.",
                             "warning")
        damaged = [p for p in project.problems if not p.startswith("The folder ")]
        if damaged:
            self.notices.add(f"{len(damaged)} result{'s' * (len(damaged) != 1)} in this project could not be read; "
                             "everything else opened. They are listed under Problems in the project panel.",
                             "warning", ("Show", lambda: self._dialog(report_problems(
                                 self, "Project problems", "Some results in this project could not be read.", damaged,
                                 "Delete them from the project panel and compute them again."))))

    def _on_ready(self) -> None:
        broken = [r for r in self.session.plugin_reports if not r.ok]
        if broken:
            names = ", ".join(r.name for r in broken)
            details = [f"{r.name} ({r.origin}): {r.error}" for r in broken]
            self.notices.add(f"{len(broken)} plugin{'s' * (len(broken) != 1)} could not be loaded ({names}); the "
                             "workbench runs without them.", "warning",
                             ("Details", lambda: self._dialog(report_problems(
                                 self, "Plugins", "Some plugins could not be loaded.", details,
                                 "Fix or remove the plugin files, then restart the workbench."))))
            self.statusBar().showMessage(f"Plugins not loaded: {names}", 15000)
        if self.runner.device:
            self.status.show_device(self.runner.device)

    def show_message(self, text: str) -> None:
        """A confirmation in the status bar: where an export went, what was deleted."""
        if self.isVisible():  # a window closed for another project says nothing
            self.statusBar().showMessage(text, 10000)

    def _update_title(self) -> None:
        project = self.session.project
        self.setWindowTitle(f"{project.name} — DL Testing Workbench" + (" (read-only)" if project.read_only else ""))

    def _dialog(self, dialog: QWidget) -> QWidget:
        self.dialogs = [d for d in self.dialogs if is_alive(d)] + [dialog]
        return dialog

    # --- views -------------------------------------------------------------------------------------------

    def show_view(self, name: str) -> None:
        view = self.views[name]
        if self.tabs.indexOf(view) < 0:
            order = list(VIEW_TITLES)
            position = sum(1 for other in order[:order.index(name)] if self.tabs.indexOf(self.views[other]) >= 0)
            self.tabs.insertTab(position, view, VIEW_TITLES[name])
        self.tabs.setCurrentWidget(view)

    def current_view(self) -> str:
        return next(name for name, view in self.views.items() if view is self.tabs.currentWidget())

    def close_view(self, index: int) -> None:
        if self.tabs.count() <= 1:
            self.statusBar().showMessage("The last view stays open; open others from the View menu.", 5000)
            return
        self.tabs.removeTab(index)

    def close_current_view(self) -> None:
        self.close_view(self.tabs.currentIndex())

    def restore_default_layout(self) -> None:
        self.restoreState(self.default_state)
        self.project_dock.setVisible(True)
        self.jobs_dock.setVisible(True)
        current = self.current_view()
        for name in VIEW_TITLES:
            self.show_view(name)
        self.show_view(current)

    def set_full_screen(self, on: bool) -> None:
        if on:
            self.showFullScreen()
        else:
            self.showNormal()

    # --- opening things -----------------------------------------------------------------------------------

    def open_item(self, kind: str, payload: dict) -> None:
        """Double-click in the project panel: point the selection at the item and show its view."""
        if kind == "dataset":
            self.selection.set_dataset(payload["spec"])
            self.show_view("data")
        elif kind == "model":
            self.selection.set_model(payload["name"])
            self.show_view("model")
        elif kind == "testset":  # a split or a stored test set: browsed in the Data view
            if payload.get("dataset"):
                self.selection.set_dataset(payload["dataset"])
            self.selection.set_split(payload.get("split", "test"))
            self.show_view("data")
        elif kind == "result":
            how = payload.get("provenance", {})
            if how.get("model") and self.session.model_entry(how["model"]) is not None:
                self.selection.set_model(how["model"])
            spec = next((s for s in self.session.project.datasets
                         if self.session.dataset_title(s) == how.get("dataset") or s == how.get("dataset")), None)
            if spec is not None:
                self.selection.set_dataset(spec)
            if how.get("split"):
                self.selection.set_split(how["split"])
            if payload.get("kind") in ("importance", "ablation") and how.get("layer"):
                self.selection.set_layer(how["layer"])
                self.show_view("importance")
            elif payload.get("kind") in ("coverage", "coverage-fit"):
                self.views["coverage"].show_stored(how, spec)
                self.show_view("coverage")
            elif payload.get("kind") == "robustness":
                self.show_view("robustness")
            else:
                self.show_view("model")

    def open_job(self, job: Job) -> None:
        """Double-click in the jobs panel: a failure shows its error again, a result the view that shows it."""
        if job.record.state == FAILED:
            self._dialog(report_error(self, job.record.error, job.record.details, title=f"{job.name} failed"))
        elif job.record.view in self.views:
            self.show_view(job.record.view)

    def evaluate_selected(self) -> None:
        if self.selection.model is None or self.selection.dataset is None:
            return
        self.session.evaluate(self.selection.model, self.selection.dataset, self.selection.split, force=True)
        self.show_view("model")

    def _evaluate_model(self, name: str) -> None:
        self.selection.set_model(name)
        self.evaluate_selected()

    def open_model_file(self) -> OpenModelDialog:
        from workbench.core.models.architectures import architectures

        dialog = OpenModelDialog([a.name for a in architectures()], self,
                                 load=lambda choices: self.session.add_model_file(**choices, report_errors=False))
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return self._dialog(dialog)

    def _on_model_added(self, name: str) -> None:
        self.selection.set_model(name)
        self.show_view("model")

    def open_dataset_file(self) -> OpenDatasetDialog:
        # the dialog shows a failure itself, with the path still typed: no error dialog over it
        dialog = OpenDatasetDialog(self, load=lambda spec, download: self.session.add_dataset(
            spec, download=download, report_errors=False))
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return self._dialog(dialog)

    def add_dataset(self, spec: str, download: bool = False) -> None:
        self.session.add_dataset(spec, download=download)

    def _on_dataset_added(self, spec: str) -> None:
        self.selection.set_dataset(spec)
        self.show_view("data")

    def add_bundled_model(self, name: str) -> None:
        self.session.add_bundled_model(name)
        if self.session.model_entry(name) is not None:
            self.selection.set_model(name)
            self.show_view("model")

    # --- projects ----------------------------------------------------------------------------------------

    def choose_project(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open project folder", str(self.session.project.folder.parent))
        if folder:
            self.open_project(folder)

    def open_project(self, folder: str | Path) -> "MainWindow | None":
        if Path(folder).resolve() == self.session.project.folder.resolve():
            self._save_layout()  # reopening this project: the new window starts from how this one is now
        try:
            project = Project.open(folder)
        except WorkbenchError as exc:
            self._dialog(report_error(self, exc, title="Cannot open project"))
            return None
        return self.switch_to(project)

    def new_project(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose an empty folder for the new project")
        if not folder:
            return
        path = Path(folder)
        try:
            if (path / SETTINGS).exists():
                project = Project.open(path)
            elif any(path.iterdir()):
                raise WorkbenchError(f"{path} is not empty.", "Choose an empty folder for a new project.")
            else:
                bundled = self.selection.model if self._card_dataset(self.selection.model) else None
                project = Project.create(path, self.selection.dataset or "fashion-mnist", [bundled] if bundled else [])
        except (WorkbenchError, OSError) as exc:
            self._dialog(report_error(self, exc, title="Cannot create project"))
            return
        self.switch_to(project)

    def open_demo(self) -> None:
        from workbench.gui.shell.demo import open_demo_project

        try:
            project, notices = open_demo_project()
        except WorkbenchError as exc:
            self._dialog(report_error(self, exc, title="Cannot open the demo project"))
            return
        self.switch_to(project, notices)

    def switch_to(self, project: Project, notices=()) -> "MainWindow":
        """Open `project` in a new window and close this one (its jobs are cancelled first)."""
        window = MainWindow(project, notices, long_jobs=self.runner.long_jobs)
        window.resize(self.size())
        _open_windows.add(window)
        window.destroyed.connect(lambda: _open_windows.discard(window))
        window.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        window.show()
        self.close()
        return window

    # --- errors, help, closing ---------------------------------------------------------------------------

    def _on_workers_unavailable(self, error) -> None:
        """Said once, where start-up news goes: the jobs still run (in threads), so nothing waits on the user."""
        self.notices.add(f"{error.message} {error.hint}", "warning")
        self.statusBar().showMessage("Long jobs run in threads: worker processes cannot start.", 15000)

    def _on_job_failed(self, job: Job) -> None:
        self._dialog(report_error(self, job.record.error, job.record.details, title=f"{job.name} failed"))

    def show_documentation(self) -> DocumentationWindow:
        """Help → Documentation: one window of the workbench's own pages, raised when it is open already."""
        if self.documentation is None or not is_alive(self.documentation):
            self.documentation = DocumentationWindow(parent=self)
            self.documentation.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.documentation.show()
        self.documentation.raise_()
        self.documentation.activateWindow()
        return self._dialog(self.documentation)

    def show_shortcuts(self) -> ShortcutsDialog:
        dialog = ShortcutsDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return self._dialog(dialog)

    def show_about(self) -> QMessageBox:
        torch = sys.modules.get("torch")  # never import it here: the start-up job does, off this thread
        versions = f"PySide6 {PySide6.__version__}, pyqtgraph {pyqtgraph.__version__}" + (
            f", PyTorch {torch.__version__}" if torch is not None else "")
        box = QMessageBox(QMessageBox.Icon.Information, "About the DL Testing Workbench",
                          f"<b>DL Testing Workbench {workbench.__version__}</b><p>Test deep-learning image "
                          "classifiers: datasets, models, training and evaluation. Jobs run on "
                          f"{self.runner.device or 'the CPU'}.</p><p>{versions}. Licence: MIT.</p>", parent=self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        return self._dialog(box)

    def _save_layout(self) -> None:
        project = self.session.project
        if project.read_only:
            return
        layout = {"state": bytes(self.saveState().toBase64()).decode(),
                  "geometry": bytes(self.saveGeometry().toBase64()).decode(),
                  "view": self.current_view(),
                  "closed_views": [n for n, v in self.views.items() if self.tabs.indexOf(v) < 0]}
        selection = {"model": self.selection.model, "dataset": self.selection.dataset, "split": self.selection.split}
        stored = project.settings.get("gui", {}).get("views")
        views = dict(stored) if isinstance(stored, dict) else {}  # views this window does not have keep theirs
        views.update({name: settings.state() for name, settings in self.view_settings.items()})
        try:
            project.set_gui(layout=layout, selection=selection, views=views)
        except WorkbenchError:
            pass  # the layout is a convenience: a folder that went read-only must not block closing

    def _restore_layout(self) -> None:
        gui = self.session.project.settings.get("gui", {})
        saved = gui.get("views") if isinstance(gui.get("views"), dict) else {}
        self.view_settings = {name: ViewSettings(view, saved.get(name)) for name, view in self.views.items()}
        layout = gui.get("layout", {})
        if layout.get("geometry"):
            self.restoreGeometry(QByteArray.fromBase64(layout["geometry"].encode()))
        else:
            self.resize(*DEFAULT_SIZE)
        if layout.get("state"):
            self.restoreState(QByteArray.fromBase64(layout["state"].encode()))
        for name in layout.get("closed_views", []):
            if name in self.views and self.tabs.count() > 1:
                self.tabs.removeTab(self.tabs.indexOf(self.views[name]))
        if layout.get("view") in self.views:
            self.show_view(layout["view"])

    def closeEvent(self, event) -> None:
        if not self.runner.is_idle():
            self.statusBar().showMessage("Stopping running jobs…")
        if not self.runner.shutdown(5000):
            # A job inside a long uncancellable step (an import, a file read): wait for it rather
            # than leave a thread running past the window.
            names = ", ".join(j.name for j in self.runner.active_jobs())
            print(f"Waiting for jobs to stop: {names}", file=sys.stderr)
            self.runner.shutdown(-1)
        self.status.memory_timer.stop()
        self.jobs_panel.clock.stop()
        self._save_layout()
        for dialog in self.dialogs:
            if is_alive(dialog):
                dialog.close()
        super().closeEvent(event)


def is_alive(widget: QWidget) -> bool:
    from shiboken6 import isValid

    return isValid(widget)
