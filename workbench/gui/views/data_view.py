"""The Data view: browse a dataset split as a thumbnail grid, filter by class and by outcome.

It follows the shared selection (dataset, split, model). When the selected model has been
evaluated on the split, each thumbnail shows the prediction under the true label and a red frame
where they differ; the outcome filter then shows only the misclassified (or the correct) images.
"""

from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QIcon, QImage, QPixmap
from PySide6.QtWidgets import (QComboBox, QFormLayout, QFrame, QHBoxLayout, QLabel, QMenu, QSlider,
                               QSplitter, QToolButton, QVBoxLayout, QWidget)

from workbench.core.data.class_names import class_index_text
from workbench.gui.plotting.colors import ERROR_TEXT, MISMATCH, class_color
from workbench.gui.plotting.staged_paint import StagedPaint
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.widgets.empty_state import MessageOrContent
from workbench.gui.widgets.export import export_csv, save_as, save_pixmap
from workbench.gui.widgets.thumbnail_grid import OUTCOMES, ThumbnailGrid

OUTCOME_LABELS = {"all": "All images", "wrong": "Misclassified only", "right": "Correctly classified only"}
ZOOMS = (2, 3, 4, 5, 6)  # whole-number magnifications keep nearest-neighbour pixels square
CLASSES_SHOWN = 30  # classes the mapping line names; its tooltip lists up to CLASSES_LISTED
CLASSES_LISTED = 100


def swatch_icon(index: int) -> QIcon:
    pixmap = QPixmap(10, 10)
    pixmap.fill(class_color(index))
    return QIcon(pixmap)


