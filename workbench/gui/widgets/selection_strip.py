"""The candidates a selection strategy picked, as thumbnails: a horizontal strip or a compact grid.

Each cell shows the adversarial image (nearest-neighbour, whole-number scale: no blur), its
true label with the class colour, "→ adversarial prediction" in red under a red frame (a candidate
is a successful adversarial, so the two differ), and a third line with its FOL value and the attack
that made it. The cells are sorted by FOL (ascending by default: BE-ST's two ends sit at the two
ends of the strip). Clicking a cell, or pressing Enter on it, emits `candidate_clicked(index)`.

It reuses the data view's virtualised thumbnail grid (`thumbnail_grid.py`): a list model that turns
images into small `QImage`s a block at a time and a delegate that paints them, with a third
caption line added here. So a budget of 12,000 candidates scrolls like 12.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QListView,
    QStyle,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from workbench.gui.widgets.empty_state import MessageOrContent
from workbench.gui.widgets.fol_histogram import format_value
from workbench.gui.widgets.thumbnail_grid import (
    ThumbnailDelegate,
    ThumbnailGrid,
    ThumbnailModel,
)

SORTS = {"fol_ascending": "FOL ascending", "fol_descending": "FOL descending", "given": "Selection order"}


def as_display_images(images) -> np.ndarray:
    """Images as uint8 N×H×W×C (C = 1 or 3) for display, from float N×H×W or N×C×H×W in [0, 1]
    (values outside are clipped, NaN shows black) or from uint8 arrays of those shapes."""
    array = np.asarray(images)
    if array.ndim == 3:
        array = array[:, None]
    if array.ndim != 4:
        raise ValueError(f"images must be N×H×W or N×C×H×W, not of shape {array.shape}")
    if array.shape[1] not in (1, 3) and array.shape[3] in (1, 3):
        array = array.transpose(0, 3, 1, 2)  # N×H×W×C was given
    if array.dtype != np.uint8:
        array = np.clip(np.rint(np.nan_to_num(array.astype(np.float32), nan=0.0) * 255.0), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(array.transpose(0, 2, 3, 1))


class _Candidates:
    """The "split" the thumbnail model reads: labels, `thumbnails(index)` and a length."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def thumbnails(self, index) -> np.ndarray:
        return as_display_images(self.images[index])


