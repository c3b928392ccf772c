"""The Model view: what the selected model is, its layers, and how it does on the selected split.

The layer catalogue comes with the model (read off a dry run in the loading job). The evaluation
(accuracy, per-class accuracy, confusion matrix) runs as a job when the model and the dataset fit
each other; the evaluation job stores it in the project, and it is reused while the weights are unchanged.
"""

from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QPushButton, QSplitter,
                               QStackedWidget, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from workbench.gui.plotting.colors import ERROR_TEXT
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.widgets.class_bars import ClassBars
from workbench.gui.widgets.empty_state import EmptyState, MessageOrContent, keep_space_when_hidden
from workbench.gui.widgets.export import ExportButton
from workbench.gui.widgets.heatmap import Heatmap
from workbench.gui.widgets.view_area import lay_out_while_hidden

LAYER_COLUMNS = ["Layer", "Type", "Output shape", "Neurons", "Parameters", "Activation"]
PREPARE_AFTER_MS = 300  # a hidden view gets a result ready once the window is quiet again
PREPARE_STEP_MS = 1  # one step of it per turn of the event loop


class NumberItem(QTableWidgetItem):
    """A table cell that sorts by its number, not its text."""

    def __init__(self, value: int, text: str | None = None):
        super().__init__(text if text is not None else f"{value:,}")
        self.value = value
        self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def __lt__(self, other):
        return self.value < other.value if isinstance(other, NumberItem) else super().__lt__(other)


def section_label(text: str) -> QLabel:
    label = QLabel(text)
    label.setStyleSheet("font-weight: bold; margin-top: 4px")
    return label


