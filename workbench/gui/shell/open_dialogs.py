"""Dialogs that add a user's model file or dataset to the project.

The model dialog asks for the architecture when the file holds only weights, and offers an
explicit "I trust this file" box: without it a pickled model is refused (loading a pickle can run
code from the file). Given a `load` callable, each dialog loads what it names itself (in a job) and
closes only once it has loaded: while it loads a busy bar runs and the window stays responsive, and
a failure is said inside the dialog, under the fields, with everything typed still there.
"""

from __future__ import annotations

import html
import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout,
                               QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QToolButton, QVBoxLayout,
                               QWidget)

from workbench.core.errors import WorkbenchError
from workbench.gui.plotting.colors import ERROR_TEXT
from workbench.gui.widgets.empty_state import keep_space_when_hidden
from workbench.gui.widgets.error_dialog import describe, report_error

# The names only: importing torchvision here would slow the dialog down.
TORCHVISION_SETS = ("MNIST", "FashionMNIST", "KMNIST", "CIFAR10", "CIFAR100", "SVHN")
MODEL_FILTER = "Models (*.pt *.pth *.pt2 *.jit *.safetensors);;All files (*)"
DATASET_FILTER = "Datasets (*.npz *.h5 *.hdf5);;All files (*)"


def _path_row(edit: QLineEdit, *buttons: QPushButton) -> QHBoxLayout:
    row = QHBoxLayout()
    row.addWidget(edit, 1)
    for button in buttons:
        button.setAutoDefault(False)  # Return in the path field opens the file; it never browses
        row.addWidget(button)
    return row


class LoadingDialog(QDialog):
    """An Open/Cancel dialog whose Open runs `start()` (a job, or None when nothing needs to run) and
    closes when the job finishes; a failure is shown in `error` and the dialog stays open. Cancel
    while loading cancels the job (a cancelled load adds nothing) and closes the dialog."""

    def __init__(self, parent: QWidget | None, load):
        super().__init__(parent)
        self._load = load
        self._job = None
        self._error: tuple[BaseException, str] | None = None  # the last failure, for Details…
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setTextFormat(Qt.TextFormat.RichText)
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)  # a path to copy
        self.error.setStyleSheet(f"color: {ERROR_TEXT.name()};")
        self.error.hide()
        self.details_button = QToolButton()
        self.details_button.setText("Details…")
        self.details_button.clicked.connect(self._show_details)
        self.details_button.hide()
        self.busy = keep_space_when_hidden(QProgressBar())  # the buttons stay put while it comes and goes
        self.busy.setRange(0, 0)
        self.busy.setTextVisible(False)
        self.busy.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        # Return always means Open, also once the locked fields handed the focus to Cancel while loading
        self.buttons.button(QDialogButtonBox.StandardButton.Cancel).setAutoDefault(False)
        self.buttons.button(QDialogButtonBox.StandardButton.Open).setDefault(True)

    def add_feedback(self, layout: QVBoxLayout) -> None:
        """Put the error, its Details button, the busy bar and the buttons at the end of `layout`."""
        layout.addWidget(self.error)
        layout.addWidget(self.details_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.busy)
        layout.addWidget(self.buttons)

    # --- what a dialog says ----------------------------------------------------------------------

    def load_arguments(self) -> tuple:
        """What `load` is called with: what the dialog names."""
        return ()

    def start(self):
        """Start loading what the dialog names: the job, or None when nothing needs to run."""
        return self._load(*self.load_arguments())

    def inputs(self) -> list[QWidget]:
        """The fields that are locked while a load runs: what loads is what they show."""
        return []

    def ready(self) -> bool:
        """Whether Open can be pressed (a path is typed, or a choice made)."""
        return True

    # --- loading ---------------------------------------------------------------------------------

    @property
    def loading(self) -> bool:
        return self._job is not None

    def accept(self) -> None:
        if self._load is None:  # only collecting choices: the caller loads
            super().accept()
            return
        if self.loading or not self.ready():
            return
        self.clear_error()
        try:
            job = self.start()
        except WorkbenchError as exc:  # refused before any job ran
            self._show_error(exc)
            return
        if job is None:  # already loaded (or it loads once start-up is over, and reports for itself)
            super().accept()
            return
        self._job = job
        job.finished.connect(self._loaded)
        job.failed.connect(self._failed)
        job.cancelled.connect(self._cancelled)
        self.update_buttons()

    def reject(self) -> None:
        job, self._job = self._job, None  # a load still running ends without touching the closed dialog
        if job is not None:
            job.cancel()
        super().reject()

    def _loaded(self, _result) -> None:
        if self._job is not None:
            self._job = None
            super().accept()

    def _failed(self, exc: BaseException) -> None:
        if self._job is not None:
            details = self._job.record.details
            self._job = None
            self._show_error(exc, details)

    def _cancelled(self) -> None:
        if self._job is not None:  # cancelled from elsewhere (the jobs panel, the window closing)
            self._job = None
            self._show_error(WorkbenchError("The loading was cancelled.", "Press Open to load it again."))

    def _show_error(self, exc: BaseException, details: str = "") -> None:
        message, hint, text = describe(exc, details)
        self._error = (exc, details)
        hint = f"<br>{html.escape(hint, quote=False)}" if hint else ""
        self.error.setText(f"<b>{html.escape(message, quote=False)}</b>{hint}")
        self.error.show()
        self.details_button.setVisible(bool(text))
        self.update_buttons()
        fields = [w for w in self.inputs() if w.isEnabled()]
        if fields:
            fields[0].setFocus()  # back where the user types the fix
        self.adjustSize()  # room for the message: the dialog must not cut it off

    def clear_error(self) -> None:
        """A changed path makes the message about the old one stale."""
        if self.error.isVisibleTo(self):
            self.error.hide()
            self.details_button.hide()
            self.adjustSize()

    def _show_details(self) -> None:
        """The technical text (what the file's reader said, a traceback) in the error dialog."""
        if self._error is not None:
            report_error(self, *self._error, title=f"{self.windowTitle()}: details")

    def update_buttons(self) -> None:
        loading = self.loading
        for widget in self.inputs():
            widget.setEnabled(not loading)
        self.busy.setVisible(loading)
        button = self.buttons.button(QDialogButtonBox.StandardButton.Open)
        button.setEnabled(self.ready() and not loading)
        button.setText("Loading…" if loading else "Open")
        button.setDefault(True)