class SelectionModel(ThumbnailModel):
    """Rows are selected candidates in the chosen sort order; the adversarial prediction is the
    model's "prediction" (so the base delegate frames it red), the FOL and attack a third caption."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.fol = np.zeros(0)
        self.attacks: list[str] = []
        self.indices = np.zeros(0, np.int64)  # what `candidate_clicked` reports for each candidate
        self.fol_name = "FOL∞"
        self.sort = "fol_ascending"

    def set_candidates(self, images, fol, labels, predictions, attacks: Sequence[str] | str | None,
                       class_names: Sequence[str], indices=None, fol_name: str = "FOL∞") -> None:
        labels = np.asarray(labels, dtype=np.int64).ravel()
        n = len(labels)
        images = np.asarray(images)
        fol = np.asarray(fol, dtype=np.float64).ravel()
        predictions = np.asarray(predictions, dtype=np.int64).ravel()
        if isinstance(attacks, str) or attacks is None:
            attacks = [attacks or ""] * n
        indices = np.arange(n) if indices is None else np.asarray(indices, dtype=np.int64).ravel()
        lengths = {"images": len(images), "fol": len(fol), "labels": n, "predictions": len(predictions),
                   "attacks": len(attacks), "indices": len(indices)}
        if len(set(lengths.values())) != 1:
            raise ValueError("the candidates' arrays differ in length: "
                             + ", ".join(f"{k} {v}" for k, v in lengths.items()))
        self.fol, self.attacks, self.indices, self.fol_name = fol, list(attacks), indices, fol_name
        self.set_split(_Candidates(images, labels), list(class_names), predictions)

    def set_sort(self, sort: str) -> None:
        if sort not in SORTS:
            raise ValueError(f"sort must be one of {list(SORTS)}")
        if sort == self.sort:
            return
        self.beginResetModel()
        self.sort = sort
        self.rows = self._filtered_rows()
        self.endResetModel()
        self.filter_changed.emit()

    def _filtered_rows(self) -> np.ndarray:
        rows = super()._filtered_rows()
        if self.sort == "given" or len(self.fol) != self.total:
            return rows
        key = self.fol[rows]
        key = np.where(np.isnan(key), np.inf, key)  # NaN FOL last either way
        order = np.argsort(key if self.sort == "fol_ascending" else np.where(np.isinf(key), -np.inf, -key),
                           kind="stable")
        return rows[order]

    def candidate(self, row: int) -> int:
        """The index `candidate_clicked` reports for the candidate shown at `row`."""
        return int(self.indices[self.rows[row]])

    def caption_at(self, row: int) -> str:
        i = int(self.rows[row])
        attack = self.attacks[i]
        return format_value(float(self.fol[i])) + (f" · {attack}" if attack else "")

    def data(self, index, role: int = Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.ToolTipRole and index.isValid() and index.row() < len(self.rows):
            i = int(self.rows[index.row()])
            attack = f" by {self.attacks[i]}" if self.attacks[i] else ""
            return (f"Candidate #{int(self.indices[i]):,}{attack}<br>"
                    f"true: <b>{self.class_name(int(self.labels[i]))}</b> → adversarial prediction: "
                    f"<b>{self.class_name(int(self.predictions[i]))}</b><br>"
                    f"{self.fol_name}: {format_value(float(self.fol[i]))}<br>Click or press Enter to inspect it")
        return super().data(index, role)


class SelectionDelegate(ThumbnailDelegate):
    """The thumbnail grid's cell with a third line: FOL value · attack."""

    min_width = 0  # wide enough for the widest caption (set with the candidates)

    def cell_size(self, option_font_height: int) -> QSize:
        size = super().cell_size(option_font_height)
        return QSize(max(size.width(), self.min_width), size.height() + option_font_height + 1)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index) -> None:
        super().paint(painter, option, index)
        model: SelectionModel = index.model()
        fm = option.fontMetrics
        line_h = fm.height() + 1
        rect = option.rect
        y = rect.y() + 2 * self.PAD + self.image_size + 2 * line_h
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        color = QColor(option.palette.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text))
        color.setAlphaF(0.8)
        painter.save()
        painter.setPen(color)
        width = rect.width() - 2 * self.PAD
        painter.drawText(QRect(rect.x() + self.PAD, y, width, line_h),
                         Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         fm.elidedText(model.caption_at(index.row()), Qt.TextElideMode.ElideRight, width))
        painter.restore()


class CandidateGrid(ThumbnailGrid):
    """The thumbnail grid on a `SelectionModel`; Enter emits `entered(row)`."""

    entered = Signal(int)

    def __init__(self, parent=None, image_size: int = 84):
        super().__init__(parent, image_size)
        self.thumbnails = SelectionModel(self)
        self.delegate = SelectionDelegate(self, image_size)
        self.setModel(self.thumbnails)
        self.setItemDelegate(self.delegate)
        self.setSelectionMode(QListView.SelectionMode.SingleSelection)

    def keyPressEvent(self, event) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.currentIndex().isValid():
            self.entered.emit(self.currentIndex().row())
            return
        super().keyPressEvent(event)

    def cell_height(self) -> int:
        return self.delegate.cell_size(self.fontMetrics().height()).height()


