"""The inputs that fall in one coverage cell: thumbnails with true and predicted labels.

The grid is the Data view's virtualised `ThumbnailGrid` (nearest-neighbour thumbnails, red frame
when the prediction is wrong) over just the cell's inputs. A set picker chooses whose inputs to show
when several sets reach the cell. The current thumbnail is announced as `input_chosen(split, index)`
— the linked selection's input — and Enter, a double-click or the button ask for the input
inspector (`inspect_requested`).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from workbench.gui.widgets.empty_state import MessageOrContent
from workbench.gui.widgets.thumbnail_grid import ThumbnailGrid


class IndexedSplit:
    """Some inputs of a split, as the thumbnail model reads a split: labels, thumbnails, length."""

    def __init__(self, split, indices: np.ndarray):
        self.split = split
        self.indices = np.asarray(indices, dtype=np.int64)  # ascending: lazily read files want that
        self.labels = np.asarray(split.labels)[self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def thumbnails(self, rows) -> np.ndarray:
        return self.split.thumbnails(self.indices[np.asarray(rows, dtype=np.int64)])


class CellInputs(QWidget):
    """`show_inputs(title, sets)`, where each set is (key, title, split name, Split, indices, predictions)."""

    set_changed = Signal(str)  # the key of the set whose inputs are shown
    input_chosen = Signal(str, int)  # split name, index in that split
    inspect_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.sets: list[tuple] = []
        self.shown: IndexedSplit | None = None
        self.split_name = ""
        self.linked = True  # whether the shown inputs belong to the selected dataset
        self.class_names: list[str] = []
        self.cell_title = ""
        self.title = QLabel()
        self.title.setWordWrap(True)
        self.set_box = QComboBox()
        self.set_box.setToolTip("Whose inputs to show when more than one test set reaches the cell")
        self.set_box.activated.connect(self._on_set)
        self.inspect_button = QPushButton("Inspect in the Importance view")
        self.inspect_button.setToolTip("Show the current input in the input inspector (Enter or double-click)")
        self.inspect_button.clicked.connect(self.inspect_requested.emit)
        self.grid = ThumbnailGrid(image_size=56)
        self.grid.setObjectName("cellInputsGrid")
        self.grid.selectionModel().currentChanged.connect(self._on_current)
        self.grid.activated.connect(lambda _: self.inspect_requested.emit())
        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        head.addWidget(QLabel("Inputs of"))
        head.addWidget(self.set_box)
        head.addWidget(self.inspect_button)
        content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(head)
        layout.addWidget(self.grid, 1)
        self.stack = MessageOrContent(content)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.stack, 1)
        self.show_message("No cell chosen", "Click a cell of a matrix to see the inputs that fall in it.")

    def show_message(self, title: str, text: str = "", busy: bool = False, actions=()) -> None:
        self.sets, self.shown = [], None
        self.stack.show_message(title, text, list(actions), busy=busy)

    def show_inputs(self, title: str, sets: list[tuple], chosen: str | None = None) -> None:
        """Each set: (key, title, split name, Split, indices, predictions or None, linked)."""
        self.cell_title = title
        self.sets = list(sets)
        self.set_box.blockSignals(True)
        self.set_box.clear()
        for key, set_title, _, _, indices, _, _ in self.sets:
            self.set_box.addItem(f"{set_title} ({len(indices):,})", key)
        keys = [s[0] for s in self.sets]
        with_inputs = [s[0] for s in self.sets if len(s[4])]
        start = chosen if chosen in keys and chosen in with_inputs else (with_inputs[0] if with_inputs else chosen)
        self.set_box.setCurrentIndex(keys.index(start) if start in keys else 0)
        self.set_box.blockSignals(False)
        self.stack.show_content()
        self._show_current()

    def _on_set(self, _index: int) -> None:
        self._show_current()
        self.set_changed.emit(self.set_box.currentData())

    def _show_current(self) -> None:
        i = self.set_box.currentIndex()
        if not 0 <= i < len(self.sets):
            return
        _, _set_title, split_name, split, indices, predictions, linked = self.sets[i]
        self.split_name, self.linked = split_name, linked
        self.shown = IndexedSplit(split, np.sort(np.asarray(indices, dtype=np.int64)))
        order = np.argsort(np.asarray(indices, dtype=np.int64), kind="stable")
        shown_predictions = None if predictions is None else np.asarray(predictions)[order]
        self.grid.thumbnails.set_split(self.shown, self.class_names, shown_predictions)
        wrong = self.grid.thumbnails.wrong_count()
        note = ""
        if wrong is not None and len(indices):
            note = f" · {wrong:,} misclassified"
        elif predictions is None and len(indices):
            note = " · the model's predictions are not known yet"
        self.title.setText(f"<b>{self.cell_title}</b>{note}")
        self.inspect_button.setEnabled(bool(len(indices)) and linked)
        if len(indices):
            self.grid.setCurrentIndex(self.grid.thumbnails.index(0))

    def set_class_names(self, names: list[str]) -> None:
        self.class_names = list(names)

    def shown_indices(self) -> np.ndarray:
        """Split indices of the inputs on show, in the grid's order."""
        return self.shown.indices.copy() if self.shown is not None else np.zeros(0, np.int64)

    def current_set(self) -> str | None:
        return self.set_box.currentData()

    def _on_current(self, current, _previous) -> None:
        if self.shown is None or not current.isValid() or not self.linked:
            return
        row = int(self.grid.thumbnails.rows[current.row()])
        self.input_chosen.emit(self.split_name, int(self.shown.indices[row]))

    def rows(self) -> tuple[list[str], list[list]]:
        """CSV: the inputs on show — split, index, true and predicted class."""
        model = self.grid.thumbnails
        indices = self.shown_indices()
        rows = []
        for row in range(model.rowCount()):
            prediction = model.prediction_at(row)
            rows.append([self.split_name, int(indices[model.rows[row]]), model.class_name(model.label_at(row)),
                         "" if prediction is None else model.class_name(prediction)])
        return ["split", "index", "true_class", "predicted_class"], rows