class Inspector(QFrame):
    """One image, large, with its index, true label and prediction."""

    SIZE = 224

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setMinimumWidth(self.SIZE + 24)
        self.image = QLabel()
        self.image.setFixedSize(self.SIZE, self.SIZE)
        self.image.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.title = QLabel("No image selected")
        self.title.setStyleSheet("font-weight: bold")
        self.truth = QLabel("Click a thumbnail, or move with the arrow keys.")
        self.truth.setWordWrap(True)
        self.prediction = QLabel()
        self.prediction.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.title)
        layout.addWidget(self.image, 0, Qt.AlignmentFlag.AlignHCenter)
        form = QFormLayout()
        form.addRow("True class:", self.truth)
        form.addRow("Predicted:", self.prediction)
        layout.addLayout(form)
        layout.addStretch(1)

    def show_image(self, image: QImage | None, title: str = "", truth: str = "", prediction: str = "",
                   wrong: bool = False) -> None:
        if image is None:
            self.image.clear()
            self.title.setText("No image selected")
            self.truth.setText("")
            self.prediction.setText("")
            return
        scale = max(1, self.SIZE // max(image.width(), image.height()))
        self.image.setPixmap(QPixmap.fromImage(image.scaled(image.width() * scale, image.height() * scale,
                                                            Qt.AspectRatioMode.KeepAspectRatio,
                                                            Qt.TransformationMode.FastTransformation)))
        self.title.setText(title)
        self.truth.setText(truth)
        self.prediction.setText(prediction or "— (not evaluated yet)")
        self.prediction.setStyleSheet(f"color: {MISMATCH.name()}; font-weight: bold" if wrong else "")


class DataView(QWidget):
    remembered = ("class_box", "outcome_box", "zoom")  # kept in the project (gui/session/view_settings.py)

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("dataView")
        self.session, self.selection = session, selection
        self.dataset = None
        self.shown_split = ""
        self._class_of_item: list[int | None] = []

        self.class_box = QComboBox()
        self.class_box.setMinimumWidth(180)
        self.class_box.setToolTip("Show only images whose true class is this one")
        self.class_box.currentIndexChanged.connect(self._apply_filter)
        self.outcome_box = QComboBox()
        self.outcome_box.addItems([OUTCOME_LABELS[o] for o in OUTCOMES])
        self.outcome_box.setToolTip("Needs predictions: evaluate the selected model on this split")
        self.outcome_box.setEnabled(False)  # until there are predictions
        self.outcome_box.currentIndexChanged.connect(self._apply_filter)
        self.zoom = QSlider(Qt.Orientation.Horizontal)
        self.zoom.setRange(0, len(ZOOMS) - 1)
        self.zoom.setValue(1)
        self.zoom.setFixedWidth(90)
        self.zoom.setToolTip("Thumbnail size")
        self.zoom.valueChanged.connect(self._apply_zoom)
        self.zoom_label = QLabel()
        self.export_button = QToolButton()
        self.export_button.setText("Export")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_button)
        menu.addAction("Shown images as CSV…", self._export_csv)
        menu.addAction("Visible thumbnails as PNG…", self._export_png)
        self.export_button.setMenu(menu)

        controls = QHBoxLayout()
        for text, widget in (("Class", self.class_box), ("Show", self.outcome_box)):
            label = QLabel(text)
            label.setBuddy(widget)
            controls.addWidget(label)
            controls.addWidget(widget)
            controls.addSpacing(8)
        controls.addWidget(QLabel("Size"))
        controls.addWidget(self.zoom)
        controls.addWidget(self.zoom_label)
        controls.addStretch(1)
        controls.addWidget(self.export_button)

        # Which index is which class: a model trained with another numbering scores as if it guessed.
        self.classes_label = QLabel()
        self.classes_label.setObjectName("classesLabel")
        self.classes_label.setTextFormat(Qt.TextFormat.PlainText)
        self.classes_label.setWordWrap(True)
        self.classes_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.count_label = QLabel()
        self.count_label.setObjectName("countLabel")
        self.predictions_label = QLabel()
        self.predictions_label.setObjectName("predictionsLabel")
        self.predictions_label.setTextFormat(Qt.TextFormat.RichText)
        self.predictions_label.linkActivated.connect(lambda _: self.request_predictions())
        info = QHBoxLayout()
        info.addWidget(self.count_label)
        info.addStretch(1)
        info.addWidget(self.predictions_label)

        self.grid = ThumbnailGrid()
        self.grid.setObjectName("thumbnailGrid")
        self.grid.selectionModel().currentChanged.connect(self._on_current)
        self.grid.activated.connect(lambda _: self.inspector.setVisible(True))
        self.grid.thumbnails.filter_changed.connect(self._update_counts)
        self.inspector = Inspector()
        splitter = QSplitter()
        splitter.addWidget(self.grid)
        splitter.addWidget(self.inspector)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 0)
        splitter.setCollapsible(0, False)

        content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(controls)
        layout.addWidget(self.classes_label)
        layout.addLayout(info)
        layout.addWidget(splitter, 1)
        self.stack = MessageOrContent(content)
        self.empty = self.stack.empty
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 6, 6, 6)
        outer.addWidget(self.stack)
        self.staged = StagedPaint(self)  # a new split's first screen paints in a turn of its own

        selection.changed.connect(self._on_selection)
        session.dataset_loaded.connect(lambda spec: spec == selection.dataset and self.refresh())
        session.dataset_failed.connect(lambda spec: spec == selection.dataset and self.refresh())
        session.testset_loaded.connect(lambda key: tuple(key) == (selection.dataset, selection.split) and self.refresh())
        session.evaluation_ready.connect(self._on_evaluation)
        session.evaluation_failed.connect(self._on_evaluation)
        session.model_loaded.connect(lambda name: name == selection.model and self._update_predictions())
        session.runner.job_added.connect(lambda job: self._update_predictions_label())
        self._apply_zoom()
        self.refresh()

    # --- following the selection ----------------------------------------------------------------------

    def _on_selection(self, what: str) -> None:
        if what == "model":
            self._update_predictions()
        elif what in ("dataset", "split"):
            self.refresh()

    def refresh(self) -> None:
        spec = self.selection.dataset
        if spec is None:
            self.empty.show_message("No dataset in this project",
                                    "Add one from Project → Add dataset.", [])
            self.stack.setCurrentWidget(self.empty)
            return
        if spec not in self.session.datasets:
            error = self.session.dataset_errors.get(spec)
            if error is not None:
                self.empty.show_message(f"{self.session.dataset_title(spec)} could not be loaded",
                                        f"{getattr(error, 'message', error)}\n{getattr(error, 'hint', '')}".strip(),
                                        [("Try again", lambda: self.session.load_dataset(spec))])
            else:
                self.empty.show_message(f"Loading {self.session.dataset_title(spec)}…",
                                        "The images appear as soon as the dataset is read (see Jobs).", busy=True)
                self.session.load_dataset(spec)
            self.stack.setCurrentWidget(self.empty)
            return
        dataset = self.session.datasets[spec]
        splits = [s for s in dataset.splits if len(dataset.splits[s])]
        stored = [info.name for info in self.session.stored_testsets(spec)]
        split = self.selection.split if self.selection.split in splits + stored else splits[0]
        data = self.session.inputs(spec, split)
        if data is None:  # a stored test set, being read (or unreadable)
            error = self.session.testset_errors.get((spec, split))
            if error is not None:
                self.empty.show_message(f"Test set {split} could not be read",
                                        f"{getattr(error, 'message', error)}\n{getattr(error, 'hint', '')}".strip())
            else:
                self.empty.show_message(f"Reading test set {split}…", "Its images appear as soon as it is read.",
                                        busy=True)
            self.stack.setCurrentWidget(self.empty)
            return
        self._show_dataset(dataset, split, data)
        self.stack.setCurrentIndex(1)

    def _show_dataset(self, dataset, split: str, data) -> None:
        """Show `data` (a split of `dataset`, or a stored test set labelled with its classes)."""
        if dataset is self.dataset and split == self.shown_split:
            self._update_predictions()
            return
        new_dataset = dataset is not self.dataset
        self.dataset, self.shown_split = dataset, split
        self._fill_class_box(dataset, data, keep=not new_dataset)
        if new_dataset:
            self._show_classes(dataset)
        self.grid.thumbnails.set_split(data, dataset.class_names, self._predictions())
        if new_dataset:
            self._apply_zoom()
        self._apply_filter()
        self.grid.scrollToTop()
        if self.grid.thumbnails.rowCount():
            self.grid.setCurrentIndex(self.grid.thumbnails.index(0))
        self._update_predictions()
        self.staged.stage(self.stack)  # the first screen of thumbnails paints in a turn of its own

    def _fill_class_box(self, dataset, data, keep: bool) -> None:
        previous = self.class_box.currentIndex() if keep else 0
        counts = np.bincount(data.labels, minlength=dataset.num_classes)
        self.class_box.blockSignals(True)
        self.class_box.clear()
        self.class_box.addItem(f"All classes ({len(data):,})", "all")
        self._class_of_item = [None]
        for k, name in enumerate(dataset.class_names):
            self.class_box.addItem(swatch_icon(k), f"{name} ({counts[k]:,})", k)  # the class: remembered by it
            self._class_of_item.append(k)
        self.class_box.setCurrentIndex(previous if 0 <= previous < self.class_box.count() else 0)
        self.class_box.blockSignals(False)

    def _show_classes(self, dataset) -> None:
        source = f", numbered by {dataset.class_source}" if dataset.class_source else ""
        self.classes_label.setText(f"Classes{source}: {class_index_text(dataset.class_names, CLASSES_SHOWN)}")
        names = list(dataset.class_names)
        rows = "".join(f"<tr><td align='right'>{i}</td><td>{html.escape(name)}</td></tr>"
                       for i, name in enumerate(names[:CLASSES_LISTED]))
        more = f"<br>… and {len(names) - CLASSES_LISTED} more" if len(names) > CLASSES_LISTED else ""
        self.classes_label.setToolTip(f"<b>Index → class</b>{html.escape(source)}<table>{rows}</table>{more}<br>"
                                      "A model must number the classes the same way.")

    # --- predictions --------------------------------------------------------------------------------

    def _key(self):
        return (self.selection.model, self.selection.dataset, self.shown_split)

    def _predictions(self):
        if self.selection.model is None:
            return None
        result = self.session.evaluation(*self._key())
        return None if result is None else result["predictions"]

    def _on_evaluation(self, key) -> None:
        if tuple(key) == self._key():
            self._update_predictions()

    def _update_predictions(self) -> None:
        if self.dataset is None:
            return
        self.grid.thumbnails.set_predictions(self._predictions())
        has = self.grid.thumbnails.predictions is not None
        self.outcome_box.setEnabled(has)
        if not has and self.outcome_box.currentIndex() != 0:
            self.outcome_box.setCurrentIndex(0)
        self._update_predictions_label()
        if not self.grid.currentIndex().isValid() and self.grid.thumbnails.rowCount():
            self.grid.setCurrentIndex(self.grid.thumbnails.index(0))
        self._on_current(self.grid.currentIndex())

    def _update_predictions_label(self) -> None:
        model = self.selection.model
        if self.dataset is None:
            return
        # The grid may still show the predictions of the split shown before (switching datasets after
        # reopening a project): the label speaks of the current split's evaluation only.
        result = self.session.evaluation(*self._key()) if model is not None else None
        if model is None:
            text = "No model selected: add one to see predictions."
        elif result is not None and self.grid.thumbnails.predictions is not None:
            text = (f"Predictions of <b>{model}</b>: {result['accuracy'] * 100:.1f} % correct"
                    + (" (stored result)" if result.get("stored") else ""))
            warning = result.get("class_order_warning")
            if warning:
                text += (f" <span style='color: {ERROR_TEXT.name()}'>· another class order would give "
                         f"{warning['permuted_accuracy'] * 100:.1f} %: see the Model view</span>")
        elif self.session.is_evaluating(*self._key()):
            text = f"Predicting with <b>{model}</b>… (see Jobs)"
        else:
            problem = self.session.compatibility_problem(model, self.selection.dataset)
            error = self.session.evaluation_errors.get(self._key()) or self.session.model_errors.get(model)
            if problem:
                text = f"No predictions: {problem}"
            elif error is not None:
                text = f"Predictions failed: {getattr(error, 'message', error)} <a href='predict'>Try again</a>"
            else:
                text = f"No predictions yet. <a href='predict'>Predict with {model}</a>"
        self.predictions_label.setText(text)

    def request_predictions(self) -> None:
        model, dataset, split = self._key()
        if model is not None and dataset is not None:
            self.session.evaluate(model, dataset, split)
            self._update_predictions_label()

    # --- filters, counts, inspector -----------------------------------------------------------------

    def _apply_filter(self) -> None:
        index = self.class_box.currentIndex()
        class_index = self._class_of_item[index] if 0 <= index < len(self._class_of_item) else None
        self.grid.thumbnails.set_filter(class_index, OUTCOMES[max(0, self.outcome_box.currentIndex())])
        if self.grid.thumbnails.rowCount():
            self.grid.setCurrentIndex(self.grid.thumbnails.index(0))
        else:
            self.inspector.show_image(None)

    def _apply_zoom(self) -> None:
        factor = ZOOMS[self.zoom.value()]
        side = max(self.dataset.image_shape[1:]) if self.dataset is not None else 28
        self.grid.set_image_size(side * factor)
        self.zoom_label.setText(f"{factor}×")

    def _update_counts(self) -> None:
        model = self.grid.thumbnails
        text = f"Showing {len(model.rows):,} of {model.total:,} images"
        wrong = model.wrong_count()
        if wrong is not None and len(model.rows):
            text += f" · {wrong:,} misclassified ({100 * wrong / len(model.rows):.1f} %)"
        self.count_label.setText(text)

    def _on_current(self, index: QModelIndex, _previous: QModelIndex | None = None) -> None:
        model = self.grid.thumbnails
        if not index.isValid() or index.row() >= len(model.rows):
            self.inspector.show_image(None)
            return
        row = index.row()
        i = int(model.rows[row])
        if self.isVisible():  # what the user looks at, not a refill behind the scenes, goes to the inspector
            self.selection.set_input(self.shown_split, i)
        label, prediction = model.label_at(row), model.prediction_at(row)
        self.inspector.show_image(
            model.image(row), f"Image #{i:,} of {self.dataset.name} {self.shown_split}",
            model.class_name(label), "" if prediction is None else model.class_name(prediction),
            wrong=prediction is not None and prediction != label)

    # --- export -------------------------------------------------------------------------------------

    def _export_csv(self) -> None:
        save_as(self, "Export", f"{self.dataset.name}-{self.shown_split}.csv", "CSV table (*.csv)",
                lambda path: export_csv(self.rows_for_export, path))

    def rows_for_export(self) -> tuple[list[str], list[list]]:
        model = self.grid.thumbnails
        header = ["index", "true_class", "true_name"]
        if model.predictions is not None:
            header += ["predicted_class", "predicted_name"]
        rows = []
        for i in model.rows:
            row = [int(i), int(model.labels[i]), model.class_name(int(model.labels[i]))]
            if model.predictions is not None:
                row += [int(model.predictions[i]), model.class_name(int(model.predictions[i]))]
            rows.append(row)
        return header, rows

    def _export_png(self) -> None:
        save_as(self, "Export", f"{self.dataset.name}-{self.shown_split}.png", "PNG image (*.png)",
                lambda path: save_pixmap(self.grid.viewport().grab(), path))