class SelectionStrip(QWidget):
    """Thumbnails of the selected candidates with FOL, label → adversarial prediction and attack.

    - `set_candidates(images, fol, labels, predictions, attacks, class_names, indices=None,
      title="", fol_name="FOL∞")`: images N×H×W or N×C×H×W in [0, 1]; `attacks` one name per
      candidate or one for all; `indices` what clicks report (default: positions 0…N−1).
    - `set_sort("fol_ascending" | "fol_descending" | "given")`, `set_wrapping(grid)`: a strip
      scrolling sideways (default) or a wrapping grid.
    - `candidate_clicked(index)`: a thumbnail was clicked or Enter pressed on it.
    - `clear_candidates(title, text)`: the empty state.
    """

    candidate_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None, image_size: int = 84, wrapping: bool = False):
        super().__init__(parent)
        self.title = QLabel()
        self.title.setStyleSheet("font-weight: bold")
        self.sort_box = QComboBox()
        for key, text in SORTS.items():
            self.sort_box.addItem(text, key)
        self.sort_box.setToolTip("Order of the thumbnails")
        self.sort_box.currentIndexChanged.connect(lambda _: self.set_sort(self.sort_box.currentData()))
        self.grid = CandidateGrid(image_size=image_size)
        self.grid.setObjectName("selectionThumbnails")
        self.grid.clicked.connect(lambda index: self._emit(index.row()))
        self.grid.entered.connect(self._emit)
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.title, 1)
        header.addWidget(QLabel("Sort:"))
        header.addWidget(self.sort_box)
        content = QWidget()
        content_layout = QVBoxLayout(content)
        content_layout.setContentsMargins(0, 0, 0, 0)
        content_layout.addLayout(header)
        content_layout.addWidget(self.grid, 1)
        content_layout.addStretch(0)  # takes what a one-row strip leaves
        self.stack = MessageOrContent(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.stack)
        self.set_wrapping(wrapping)
        self.clear_candidates()

    @property
    def model(self) -> SelectionModel:
        return self.grid.thumbnails

    def set_candidates(self, images, fol, labels, predictions, attacks, class_names: Sequence[str],
                       indices=None, title: str = "", fol_name: str = "FOL∞") -> None:
        self.model.set_candidates(images, fol, labels, predictions, attacks, class_names, indices, fol_name)
        n = self.model.rowCount()
        self._fit_cells()
        if not n:
            self.clear_candidates()
            return
        self.title.setText(title or f"{n:,} selected candidates")
        self.title.setToolTip(f"Under each image: true label, → adversarial prediction, {fol_name} · attack")
        self.stack.show_content()
        self.grid.scrollToTop()

    def clear_candidates(self, title: str = "No candidates selected yet",
                         text: str = "Run a selection strategy (BE-ST, KM-ST, DeepGini, …) on the candidate pool; "
                                     "the candidates it picks are shown here, sorted by FOL.") -> None:
        self.model.set_candidates(np.zeros((0, 1, 1, 1), np.float32), [], [], [], [], [])
        self.stack.show_message(title, text)

    def _fit_cells(self) -> None:
        """Widen the cells to the widest FOL · attack caption (up to twice the image), so none is cut."""
        fm = self.grid.fontMetrics()
        rows = range(min(self.model.rowCount(), 2000))
        widest = max((fm.horizontalAdvance(self.model.caption_at(r)) for r in rows), default=0)
        delegate = self.grid.delegate
        delegate.min_width = min(widest + 2 * delegate.PAD + 2, 2 * delegate.image_size)
        if self.model.rowCount():
            delegate.sizeHintChanged.emit(self.model.index(0))

    def has_candidates(self) -> bool:
        return self.stack.currentWidget() is self.stack.content

    def set_sort(self, sort: str) -> None:
        self.model.set_sort(sort)
        i = self.sort_box.findData(sort)
        if i != self.sort_box.currentIndex():
            self.sort_box.setCurrentIndex(i)

    def set_wrapping(self, wrapping: bool) -> None:
        """A wrapping grid (True) or one row scrolling sideways (False)."""
        self.wrapping = wrapping
        self.grid.setWrapping(wrapping)
        self.grid.setFlow(QListView.Flow.LeftToRight)
        if wrapping:
            self.grid.setMaximumHeight(16777215)
            self.grid.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        else:
            bar = self.grid.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
            self.grid.setMaximumHeight(self.grid.cell_height() + bar + 2 * self.grid.frameWidth()
                                       + 2 * self.grid.spacing() + 2)
            self.grid.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)

    def shown_order(self) -> list[int]:
        """The candidates' indices in the order the thumbnails show them."""
        return [self.model.candidate(row) for row in range(self.model.rowCount())]

    def _emit(self, row: int) -> None:
        if 0 <= row < self.model.rowCount():
            self.candidate_clicked.emit(self.model.candidate(row))

    def visual_rect(self, position: int) -> QRect:
        """Where the thumbnail at `position` (in shown order) is, in the grid's viewport (tests)."""
        return self.grid.visualRect(self.model.index(position))

