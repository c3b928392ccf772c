"""The Training view: train a zoo architecture on a project dataset and watch its curves live.

Training runs as a job; each finished epoch arrives as a partial result and adds a point to the
loss and accuracy curves. The trained model is saved into the project's `models/` folder (only once
training and its final evaluation completed) and joins the project. When nothing is training, the
view shows the training history of the selected model from its model card, if it has one.
"""

from __future__ import annotations

import re

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit,
                               QPushButton, QSpinBox, QStackedWidget, QVBoxLayout, QWidget)

from workbench.core.errors import WorkbenchError
from workbench.core.models.architectures import architectures
from workbench.gui.session.jobs import Job
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.widgets.empty_state import EmptyState
from workbench.gui.widgets.error_dialog import report_error
from workbench.gui.widgets.export import ExportButton
from workbench.gui.widgets.jobs_panel import format_seconds
from workbench.gui.widgets.training_curves import TrainingCurves


class TrainingView(QWidget):
    trained = Signal(str)  # the new model's name, once it joined the project
    remembered = ("epochs", "batch_size", "lr", "seed")  # kept in the project (gui/session/view_settings.py)

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("trainingView")
        self.session, self.selection = session, selection
        self.job: Job | None = None
        self._arch_names: list[str] = []
        self._datasets: list[str] = []

        self.arch_box = QComboBox()
        self.dataset_box = QComboBox()
        self.dataset_box.currentIndexChanged.connect(self._on_dataset_chosen)
        self.epochs = QSpinBox()
        self.epochs.setRange(1, 500)
        self.epochs.setValue(5)
        self.batch_size = QSpinBox()
        self.batch_size.setRange(1, 8192)
        self.batch_size.setValue(128)
        self.lr = QDoubleSpinBox()
        self.lr.setDecimals(5)
        self.lr.setRange(1e-5, 1.0)
        self.lr.setSingleStep(1e-4)
        self.lr.setValue(1e-3)
        self.seed = QSpinBox()
        self.seed.setRange(0, 2 ** 31 - 1)
        self.name = QLineEdit()
        self.name.setPlaceholderText("name of the new model")
        self._name_edited = False
        self.name.textEdited.connect(lambda _: setattr(self, "_name_edited", True))
        self.arch_box.currentIndexChanged.connect(self._suggest_name)

        form = QFormLayout()
        form.addRow("Architecture", self.arch_box)
        form.addRow("Dataset", self.dataset_box)
        form.addRow("Epochs", self.epochs)
        form.addRow("Batch size", self.batch_size)
        form.addRow("Learning rate (Adam)", self.lr)
        form.addRow("Seed", self.seed)
        form.addRow("Save as", self.name)
        self.train_button = QPushButton("Train")
        self.train_button.setObjectName("trainButton")
        self.train_button.setDefault(True)
        self.train_button.clicked.connect(self.start_training)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.stop_button.setToolTip("Cancel training; nothing is saved")
        self.stop_button.clicked.connect(self.stop_training)
        buttons = QHBoxLayout()
        buttons.addWidget(self.train_button)
        buttons.addWidget(self.stop_button)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.status = QLabel()
        self.status.setObjectName("trainingStatus")
        self.status.setWordWrap(True)
        box = QGroupBox("New training run")
        box_layout = QVBoxLayout(box)
        box_layout.addLayout(form)
        box_layout.addLayout(buttons)
        box_layout.addWidget(self.note)
        box_layout.addWidget(self.status)
        box_layout.addStretch(1)
        box.setFixedWidth(330)

        self.header = QLabel()
        self.header.setWordWrap(True)
        font = self.header.font()
        font.setBold(True)
        self.header.setFont(font)
        self.curves = TrainingCurves()
        self.export = ExportButton(lambda: self.curves.scene(), self.curves.csv_rows, "training-curves")
        self.empty = EmptyState()
        self.plot_stack = QStackedWidget()
        self.plot_stack.addWidget(self.empty)
        self.plot_stack.addWidget(self.curves)
        top = QHBoxLayout()
        top.addWidget(self.header, 1)
        top.addWidget(self.export)
        right = QVBoxLayout()
        right.addLayout(top)
        right.addWidget(self.plot_stack, 1)

        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(box)
        layout.addLayout(right, 1)

        selection.changed.connect(self._on_selection)
        session.project_changed.connect(self._fill_datasets)
        session.dataset_loaded.connect(lambda spec: spec == self.current_dataset() and self._fill_architectures())
        session.model_loaded.connect(lambda name: name == selection.model and self._show_history())
        self._fill_datasets()
        self._show_history()

    # --- form -------------------------------------------------------------------------------------------

    def current_dataset(self) -> str | None:
        i = self.dataset_box.currentIndex()
        return self._datasets[i] if 0 <= i < len(self._datasets) else None

    def current_arch(self) -> str | None:
        i = self.arch_box.currentIndex()
        return self._arch_names[i] if 0 <= i < len(self._arch_names) else None

    def _fill_datasets(self) -> None:
        datasets = list(self.session.project.datasets)
        titles = [self.session.dataset_title(spec) for spec in datasets]
        shown = [self.dataset_box.itemText(i) for i in range(self.dataset_box.count())]
        if datasets and datasets == self._datasets and titles == shown:
            return  # a save that left the project's datasets as they were (most do)
        keep = self.current_dataset() or self.selection.dataset
        self._datasets = datasets
        self.dataset_box.blockSignals(True)
        self.dataset_box.clear()
        for spec, title in zip(datasets, titles):
            self.dataset_box.addItem(title)
            self.dataset_box.setItemData(self.dataset_box.count() - 1, spec, Qt.ItemDataRole.ToolTipRole)
        if keep in self._datasets:
            self.dataset_box.setCurrentIndex(self._datasets.index(keep))
        self.dataset_box.blockSignals(False)
        self._on_dataset_chosen()

    def _on_dataset_chosen(self, *_) -> None:
        spec = self.current_dataset()
        if spec is not None and spec not in self.session.datasets and spec not in self.session.dataset_errors:
            self.session.load_dataset(spec)
        self._fill_architectures()

    def _fill_architectures(self) -> None:
        """Only architectures whose input shape matches the dataset's images can be chosen."""
        dataset = self.session.datasets.get(self.current_dataset())
        keep = self.current_arch() or "lenet5"
        self.arch_box.blockSignals(True)
        self.arch_box.clear()
        self._arch_names = []
        for arch in architectures():
            if dataset is not None and tuple(arch.input_shape) != tuple(dataset.image_shape):
                continue
            self._arch_names.append(arch.name)
            self.arch_box.addItem(arch.name)
            self.arch_box.setItemData(self.arch_box.count() - 1, arch.description, Qt.ItemDataRole.ToolTipRole)
        if keep in self._arch_names:
            self.arch_box.setCurrentIndex(self._arch_names.index(keep))
        self.arch_box.blockSignals(False)
        self._suggest_name()
        self._update_buttons()

    def _suggest_name(self, *_) -> None:
        if self._name_edited:
            return
        arch, spec = self.current_arch(), self.current_dataset()
        if arch and spec:
            base = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{arch}-{self.session.dataset_title(spec)}")
            self.name.setText(self.session.unique_model_name(base))

    def _update_buttons(self) -> None:
        running = self.job is not None and self.job.record.active
        dataset_ready = self.current_dataset() in self.session.datasets
        self.train_button.setEnabled(not running and dataset_ready and self.current_arch() is not None)
        self.stop_button.setEnabled(running)
        spec = self.current_dataset()
        if spec is None:
            self.note.setText("Add a dataset to the project first.")
        elif not dataset_ready:
            error = self.session.dataset_errors.get(spec)
            self.note.setText(f"{getattr(error, 'message', error)}" if error else "Loading the dataset…")
        elif self.current_arch() is None:
            self.note.setText("No architecture takes images of this dataset's shape.")
        else:
            self.note.setText(f"The model is saved to {self.session.project.folder / 'models'} and joins the project.")

    # --- training ------------------------------------------------------------------------------------------

    def start_training(self) -> None:
        arch, spec, name = self.current_arch(), self.current_dataset(), self.name.text().strip()
        try:
            if spec not in self.session.datasets or arch is None:
                raise WorkbenchError("There is nothing to train on yet.", self.note.text())
            if not name or not re.fullmatch(r"[A-Za-z0-9._-]+", name):
                raise WorkbenchError(f"“{name}” cannot be a model name.",
                                     "Use letters, digits, dots, dashes and underscores.")
            job = self.session.train(arch, spec, self.epochs.value(), self.batch_size.value(), self.lr.value(),
                                     self.seed.value(), name)
        except WorkbenchError as exc:
            report_error(self, exc)
            return
        self.job = job
        self.curves.reset()
        self.plot_stack.setCurrentWidget(self.curves)
        self.header.setText(f"Training {arch} on {self.session.dataset_title(spec)} → {name}")
        self.status.setText("Starting…")
        job.progress.connect(self._on_progress)
        job.partial.connect(self.curves.add_epoch)
        job.finished.connect(lambda result: self._on_trained(result))
        job.failed.connect(lambda exc: self._on_stopped(f"Training failed: {getattr(exc, 'message', exc)}"))
        job.cancelled.connect(lambda: self._on_stopped("Training was cancelled; nothing was saved."))
        self._update_buttons()

    def stop_training(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.status.setText("Stopping…")

    def _on_progress(self, done: int, total: int, message: str) -> None:
        r = self.job.record
        eta = f", about {format_seconds(r.eta)} left" if r.eta is not None else ""
        self.status.setText(f"{message.capitalize()} — {100 * done / max(1, total):.0f} % "
                            f"({format_seconds(r.elapsed)}{eta})")

    def _on_trained(self, result) -> None:
        """`result` is core `train_and_save`'s (model, card); the model joins the project under the card's name."""
        _, card = result
        name = card["name"]
        accuracy = card.get("test_accuracy")
        self.status.setText(f"Saved {name} ({format_seconds(self.job.record.elapsed)})"
                            + (f", test accuracy {accuracy * 100:.1f} %" if accuracy is not None else "")
                            + ". It is now in the project.")
        self._name_edited = False
        self._update_buttons()
        self._suggest_name()
        if self.session.model_entry(name) is not None:
            self.selection.set_model(name)
            self.trained.emit(name)

    def _on_stopped(self, text: str) -> None:
        self.status.setText(text)
        self._update_buttons()

    # --- history of the selected model ----------------------------------------------------------------

    def _on_selection(self, what: str) -> None:
        if what == "dataset" and self.selection.dataset in self._datasets and not self._training():
            self.dataset_box.setCurrentIndex(self._datasets.index(self.selection.dataset))
        if what == "model":
            self._show_history()

    def _training(self) -> bool:
        return self.job is not None and self.job.record.active

    def _show_history(self) -> None:
        """Without a run in progress or just finished, show the selected model's recorded curves."""
        if self.job is not None:
            return
        name = self.selection.model
        bundle = self.session.models.get(name) if name else None
        card = bundle.model.info.card if bundle is not None else {}
        history = card.get("history") or []
        if history:
            self.curves.set_history(history)
            self.plot_stack.setCurrentWidget(self.curves)
            labels = {"optimiser": "{}", "lr": "learning rate {}", "batch_size": "batch {}", "seed": "seed {}"}
            how = ", ".join(text.format(card[k]) for k, text in labels.items() if card.get(k) is not None)
            self.header.setText(f"Training history of {name} (from its model card: {len(history)} epochs"
                                + (f", {how}" if how else "") + ")")
            self.export.setEnabled(True)
        else:
            self.header.setText("")
            self.export.setEnabled(False)
            self.empty.show_message("No training curves yet",
                                    "Choose an architecture and a dataset on the left and press Train: loss and "
                                    "accuracy appear here after every epoch."
                                    + (f"\n{name} has no recorded training history." if name else ""),
                                    [("Train", self.start_training)])
            self.plot_stack.setCurrentWidget(self.empty)
