"""Every menu action and its shortcut, in one table (shown in Help → Keyboard shortcuts).

The main window supplies a handler per action id; tests drive the same shortcuts with
`qtbot.keyClick`, so what the table says is what the keys do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QDialogButtonBox, QHeaderView, QMainWindow, QMenu,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

MENUS = ("File", "Project", "View", "Jobs", "Help")


@dataclass(frozen=True)
class ActionSpec:
    id: str
    text: str
    menu: str
    shortcut: str = ""
    tip: str = ""
    checkable: bool = False
    separator_before: bool = False
    short: str = ""  # the tool bar's text, where the menu's is too long


ACTIONS: tuple[ActionSpec, ...] = (
    ActionSpec("open_project", "&Open project…", "File", "Ctrl+O", "Open a project folder"),
    ActionSpec("new_project", "&New project…", "File", "Ctrl+N", "Create a project in an empty folder"),
    ActionSpec("open_demo", "Open the &demo project", "File", "", "Fashion-MNIST with the bundled LeNet-5"),
    ActionSpec("open_model", "Open &model file…", "File", "Ctrl+Shift+O",
               "Add a .pt, .pth, .pt2 or .safetensors model to the project", separator_before=True,
               short="Open model…"),
    ActionSpec("open_dataset", "Open &dataset file or folder…", "File", "Ctrl+Shift+D",
               "Add an IDX folder, .npz, .h5 file or image folder to the project"),
    ActionSpec("quit", "&Quit", "File", "Ctrl+Q", "Stop running jobs and close the window", separator_before=True),
    ActionSpec("evaluate", "&Evaluate the selected model", "Project", "Ctrl+E",
               "Accuracy and confusion matrix on the selected split, computed again", short="Evaluate"),
    ActionSpec("train", "&Train a model…", "Project", "Ctrl+T", "Open the Training view", short="Train…"),
    ActionSpec("view_data", "&Data", "View", "Ctrl+1", "Browse the selected dataset"),
    ActionSpec("view_model", "&Model", "View", "Ctrl+2", "Layers, accuracy and confusion matrix"),
    ActionSpec("view_training", "&Training", "View", "Ctrl+3", "Train a model and watch its curves"),
    ActionSpec("view_importance", "&Importance", "View", "Ctrl+4",
               "Relevant neurons of a layer, their galleries, an input inspector and the ablation check"),
    ActionSpec("view_coverage", "C&overage", "View", "Ctrl+5",
               "Coverage of test sets by IDC and the classic criteria, with the IDC and KMNC matrices"),
    ActionSpec("view_robustness", "&Robustness", "View", "Ctrl+6",
               "FOL of attacks, test selection, retraining, convergence and fuzzing (RobOT)"),
    ActionSpec("view_generators", "&Generators", "View", "Ctrl+7",
               "Generative models as test-input search spaces: their cards, samples, latent walks and training"),
    ActionSpec("view_generation", "Ge&neration", "View", "Ctrl+8",
               "Search generators' latent spaces for inputs the classifier misbehaves on, with validity proxies"),
    ActionSpec("view_labelling", "&Labelling", "View", "Ctrl+9",
               "Judge generated inputs for validity with the keyboard: blind, several raters, agreement and proxies"),
    ActionSpec("view_compare", "Com&pare", "View", "Ctrl+0",
               "Test sets side by side: coverage, accuracy, FOL, novelty, validity, intervals and what each adds"),
    ActionSpec("close_view", "&Close view", "View", "Ctrl+W", "Close the current tab (reopen it from this menu)"),
    ActionSpec("toggle_project_dock", "&Project panel", "View", "Ctrl+Shift+P", checkable=True,
               separator_before=True),
    ActionSpec("toggle_jobs_dock", "&Jobs panel", "View", "Ctrl+Shift+J", checkable=True),
    ActionSpec("restore_layout", "&Restore default layout", "View", "", "Put every panel back where it started"),
    ActionSpec("full_screen", "&Full screen", "View", "F11", checkable=True, separator_before=True),
    ActionSpec("cancel_all", "&Cancel all jobs", "Jobs", "Ctrl+Shift+X", "Stop every running job"),
    ActionSpec("clear_jobs", "Clear &finished jobs", "Jobs", "", "Remove finished jobs from the jobs panel"),
    ActionSpec("run_long_jobs_on", "&Run long jobs on…", "Jobs", "",
               "This machine, or a Ray cluster that runs the shards of coverage, relevance, attacks, searches and "
               "retraining grids", separator_before=True),
    ActionSpec("documentation", "&Documentation", "Help", "",
               "The workbench's own pages: what it does, its architecture and the methods, readable offline"),
    ActionSpec("shortcuts", "&Keyboard shortcuts", "Help", "F1"),
    ActionSpec("about", "&About the workbench", "Help"),
)


def plain(text: str) -> str:
    return text.replace("&", "").rstrip("…")


def build_actions(window: QMainWindow, handlers: dict[str, Callable | QAction]
                  ) -> tuple[dict[str, QAction], dict[str, QMenu]]:
    """Create the menu bar from `ACTIONS`; returns the actions and the menus by name."""
    menus = {name: window.menuBar().addMenu(f"&{name}") for name in MENUS}
    actions: dict[str, QAction] = {}
    for spec in ACTIONS:
        handler = handlers[spec.id]
        # A handler may be a ready-made action (a dock's toggle action): it gets the table's text and keys.
        action = handler if isinstance(handler, QAction) else QAction(window)
        action.setText(spec.text)
        action.setObjectName(f"action_{spec.id}")
        if spec.shortcut:
            action.setShortcut(QKeySequence(spec.shortcut))
        if spec.tip:
            action.setStatusTip(spec.tip)
            action.setToolTip(spec.tip)
        if spec.short:
            action.setIconText(spec.short)
        if isinstance(handler, QAction):
            pass
        elif spec.checkable:
            action.setCheckable(True)
            action.toggled.connect(handler)
        else:
            action.triggered.connect(lambda _checked=False, handler=handler: handler())
        if spec.separator_before:
            menus[spec.menu].addSeparator()
        menus[spec.menu].addAction(action)
        window.addAction(action)  # shortcuts work while the menu bar is hidden (full screen)
        actions[spec.id] = action
    return actions, menus


class ShortcutsDialog(QDialog):
    """Help → Keyboard shortcuts: the table above, as the user sees it."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        rows = [s for s in ACTIONS if s.shortcut]
        extra = [("Data", "Move between thumbnails", "Arrow keys"),
                 ("Data", "Show the thumbnail in the inspector", "Enter"),
                 ("Importance", "Move between gallery images", "Arrow keys"),
                 ("Importance", "Show the gallery image in the input inspector", "Enter"),
                 ("Coverage", "Move between a cell's inputs", "Arrow keys"),
                 ("Coverage", "Inspect the input in the Importance view", "Enter")]
        table = QTableWidget(len(rows) + len(extra), 3)
        table.setObjectName("shortcutsTable")
        table.setHorizontalHeaderLabels(["Menu", "Action", "Shortcut"])
        table.verticalHeader().setVisible(False)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        for r, spec in enumerate(rows):
            keys = QKeySequence(spec.shortcut).toString(QKeySequence.SequenceFormat.NativeText)
            for c, text in enumerate((spec.menu, plain(spec.text), keys)):
                table.setItem(r, c, QTableWidgetItem(text))
        for r, texts in enumerate(extra, start=len(rows)):
            for c, text in enumerate(texts):
                table.setItem(r, c, QTableWidgetItem(text))
        table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        table.horizontalHeader().setStretchLastSection(True)
        table.setSortingEnabled(True)
        table.sortByColumn(0, Qt.SortOrder.AscendingOrder)  # Qt's default indicator would sort descending
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(table)
        layout.addWidget(buttons)
        self.table = table
        self.resize(520, 520)