class OpenModelDialog(LoadingDialog):
    """With `load(choices) -> job`, Open loads the file and the dialog closes only once it has loaded:
    a file that fails keeps the dialog open with the path, the choices and what went wrong."""

    def __init__(self, architectures: list[str], parent: QWidget | None = None, path: str = "", load=None):
        super().__init__(parent, load)
        self.setWindowTitle("Open model file")
        self.path = QLineEdit(path)
        self.path.setPlaceholderText("/path/to/model.pt")
        self.browse = QPushButton("Browse…")
        self.browse.clicked.connect(self._browse)
        self._architectures = [None] + list(architectures)
        self.arch = QComboBox()
        self.arch.addItem("Read it from the file, or infer it from the weights")
        self.arch.addItems(list(architectures))
        self.arch.setEditable(True)  # a model library's network is typed: torchvision:NAME, timm:NAME
        self.arch.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.arch.setToolTip("For plain weights (a state_dict or .safetensors) that fit more than one architecture, "
                             "or a library's network whose layers were changed: type torchvision:NAME (e.g. "
                             "torchvision:resnet18) or timm:NAME. Unchanged torchvision networks are recognised.")
        self.name = QLineEdit()
        self.name.setPlaceholderText("default: from the file")
        self.trust = QCheckBox("I trust this file")
        self.trust.setObjectName("trustCheckBox")
        warning = QLabel("A file that holds a pickled model can run code when it is loaded. Tick the box only "
                         "for files from a source you trust; plain weights, TorchScript and torch.export files "
                         "never need it.")
        warning.setWordWrap(True)
        self.error.setObjectName("openModelError")
        form = QFormLayout()
        form.addRow("File", _path_row(self.path, self.browse))
        form.addRow("Architecture", self.arch)
        form.addRow("Name in the project", self.name)
        self.path.textChanged.connect(self.clear_error)
        self.path.textChanged.connect(self.update_buttons)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.trust)
        layout.addWidget(warning)
        self.add_feedback(layout)
        self.setMinimumWidth(520)
        self.update_buttons()

    def load_arguments(self) -> tuple:
        return (self.choices(),)

    def inputs(self) -> list[QWidget]:
        return [self.path, self.browse, self.arch, self.name, self.trust]

    def ready(self) -> bool:
        return bool(self.path.text().strip())

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open model file", self.path.text(), MODEL_FILTER)
        if path:
            self.path.setText(path)

    def choices(self) -> dict:
        """path, arch (None: from the file), trust, name (None: from the file)."""
        typed = self.arch.currentText().strip()
        listed = self.arch.findText(typed)
        arch = self._architectures[listed] if listed >= 0 else typed or None
        return {"path": self.path.text().strip(), "arch": arch,
                "trust": self.trust.isChecked(), "name": self.name.text().strip() or None}