class ModelView(QWidget):
    open_model_requested = Signal()
    train_requested = Signal()

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("modelView")
        self.session, self.selection = session, selection
        self.result: dict | None = None  # the evaluation the matrix and bars show
        self._preparing: dict | None = None  # the one being got ready while the view is hidden
        self._layers_of: tuple | None = None  # (name, fingerprint) of the model the table lists

        self.title = QLabel()
        font = self.title.font()
        font.setPointSizeF(font.pointSizeF() * 1.4)
        font.setBold(True)
        self.title.setFont(font)
        self.subtitle = QLabel()
        self.subtitle.setWordWrap(True)
        self.subtitle.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.evaluate_button = QPushButton("Evaluate again")
        self.evaluate_button.setToolTip("Recompute accuracy and the confusion matrix on the selected split")
        self.evaluate_button.clicked.connect(lambda: self.evaluate(force=True))
        head = QHBoxLayout()
        titles = QVBoxLayout()
        titles.addWidget(self.title)
        titles.addWidget(self.subtitle)
        head.addLayout(titles, 1)
        head.addWidget(self.evaluate_button, 0, Qt.AlignmentFlag.AlignTop)

        self.layers = QTableWidget(0, len(LAYER_COLUMNS))
        self.layers.setObjectName("layerTable")
        self.layers.setHorizontalHeaderLabels(LAYER_COLUMNS)
        self.layers.verticalHeader().setVisible(False)
        self.layers.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.layers.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.layers.setAlternatingRowColors(True)
        self.layers.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.layers.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.layers.horizontalHeader().setStretchLastSection(True)
        self.layers_note = QLabel()
        self.layers_note.setWordWrap(True)
        keep_space_when_hidden(self.layers_note)  # the per-class bars below stay put when it comes or goes
        self.bars_title = section_label("Per-class accuracy")
        self.bars = ClassBars()
        self.bars.setMinimumHeight(220)
        self.bars_note = QLabel("Appears once the model has been evaluated.")
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(section_label("Layers"))
        left_layout.addWidget(self.layers, 3)
        left_layout.addWidget(self.layers_note)
        left_layout.addWidget(self.bars_title)
        left_layout.addWidget(self.bars, 3)
        left_layout.addWidget(self.bars_note)

        self.accuracy = QLabel()
        self.accuracy.setObjectName("accuracyLabel")
        font = self.accuracy.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        self.accuracy.setFont(font)
        self.class_order = QLabel()  # said when another class order explains the matrix far better
        self.class_order.setObjectName("classOrderWarning")
        self.class_order.setWordWrap(True)
        self.class_order.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.class_order.setStyleSheet(f"color: {ERROR_TEXT.name()}")
        self.class_order.setVisible(False)
        self.heatmap = Heatmap(units="images", describe=self._describe_cell)
        self.heatmap.setMinimumSize(360, 320)
        self.export = ExportButton(lambda: self.heatmap.scene(), self._confusion_rows, "confusion-matrix")
        self.evaluation_empty = EmptyState()
        self.evaluation_stack = QStackedWidget()
        self.evaluation_stack.addWidget(self.evaluation_empty)
        self.evaluation_stack.addWidget(self.heatmap)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        top.addWidget(section_label("Confusion matrix"))
        top.addStretch(1)
        top.addWidget(self.export)
        right_layout.addLayout(top)
        right_layout.addWidget(self.accuracy)
        right_layout.addWidget(self.class_order)
        right_layout.addWidget(self.evaluation_stack, 1)

        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        splitter.setSizes([560, 620])
        content = QWidget()
        content_layout = QVBoxLayout(content)
        content_layout.setContentsMargins(0, 0, 0, 0)
        content_layout.addLayout(head)
        content_layout.addWidget(splitter, 1)

        self.stack = MessageOrContent(content)
        self.empty = self.stack.empty
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 6, 6, 6)
        outer.addWidget(self.stack)

        selection.changed.connect(lambda what: what in ("model", "dataset", "split") and self.refresh())
        for signal in (session.model_loaded, session.model_failed, session.dataset_loaded, session.dataset_failed):
            signal.connect(lambda _: self.refresh())
        session.evaluation_ready.connect(lambda _: self.refresh())
        session.evaluation_failed.connect(lambda _: self.refresh())
        session.project_changed.connect(self.refresh)
        session.ready.connect(self.refresh)
        self.refresh()

    # --- state ----------------------------------------------------------------------------------------

    def key(self):
        return self.selection.model, self.selection.dataset, self.selection.split

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh()

    def refresh(self) -> None:
        name = self.selection.model
        if name is None:
            self.empty.show_message("No model in this project",
                                    "Open a model file, add a bundled model from the Project menu, or train one.",
                                    [("Open model file…", self.open_model_requested.emit),
                                     ("Train a model", self.train_requested.emit)])
            self.stack.setCurrentWidget(self.empty)
            return
        bundle = self.session.models.get(name)
        if bundle is None:
            error = self.session.model_errors.get(name)
            if error is not None:
                self.empty.show_message(f"{name} could not be loaded",
                                        f"{getattr(error, 'message', error)}\n{getattr(error, 'hint', '')}".strip(),
                                        [("Try again", lambda: self.session.load_model(name)),
                                         ("Open another model file…", self.open_model_requested.emit)])
            else:
                self.empty.show_message(f"Loading {name}…", "Reading the weights and listing the layers (see Jobs).",
                                        busy=True)
                self.session.load_model(name)
            self.stack.setCurrentWidget(self.empty)
            return
        self._show_model(name, bundle)
        self.stack.setCurrentIndex(1)
        self._show_evaluation()

    def _show_model(self, name: str, bundle) -> None:
        info, card = bundle.model.info, bundle.model.info.card or {}
        self.title.setText(name)
        parts = [info.arch or "custom architecture", f"{bundle.parameters:,} parameters", info.format]
        if info.input_shape:
            parts.append("input " + "×".join(map(str, info.input_shape)))
        if card.get("dataset"):
            trained = f"trained on {card['dataset']}"
            if card.get("epochs"):
                trained += f" for {card['epochs']} epochs"
            parts.append(trained)
        if card.get("test_accuracy") is not None:
            parts.append(f"card: {card['test_accuracy'] * 100:.1f} % test accuracy")
        self.subtitle.setText(" · ".join(parts) + f"\n{info.source}")
        self.subtitle.setToolTip(card.get("title", ""))
        if self._layers_of != (name, bundle.fingerprint):
            self._fill_layers(bundle)
            self._layers_of = (name, bundle.fingerprint)

    def _fill_layers(self, bundle) -> None:
        catalogue = bundle.catalogue
        self.layers.setSortingEnabled(False)
        self.layers.setRowCount(len(catalogue))
        for r, layer in enumerate(catalogue):
            shape = "×".join(map(str, layer.output_shape)) if layer.output_shape else "—"
            cells = [QTableWidgetItem(layer.name), QTableWidgetItem(layer.type), QTableWidgetItem(shape),
                     NumberItem(layer.neurons), NumberItem(layer.parameters),
                     QTableWidgetItem(layer.activation or "")]
            for c, cell in enumerate(cells):
                self.layers.setItem(r, c, cell)
        # No sort column until the user clicks a header: the table starts in execution order.
        self.layers.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.layers.setSortingEnabled(True)
        self.layers_note.setText(bundle.catalogue_error)
        self.layers_note.setVisible(bool(bundle.catalogue_error))

    def _show_evaluation(self) -> None:
        model, dataset, split = self.key()
        result = self.session.evaluation(model, dataset, split)
        self.evaluate_button.setEnabled(dataset is not None and not self.session.is_evaluating(model, dataset, split))
        if result is not None:
            self._show_result(result)
            return
        self.result = None
        self.accuracy.setText("")
        self.class_order.setVisible(False)
        self.bars.setVisible(False)
        self.bars_note.setVisible(True)
        self.evaluation_stack.setCurrentWidget(self.evaluation_empty)
        self.export.setEnabled(False)
        empty = self.evaluation_empty
        if dataset is None:
            empty.show_message("No dataset to evaluate on", "Add a dataset from the Project menu.")
            return
        title = self.session.dataset_title(dataset)
        if dataset not in self.session.datasets:
            error = self.session.dataset_errors.get(dataset)
            if error is not None:
                empty.show_message(f"{title} could not be loaded", getattr(error, "message", str(error)),
                                   [("Try again", lambda: self.session.load_dataset(dataset))])
            else:
                empty.show_message(f"Loading {title}…", busy=True)
                self.session.load_dataset(dataset)
            return
        problem = self.session.compatibility_problem(model, dataset)
        if problem:
            empty.show_message("This model does not fit this dataset", problem +
                               "\nChoose a dataset the model was made for in the tool bar.")
            return
        error = self.session.evaluation_errors.get((model, dataset, split))
        if error is not None:
            empty.show_message("The evaluation failed", f"{getattr(error, 'message', error)}\n"
                               f"{getattr(error, 'hint', '')}".strip(), [("Try again", lambda: self.evaluate(True))])
            return
        empty.show_message(f"Evaluating {model} on {title} {split}…",
                           "Accuracy, per-class accuracy and the confusion matrix appear when it finishes (see Jobs).",
                           busy=True)
        self.evaluate()

    def _show_result(self, result: dict) -> None:
        model, dataset, split = self.key()
        data = self.session.datasets[dataset]
        names = list(data.class_names)
        confusion = np.asarray(result["confusion"])
        n, correct = int(confusion.sum()), int(np.trace(confusion))
        self.accuracy.setText(f"<b>{result['accuracy'] * 100:.1f} %</b> correct — {correct:,} of {n:,} "
                              f"{split} images of {data.name}" + (" · stored result" if result.get("stored") else ""))
        warning = result.get("class_order_warning")
        if warning:
            self.class_order.setText(f"<b>Class order?</b> {html.escape(warning['message'])}<br>"
                                     f"{html.escape(warning['hint'])}")
        self.class_order.setVisible(bool(warning))
        self.export.setEnabled(True)
        self.bars.setVisible(True)
        self.bars_note.setVisible(False)
        self.bars_title.setText(f"Per-class accuracy on {data.name} {split}")
        self.evaluation_stack.setCurrentWidget(self.heatmap)
        if self.result is result:
            return
        if self.isVisible():
            self._draw(result, names)
        elif self._preparing is not result:
            self._preparing = result
            QTimer.singleShot(PREPARE_AFTER_MS, self, lambda: self._prepare(result, names, [
                lambda: lay_out_while_hidden(self), lambda: self._draw_matrix(result, names),
                lambda: self._draw_bars(result, names)]))

    def _draw(self, result: dict, names: list[str]) -> None:
        self._draw_matrix(result, names)
        self._draw_bars(result, names)

    def _draw_matrix(self, result: dict, names: list[str]) -> None:
        self.heatmap.set_matrix(np.asarray(result["confusion"]), names, names)

    def _draw_bars(self, result: dict, names: list[str]) -> None:
        """The last part drawn: the view shows `result` from here on."""
        self.bars.set_values(names, [result["per_class_accuracy"].get(c) for c in names])
        self.result = result

    def _prepare(self, result: dict, names: list[str], steps: list) -> None:
        """Get a result ready while the view is hidden, one step per turn of the event loop: lay the
        view out at the size it will be shown at, then draw the matrix, then the bars. Showing the view then
        lays out and computes nothing, and only paints: its first show had taken 12 ms of layout and
        drawing and 25 ms of painting in one turn, and drawing into a view never laid out 40 ms."""
        if not steps or self.isVisible() or self._preparing is not result:
            return  # done, shown meanwhile (the show draws it), or another result came
        steps[0]()
        QTimer.singleShot(PREPARE_STEP_MS, self, lambda: self._prepare(result, names, steps[1:]))

    def evaluate(self, force: bool = False) -> None:
        model, dataset, split = self.key()
        if model is None or dataset is None:
            return
        if not force and ((model, dataset, split) in self.session.evaluation_errors
                          or self.session.compatibility_problem(model, dataset)):
            return
        self.session.evaluate(model, dataset, split, force=force)
        if force:
            self.evaluate_button.setEnabled(False)

    # --- read-outs and export -----------------------------------------------------------------------

    def _describe_cell(self, row: int, col: int, value: float) -> str:
        names = self.heatmap.row_labels
        total = self.heatmap.matrix[row].sum()
        share = f" ({100 * value / total:.1f} % of the {names[row]} images)" if total else ""
        verdict = "correct" if row == col else "confused"
        return (f"True <b>{names[row]}</b> → predicted <b>{names[col]}</b>: {value:,.0f} images{share} · "
                f"{verdict}")

    def _confusion_rows(self):
        names = self.heatmap.row_labels
        rows = [[name] + [int(v) for v in self.heatmap.matrix[r]] for r, name in enumerate(names)]
        return ["true \\ predicted"] + names, rows
