"""A virtualised grid of image thumbnails: a list model over an index array and a painting delegate.

There is no widget and no pixmap per image. The model maps rows to dataset indices (the class and
outcome filters just swap that index array); it reads the pixels of a block of rows at a time and
turns each image into a tiny `QImage` when it is first asked for, keeping the most recently used in
bounded caches. The delegate paints each cell: the image scaled by a whole factor with
nearest-neighbour sampling (28×28 pixels stay sharp), the true label, the prediction, and a red frame
when the two differ; it keeps the cells it drew lately as pictures (a bounded cache), so a repaint
copies them. Cells are as wide as the widest class name needs (up to a bound), so "Ankle boot" and
"→ T-shirt/top" are shown whole, not elided. So 60,000 images scroll as smoothly as 60.

A frame of the window draws new cells for `FRAME_BUDGET_MS` at most (a screen of 35 new cells, as
when predictions arrive, took 15–19 ms of one frame); the cells past it show their previous picture,
or the background, until the next frames draw them. A grab draws every cell at once.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np
from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFontMetrics, QImage, QPainter, QPalette, QPen, QPixmap
from PySide6.QtWidgets import QAbstractItemView, QListView, QStyle, QStyledItemDelegate, QStyleOptionViewItem

from workbench.gui.plotting.colors import MISMATCH, class_color
from workbench.gui.plotting.frame_paint import painting_frame
from workbench.gui.plotting.staged_paint import STEP_MS

CACHE_IMAGES = 8192  # about 6 MB of 28×28 grey thumbnails; far more than a screen shows
CACHE_CELLS = 600  # drawn cells kept: a few screens' worth (at 84 px, about 20 MB)
BLOCK_ROWS = 256  # images converted per cache miss: one numpy call instead of 256
FRAME_BUDGET_MS = 6.0  # new cells drawn in one frame; the rest in the next frames

INDEX_ROLE = Qt.ItemDataRole.UserRole + 1
LABEL_ROLE = Qt.ItemDataRole.UserRole + 2
PREDICTION_ROLE = Qt.ItemDataRole.UserRole + 3
IMAGE_ROLE = Qt.ItemDataRole.UserRole + 4

OUTCOMES = ("all", "wrong", "right")


def to_qimage(pixels: np.ndarray) -> QImage:
    """One uint8 H×W×C image (C = 1 or 3) as a QImage that owns its memory."""
    h, w, c = pixels.shape
    fmt = QImage.Format.Format_Grayscale8 if c == 1 else QImage.Format.Format_RGB888
    data = np.ascontiguousarray(pixels if c == 3 else pixels[:, :, 0])
    return QImage(data.tobytes(), w, h, w * c, fmt).copy()


class ThumbnailModel(QAbstractListModel):
    """Rows are images of one split, optionally filtered by class and by prediction outcome."""

    filter_changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.split = None
        self.class_names: list[str] = []
        self.labels = np.zeros(0, np.int64)
        self.predictions: np.ndarray | None = None
        self.rows = np.zeros(0, np.int64)  # dataset index of each row
        self.class_filter: int | None = None
        self.outcome = "all"
        self._cache: OrderedDict[int, QImage] = OrderedDict()
        self._blocks: OrderedDict[int, tuple[dict, np.ndarray]] = OrderedDict()  # first row → (index → j, pixels)

    # --- content -----------------------------------------------------------------------------------

    def set_split(self, split, class_names: list[str], predictions: np.ndarray | None = None) -> None:
        """Show `split` (anything with `labels`, `thumbnails(index)` and `len`), keeping the filters."""
        self.beginResetModel()
        self.split = split
        self.class_names = list(class_names)
        self.labels = np.asarray(split.labels) if split is not None else np.zeros(0, np.int64)
        self.predictions = self._checked(predictions)
        self._cache.clear()
        self._blocks.clear()
        if self.class_filter is not None and self.class_filter >= len(self.class_names):
            self.class_filter = None
        self.rows = self._filtered_rows()
        self.endResetModel()
        self.filter_changed.emit()

    def set_predictions(self, predictions: np.ndarray | None) -> None:
        """Attach (or drop) one predicted class per image; the outcome filter applies from now on."""
        predictions = self._checked(predictions)
        if predictions is None and self.predictions is None:
            return
        if predictions is not None and self.predictions is not None and np.array_equal(predictions, self.predictions):
            return  # the same predictions again (a view refreshed): nothing to repaint
        self.predictions = predictions
        rows = self._filtered_rows()
        if np.array_equal(rows, self.rows):
            # Same rows: repaint them and keep the view's current item and scroll position.
            if len(rows):
                self.dataChanged.emit(self.index(0), self.index(len(rows) - 1))
        else:
            self.beginResetModel()
            self.rows = rows
            self.endResetModel()
        self.filter_changed.emit()

    def _checked(self, predictions):
        if predictions is None:
            return None
        predictions = np.asarray(predictions)
        return predictions if len(predictions) == len(self.labels) else None

    def set_filter(self, class_index: int | None = None, outcome: str = "all") -> None:
        """Keep only images of one true class (None: all) and/or of one outcome."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}")
        if (class_index, outcome) == (self.class_filter, self.outcome):
            return
        self.beginResetModel()
        self.class_filter, self.outcome = class_index, outcome
        self.rows = self._filtered_rows()
        self.endResetModel()
        self.filter_changed.emit()

    def _filtered_rows(self) -> np.ndarray:
        keep = np.ones(len(self.labels), dtype=bool)
        if self.class_filter is not None:
            keep &= self.labels == self.class_filter
        if self.outcome != "all" and self.predictions is not None:
            wrong = self.predictions != self.labels
            keep &= wrong if self.outcome == "wrong" else ~wrong
        return np.flatnonzero(keep)

    @property
    def total(self) -> int:
        return len(self.labels)

    def wrong_count(self) -> int | None:
        """Misclassified images among the rows shown, or None without predictions."""
        if self.predictions is None:
            return None
        return int((self.predictions[self.rows] != self.labels[self.rows]).sum())

    # --- Qt model ----------------------------------------------------------------------------------

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        i = int(self.rows[index.row()])
        if role == IMAGE_ROLE:
            return self.image(index.row())
        if role == INDEX_ROLE:
            return i
        if role == LABEL_ROLE:
            return int(self.labels[i])
        if role == PREDICTION_ROLE:
            return None if self.predictions is None else int(self.predictions[i])
        if role == Qt.ItemDataRole.ToolTipRole:
            text = f"#{i} · true: {self.class_name(int(self.labels[i]))}"
            if self.predictions is not None:
                text += f" · predicted: {self.class_name(int(self.predictions[i]))}"
            return text
        if role == Qt.ItemDataRole.AccessibleTextRole:
            return f"image {i}, {self.class_name(int(self.labels[i]))}"
        return None

    def label_at(self, row: int) -> int:
        return int(self.labels[self.rows[row]])

    def prediction_at(self, row: int) -> int | None:
        return None if self.predictions is None else int(self.predictions[self.rows[row]])

    def class_name(self, k: int) -> str:
        return self.class_names[k] if 0 <= k < len(self.class_names) else str(k)

    def image(self, row: int) -> QImage:
        """The thumbnail at `row`. A cache miss reads the pixels of the block of rows around it in one
        call and keeps them; each image becomes a `QImage` only when it is asked for (a screen shows a
        third of a block: converting the whole block was most of the first paint's time)."""
        i = int(self.rows[row])
        cached = self._cache.get(i)
        if cached is None:
            cached = self._cache[i] = to_qimage(self._pixels(row, i))
            while len(self._cache) > CACHE_IMAGES:
                self._cache.popitem(last=False)
        self._cache.move_to_end(i)
        return cached

    def _pixels(self, row: int, i: int) -> np.ndarray:
        """Image `i` (at `row`) as uint8 H×W×C, from the block of rows it is read with."""
        start = (row // BLOCK_ROWS) * BLOCK_ROWS
        block = self._blocks.get(start)
        if block is None or i not in block[0]:
            rows = self.rows[start:start + BLOCK_ROWS]
            order = np.argsort(rows, kind="stable")  # increasing indices: lazily read files need them
            read = self.split.thumbnails(rows[order])
            pixels = np.empty_like(read)
            pixels[order] = read
            block = self._blocks[start] = ({int(k): j for j, k in enumerate(rows)}, pixels)
            while len(self._blocks) > CACHE_IMAGES // BLOCK_ROWS:
                self._blocks.popitem(last=False)
        self._blocks.move_to_end(start)
        return block[1][block[0][i]]


SWATCH = 8  # px of the class-colour square before the true label
SWATCH_GAP = 4  # px between the swatch and the label
ARROW = "→ "  # before the prediction


def caption_width(fm: QFontMetrics, class_names) -> int:
    """Width a cell's captions need to show every class name whole: the true label after its swatch,
    and "→ name" for the prediction."""
    widest = max((fm.horizontalAdvance(name) for name in class_names), default=0)
    arrow = fm.horizontalAdvance(ARROW)
    return max(SWATCH + SWATCH_GAP + widest, arrow + widest) + 1


class ThumbnailDelegate(QStyledItemDelegate):
    """Paints one cell: image, true label (with its class colour), prediction, red frame if wrong."""

    PAD = 4
    MAX_WIDTH_FACTOR = 2.5  # a cell widens for long class names up to this many image widths (or 140 px)

    def __init__(self, parent=None, image_size: int = 84):
        super().__init__(parent)
        self.image_size = image_size
        self.text_width = 0  # what the captions need (`fit_captions`); the cell is at least this wide
        self._cells: OrderedDict[tuple, QPixmap] = OrderedDict()  # the look of a cell → its picture
        self._latest: dict[int, tuple] = {}  # dataset index → the look of its latest picture
        self._budget_ms: float | None = None  # this paint's time for new cells (None: no limit)
        self._spent_ms = 0.0
        self._drawn = 0  # new cells this paint
        self.deferred = False  # this paint left cells for a later one

    def start_paint(self, budget_ms: float | None) -> None:
        """A paint of the view begins: it may draw new cells for `budget_ms` (None: all of them)."""
        self._budget_ms, self._spent_ms, self._drawn, self.deferred = budget_ms, 0.0, 0, False

    def _over_budget(self) -> bool:
        """Past this paint's budget, with a cell drawn already: every paint makes progress."""
        return self._budget_ms is not None and self._drawn > 0 and self._spent_ms >= self._budget_ms

    def fit_captions(self, fm: QFontMetrics, class_names) -> None:
        """Make room for the widest class name in both caption lines (within `MAX_WIDTH_FACTOR`)."""
        self.text_width = caption_width(fm, class_names)

    def cell_width(self) -> int:
        bound = max(int(self.MAX_WIDTH_FACTOR * self.image_size), 140)
        return max(self.image_size, min(self.text_width, bound)) + 2 * self.PAD

    def cell_size(self, option_font_height: int) -> QSize:
        lines = 2 * (option_font_height + 1)
        return QSize(self.cell_width(), self.image_size + 2 * self.PAD + lines)

    def sizeHint(self, option: QStyleOptionViewItem, index) -> QSize:
        return self.cell_size(option.fontMetrics.height())

    def caption_rects(self, rect: QRect, fm: QFontMetrics) -> tuple[QRect, QRect, QRect]:
        """(swatch, true label, prediction) rectangles of the cell at `rect`."""
        line_h = fm.height() + 1
        y = rect.y() + 2 * self.PAD + self.image_size
        swatch = QRect(rect.x() + self.PAD, y + (line_h - SWATCH) // 2, SWATCH, SWATCH)
        text_left = rect.x() + self.PAD + SWATCH + SWATCH_GAP
        label = QRect(text_left, y, rect.x() + rect.width() - self.PAD - text_left, line_h)
        prediction = QRect(rect.x() + self.PAD, y + line_h, rect.width() - 2 * self.PAD, line_h)
        return swatch, label, prediction

    def captions(self, model, row: int, rect: QRect, fm: QFontMetrics) -> list[tuple[QRect, str]]:
        """The caption lines of the cell at `row` as painted: (rect, text), elided only past the bound."""
        _, label_rect, prediction_rect = self.caption_rects(rect, fm)
        lines = [(label_rect, model.class_name(model.label_at(row)))]
        prediction = model.prediction_at(row)
        if prediction is not None:
            lines.append((prediction_rect, ARROW + model.class_name(prediction)))
        return [(r, fm.elidedText(text, Qt.TextElideMode.ElideRight, r.width())) for r, text in lines]

    def forget_cells(self) -> None:
        """Drop the drawn cells (the model was reset, the image size changed)."""
        self._cells.clear()
        self._latest.clear()

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index) -> None:
        """Draw the cell from its picture, drawn once per look: a repaint (scrolling, hovering, the
        window's next frame) then costs one pixmap per cell instead of an image, texts and frames."""
        # Ask the Python model directly: reading an empty QVariant back through index.data()
        # drops a reference to None in PySide6 6.12 on Python 3.11, which eventually aborts.
        model: ThumbnailModel = index.model()
        row = index.row()
        rect = option.rect
        states = QStyle.StateFlag.State_Selected | QStyle.StateFlag.State_MouseOver
        key = (int(model.rows[row]), model.label_at(row), model.prediction_at(row), (option.state & states).value,
               rect.width(), rect.height(), option.palette.cacheKey(), option.font.key())
        cell = self._cells.get(key)
        if cell is None and self._over_budget():
            self.deferred = True
            latest = self._latest.get(key[0])
            cell = self._cells.get(latest) if latest is not None and latest[4:6] == key[4:6] else None
            if cell is None:  # nothing drawn for this image at this size yet
                painter.fillRect(rect, option.palette.color(QPalette.ColorRole.Base))
                return
        elif cell is None:
            started = time.perf_counter()
            ratio = painter.device().devicePixelRatioF()
            cell = QPixmap(round(rect.width() * ratio), round(rect.height() * ratio))
            cell.setDevicePixelRatio(ratio)
            cell.fill(option.palette.color(QPalette.ColorRole.Base))  # opaque: drawn as a copy, not blended
            at_origin = QStyleOptionViewItem(option)
            at_origin.rect = QRect(0, 0, rect.width(), rect.height())
            cell_painter = QPainter(cell)
            self._draw_cell(cell_painter, at_origin, model, row)
            cell_painter.end()
            self._cells[key] = cell
            self._latest[key[0]] = key
            while len(self._cells) > CACHE_CELLS:
                old, _ = self._cells.popitem(last=False)
                if self._latest.get(old[0]) == old:
                    del self._latest[old[0]]
            self._drawn += 1
            self._spent_ms += (time.perf_counter() - started) * 1000
        else:
            self._cells.move_to_end(key)
        painter.drawPixmap(rect.topLeft(), cell)

    def _draw_cell(self, painter: QPainter, option: QStyleOptionViewItem, model, row: int) -> None:
        image = model.image(row)
        label, prediction = model.label_at(row), model.prediction_at(row)
        rect, palette = option.rect, option.palette
        painter.save()
        if option.state & QStyle.StateFlag.State_Selected:
            painter.fillRect(rect, palette.color(QPalette.ColorRole.Highlight))
            text_color = palette.color(QPalette.ColorRole.HighlightedText)
        else:
            if option.state & QStyle.StateFlag.State_MouseOver:
                painter.fillRect(rect, palette.color(QPalette.ColorRole.AlternateBase))
            text_color = palette.color(QPalette.ColorRole.Text)

        # Whole-number scaling with nearest-neighbour sampling: no blur, every pixel the same size.
        scale = max(1, self.image_size // max(image.width(), image.height()))
        w, h = image.width() * scale, image.height() * scale
        box = QRect(rect.x() + (rect.width() - w) // 2, rect.y() + self.PAD + (self.image_size - h) // 2, w, h)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
        painter.drawImage(box, image)
        wrong = prediction is not None and prediction != label
        if wrong:
            painter.setPen(QPen(MISMATCH, 3))
            painter.drawRect(box.adjusted(-1, -1, 1, 1))

        fm = option.fontMetrics
        swatch = self.caption_rects(rect, fm)[0]
        painter.fillRect(swatch, class_color(label))
        lines = self.captions(model, row, rect, fm)
        painter.setPen(text_color)
        align = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
        painter.drawText(lines[0][0], align, lines[0][1])
        if len(lines) > 1:
            muted = QColor(text_color)
            muted.setAlphaF(0.65)
            painter.setPen(MISMATCH if wrong and not option.state & QStyle.StateFlag.State_Selected else muted)
            painter.drawText(lines[1][0], align, lines[1][1])
        painter.restore()



def wrap_uniform_tiles(view: QListView) -> None:
    """Lay a list view's items out as a grid of equal tiles that wraps at the view's width. List mode with
    left-to-right wrapping lays uniform cells out arithmetically; icon mode would keep a position per item,
    which costs time and memory at 60k items."""
    view.setViewMode(QListView.ViewMode.ListMode)
    view.setFlow(QListView.Flow.LeftToRight)
    view.setWrapping(True)
    view.setResizeMode(QListView.ResizeMode.Adjust)
    view.setUniformItemSizes(True)
    view.setMovement(QListView.Movement.Static)

class ThumbnailGrid(QListView):
    """A wrapping, uniformly sized list view: Qt lays out and paints only what is visible."""

    def __init__(self, parent=None, image_size: int = 84):
        super().__init__(parent)
        self.thumbnails = ThumbnailModel(self)
        self.delegate = ThumbnailDelegate(self, image_size)
        self.setModel(self.thumbnails)
        self.setItemDelegate(self.delegate)
        wrap_uniform_tiles(self)
        # Batched layout keeps each step of laying out 60k cells to a few milliseconds (a step asks the
        # model for its row count twice per cell: 2,000 cells took 6–9 ms).
        self.setLayoutMode(QListView.LayoutMode.Batched)
        self.setBatchSize(1000)
        self.setSpacing(2)
        self.setMouseTracking(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.verticalScrollBar().setSingleStep(24)

    def paintEvent(self, event) -> None:
        self.delegate.start_paint(FRAME_BUDGET_MS if painting_frame() else None)
        super().paintEvent(event)
        deferred = self.delegate.deferred
        self.delegate.start_paint(None)  # the delegate painting elsewhere (a drag's picture) draws whole
        if deferred:  # the rest of the new cells in the next frames
            QTimer.singleShot(STEP_MS, self.viewport(), self.viewport().update)

    def setModel(self, model) -> None:
        super().setModel(model)
        # The view lays its cells out again after a reset; by then the delegate knows the new names.
        model.modelReset.connect(self._fit_captions)
        model.modelReset.connect(self.delegate.forget_cells)  # another split: its rows are other images
        self._fit_captions()

    def _fit_captions(self) -> None:
        """Cells as wide as the model's class names need (asked again after every reset)."""
        self.delegate.fit_captions(self.fontMetrics(), self.thumbnails.class_names)

    def set_image_size(self, size: int) -> None:
        self.delegate.image_size = size
        self.delegate.forget_cells()
        # The view caches the uniform cell size; this makes it ask the delegate again.
        if self.thumbnails.rowCount():
            self.delegate.sizeHintChanged.emit(self.thumbnails.index(0))

    def selected_indices(self) -> list[int]:
        """Dataset indices of the selected thumbnails, in row order."""
        return [int(self.thumbnails.rows[i.row()]) for i in sorted(self.selectedIndexes(), key=lambda i: i.row())]