class OpenDatasetDialog(LoadingDialog):
    """With `load(spec, download) -> job | None`, Open loads the dataset and the dialog closes only
    once it has loaded: one that fails keeps the dialog open with the path and what went wrong."""

    def __init__(self, parent: QWidget | None = None, path: str = "", load=None):
        super().__init__(parent, load)
        self.setWindowTitle("Open dataset")
        self.path = QLineEdit(path)
        self.path.setPlaceholderText("an IDX folder, an image folder, or a .npz / .h5 file")
        self.file_button = QPushButton("File…")
        self.file_button.clicked.connect(self._browse_file)
        self.folder_button = QPushButton("Folder…")
        self.folder_button.clicked.connect(self._browse_folder)
        note = QLabel("Folders may hold MNIST-style IDX files or one sub-folder of images per class "
                      "(optionally under train/ and test/). Files: .npz with x and y (or x_train, y_train, "
                      "x_test, y_test), or .h5 with the same names.")
        note.setWordWrap(True)
        self.torchvision = QComboBox()
        self.torchvision.addItem("—")
        self.torchvision.addItems(list(TORCHVISION_SETS))
        self.torchvision.setToolTip("Read from the workbench's cache folder; nothing is downloaded unless you tick Download")
        self.download = QCheckBox("Download if it is not in the cache (needs network access)")
        self.error.setObjectName("openDatasetError")
        self.path.textChanged.connect(self.clear_error)
        self.path.textChanged.connect(self.update_buttons)
        self.torchvision.currentIndexChanged.connect(self.clear_error)
        self.torchvision.currentIndexChanged.connect(self.update_buttons)
        torchvision_form = QFormLayout()
        torchvision_form.addRow("Or a torchvision dataset", self.torchvision)
        torchvision_form.addRow("", self.download)
        layout = QVBoxLayout(self)
        layout.addLayout(_path_row(self.path, self.file_button, self.folder_button))
        layout.addWidget(note)
        layout.addLayout(torchvision_form)
        self.add_feedback(layout)
        self.update_buttons()
        self.setMinimumWidth(max(520, self.sizeHint().width()))  # the Download box's text shown whole

    def load_arguments(self) -> tuple:
        return self.choice(), self.allow_download()

    def inputs(self) -> list[QWidget]:
        return [self.path, self.file_button, self.folder_button, self.torchvision, self.download]

    def ready(self) -> bool:
        return self.torchvision.currentIndex() > 0 or bool(self.path.text().strip())

    def update_buttons(self) -> None:
        super().update_buttons()
        if not self.loading:  # a path or a torchvision set, never both
            from_torchvision = self.torchvision.currentIndex() > 0
            self.path.setEnabled(not from_torchvision)
            self.file_button.setEnabled(not from_torchvision)
            self.folder_button.setEnabled(not from_torchvision)
            self.download.setEnabled(from_torchvision)

    def _browse_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open dataset file", self.path.text(), DATASET_FILTER)
        if path:
            self.path.setText(path)

    def _browse_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open dataset folder", self.path.text())
        if path:
            self.path.setText(path)

    def choice(self) -> str:
        """A path, or `torchvision:<Name>`."""
        if self.torchvision.currentIndex() > 0:
            return f"torchvision:{self.torchvision.currentText()}"
        return os.path.abspath(os.path.expanduser(self.path.text().strip()))

    def allow_download(self) -> bool:
        return self.torchvision.currentIndex() > 0 and self.download.isChecked()
