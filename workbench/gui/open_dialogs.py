"""Dialogs that add a user's model file or dataset to the project.

The model dialog asks for the architecture when the file holds only weights, and offers an
explicit "I trust this file" box: without it a pickled model is refused (loading a pickle can run
code from the file). Both dialogs only collect choices; loading happens in a job.
"""

from __future__ import annotations

import os

from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout,
                               QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget)

from workbench.gui.colors import ERROR_TEXT

# The names only: importing torchvision here would slow the dialog down.
TORCHVISION_SETS = ("MNIST", "FashionMNIST", "KMNIST", "CIFAR10", "CIFAR100", "SVHN")
MODEL_FILTER = "Models (*.pt *.pth *.pt2 *.jit *.safetensors);;All files (*)"
DATASET_FILTER = "Datasets (*.npz *.h5 *.hdf5);;All files (*)"


def _path_row(edit: QLineEdit, *buttons: QPushButton) -> QHBoxLayout:
    row = QHBoxLayout()
    row.addWidget(edit, 1)
    for button in buttons:
        row.addWidget(button)
    return row


class OpenModelDialog(QDialog):
    """With `load(choices) -> job`, Open loads the file and the dialog closes only once it has loaded:
    a file that fails keeps the dialog open with the path, the choices and what went wrong."""

    def __init__(self, architectures: list[str], parent: QWidget | None = None, path: str = "", load=None):
        super().__init__(parent)
        self._load = load
        self.setWindowTitle("Open model file")
        self.path = QLineEdit(path)
        self.path.setPlaceholderText("/path/to/model.pt")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        self._architectures = [None] + list(architectures)
        self.arch = QComboBox()
        self.arch.addItem("Read it from the file, or infer it from the weights")
        self.arch.addItems(list(architectures))
        self.arch.setToolTip("For plain weights (a state_dict or .safetensors) that fit more than one architecture")
        self.name = QLineEdit()
        self.name.setPlaceholderText("default: from the file")
        self.trust = QCheckBox("I trust this file")
        self.trust.setObjectName("trustCheckBox")
        warning = QLabel("A file that holds a pickled model can run code when it is loaded. Tick the box only "
                         "for files from a source you trust; plain weights, TorchScript and torch.export files "
                         "never need it.")
        warning.setWordWrap(True)
        self.error = QLabel()
        self.error.setObjectName("openModelError")
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color: {ERROR_TEXT.name()};")
        self.error.hide()
        form = QFormLayout()
        form.addRow("File", _path_row(self.path, browse))
        form.addRow("Architecture", self.arch)
        form.addRow("Name in the project", self.name)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.path.textChanged.connect(self._update)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.trust)
        layout.addWidget(warning)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)
        self.setMinimumWidth(520)
        self._loading = False
        self._update()

    def accept(self) -> None:
        if self._load is None:
            super().accept()
            return
        self._loading = True
        self.error.hide()
        self._update()
        job = self._load(self.choices())
        job.finished.connect(lambda _result: self._loaded())
        job.failed.connect(self._failed)
        job.cancelled.connect(lambda: self._failed(Exception("The loading was cancelled.")))

    def reject(self) -> None:
        self._load_cancelled = True  # a load still running ends without touching the closed dialog
        super().reject()

    def _loaded(self) -> None:
        if not getattr(self, "_load_cancelled", False):
            super().accept()

    def _failed(self, exc: BaseException) -> None:
        if getattr(self, "_load_cancelled", False):
            return
        self._loading = False
        message, hint = getattr(exc, "message", str(exc)), getattr(exc, "hint", "")
        self.error.setText(f"<b>{message}</b>" + (f"<br>{hint}" if hint else ""))
        self.error.show()
        self._update()
        self.adjustSize()  # room for the message: the dialog must not cut it off

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open model file", self.path.text(), MODEL_FILTER)
        if path:
            self.path.setText(path)

    def _update(self) -> None:
        button = self.buttons.button(QDialogButtonBox.StandardButton.Open)
        button.setEnabled(bool(self.path.text().strip()) and not self._loading)
        button.setText("Loading…" if self._loading else "Open")

    def choices(self) -> dict:
        """path, arch (None: from the file), trust, name (None: from the file)."""
        return {"path": self.path.text().strip(), "arch": self._architectures[self.arch.currentIndex()],
                "trust": self.trust.isChecked(), "name": self.name.text().strip() or None}


class OpenDatasetDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, path: str = ""):
        super().__init__(parent)
        self.setWindowTitle("Open dataset")
        self.path = QLineEdit(path)
        self.path.setPlaceholderText("an IDX folder, an image folder, or a .npz / .h5 file")
        file_button = QPushButton("File…")
        file_button.clicked.connect(self._browse_file)
        folder_button = QPushButton("Folder…")
        folder_button.clicked.connect(self._browse_folder)
        note = QLabel("Folders may hold MNIST-style IDX files or one sub-folder of images per class "
                      "(optionally under train/ and test/). Files: .npz with x and y (or x_train, y_train, "
                      "x_test, y_test), or .h5 with the same names.")
        note.setWordWrap(True)
        self.torchvision = QComboBox()
        self.torchvision.addItem("—")
        self.torchvision.addItems(list(TORCHVISION_SETS))
        self.torchvision.setToolTip("Read from the workbench's cache folder; nothing is downloaded unless you tick Download")
        self.download = QCheckBox("Download if it is not in the cache (needs network access)")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.path.textChanged.connect(self._update)
        self.torchvision.currentIndexChanged.connect(self._update)
        torchvision_form = QFormLayout()
        torchvision_form.addRow("Or a torchvision dataset", self.torchvision)
        torchvision_form.addRow("", self.download)
        layout = QVBoxLayout(self)
        layout.addLayout(_path_row(self.path, file_button, folder_button))
        layout.addWidget(note)
        layout.addLayout(torchvision_form)
        layout.addWidget(self.buttons)
        self._update()
        self.setMinimumWidth(520)

    def _browse_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open dataset file", self.path.text(), DATASET_FILTER)
        if path:
            self.path.setText(path)

    def _browse_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open dataset folder", self.path.text())
        if path:
            self.path.setText(path)

    def _update(self) -> None:
        from_torchvision = self.torchvision.currentIndex() > 0
        self.path.setEnabled(not from_torchvision)
        self.download.setEnabled(from_torchvision)
        ready = from_torchvision or bool(self.path.text().strip())
        self.buttons.button(QDialogButtonBox.StandardButton.Open).setEnabled(ready)

    def choice(self) -> str:
        """A path, or `torchvision:<Name>`."""
        if self.torchvision.currentIndex() > 0:
            return f"torchvision:{self.torchvision.currentText()}"
        return os.path.abspath(os.path.expanduser(self.path.text().strip()))

    def allow_download(self) -> bool:
        return self.torchvision.currentIndex() > 0 and self.download.isChecked()
