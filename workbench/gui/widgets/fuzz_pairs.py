"""What the FOL-guided fuzzer found: seed → generated test pairs, and a live counter.

Each tile shows three pictures side by side — the seed, the generated test, and their difference
(test − seed) on the diverging blue–white–red map, centred at 0 with symmetric levels ±max|Δ| of
that pair, so even a faint perturbation is visible ("amplified"); the tooltip gives that maximum.
Under them: the seed's predicted label ŷ with its class colour, "→ new label" in red, and the test's
grad-L2 (the RobOT fuzzer's FOL, docs/methods/fol-and-selection.md#grad-l2) and relative L2
distance ‖x − x0‖₂/‖x0‖₂.
Above the gallery a counter reads "1,234 tests from 87 seeds, 12.3 s" (`set_progress`).

The gallery is a list model with a painting delegate (no widget per tile), so tests
can be appended as the fuzzer reports them (`add_pairs`) while the view keeps its scroll position.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from PySide6.QtCore import QAbstractListModel, QModelIndex, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QImage, QPainter, QPalette, QPen, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QListView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from workbench.gui.plotting.colors import MISMATCH, class_color
from workbench.gui.widgets.empty_state import fill, headed_stack, keep_space_when_hidden
from workbench.gui.widgets.fol_histogram import GRAD_L2_LABEL, format_value
from workbench.gui.widgets.relevance_overlay import relevance_lut, to_rgb_qimage
from workbench.gui.widgets.selection_strip import as_display_images
from workbench.gui.widgets.thumbnail_grid import to_qimage, wrap_uniform_tiles

CACHE_PAIRS = 2048  # tiles kept as QImages (three small images each)


def format_elapsed(seconds: float) -> str:
    """12.3 s, 2 min 05 s, 1 h 02 min."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest:02d} s"
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours} h {rest // 60:02d} min"


def progress_text(tests: int, seeds: int, elapsed: float) -> str:
    """ "1,234 tests from 87 seeds, 12.3 s" """
    return (f"{tests:,} test{'' if tests == 1 else 's'} from {seeds:,} seed{'' if seeds == 1 else 's'}, "
            f"{format_elapsed(elapsed)}")


def difference_rgb(seed: np.ndarray, generated: np.ndarray) -> tuple[np.ndarray, float]:
    """test − seed (C×H×W floats, averaged over channels) on the diverging map with levels ±max|Δ|:
    an H×W×3 uint8 picture and that maximum (0 for identical images, drawn all white)."""
    delta = np.nan_to_num(np.asarray(generated, np.float32) - np.asarray(seed, np.float32)).mean(axis=0)
    limit = float(np.abs(delta).max()) if delta.size else 0.0
    share = delta / limit if limit > 0 else np.zeros_like(delta)
    return relevance_lut()[np.rint((np.clip(share, -1, 1) + 1.0) * 127.5).astype(np.int64)], limit


def _chw(images) -> np.ndarray:
    """Float N×C×H×W from N×H×W or N×C×H×W (uint8 is scaled to [0, 1])."""
    array = np.asarray(images)
    if array.ndim == 3:
        array = array[:, None]
    if array.ndim != 4:
        raise ValueError(f"images must be N×H×W or N×C×H×W, not of shape {array.shape}")
    return array.astype(np.float32) / 255.0 if array.dtype == np.uint8 else array.astype(np.float32)


class FuzzPairModel(QAbstractListModel):
    """One row per generated test: its seed, the test, both labels, grad-L2 and relative distance."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.class_names: list[str] = []
        self.seeds = np.zeros((0, 1, 1, 1), np.float32)
        self.generated = np.zeros((0, 1, 1, 1), np.float32)
        self.seed_labels = np.zeros(0, np.int64)
        self.new_labels = np.zeros(0, np.int64)
        self.grad_l2 = np.zeros(0)
        self.rel_dist = np.zeros(0)
        self._cache: OrderedDict[int, tuple[QImage, QImage, QImage, float]] = OrderedDict()

    @staticmethod
    def _checked(seeds, generated, seed_labels, new_labels, grad_l2, rel_dist):
        seeds, generated = _chw(seeds), _chw(generated)
        columns = [np.asarray(seed_labels, np.int64).ravel(), np.asarray(new_labels, np.int64).ravel(),
                   np.asarray(grad_l2, np.float64).ravel(), np.asarray(rel_dist, np.float64).ravel()]
        lengths = [len(seeds), len(generated)] + [len(c) for c in columns]
        if len(set(lengths)) != 1:
            raise ValueError(f"seeds, generated, labels, new labels, grad-L2 and distances differ in length: {lengths}")
        if seeds.shape != generated.shape:
            raise ValueError(f"seeds {seeds.shape} and generated tests {generated.shape} differ in shape")
        return (seeds, generated, *columns)

    def set_pairs(self, seeds, generated, seed_labels, new_labels, grad_l2, rel_dist,
                  class_names: Sequence[str]) -> None:
        data = self._checked(seeds, generated, seed_labels, new_labels, grad_l2, rel_dist)
        self.beginResetModel()
        self.class_names = list(class_names)
        (self.seeds, self.generated, self.seed_labels, self.new_labels, self.grad_l2, self.rel_dist) = data
        self._cache.clear()
        self.endResetModel()

    def add_pairs(self, seeds, generated, seed_labels, new_labels, grad_l2, rel_dist) -> None:
        data = self._checked(seeds, generated, seed_labels, new_labels, grad_l2, rel_dist)
        n = len(data[0])
        if not n:
            return
        if len(self.seed_labels) and data[0].shape[1:] != self.seeds.shape[1:]:
            raise ValueError(f"new pairs of shape {data[0].shape[1:]} do not match the shown {self.seeds.shape[1:]}")
        start = len(self.seed_labels)
        self.beginInsertRows(QModelIndex(), start, start + n - 1)
        if start:
            self.seeds, self.generated = np.concatenate([self.seeds, data[0]]), np.concatenate([self.generated, data[1]])
            self.seed_labels, self.new_labels, self.grad_l2, self.rel_dist = (
                np.concatenate([old, new]) for old, new in
                zip((self.seed_labels, self.new_labels, self.grad_l2, self.rel_dist), data[2:]))
        else:
            self.seeds, self.generated, self.seed_labels, self.new_labels, self.grad_l2, self.rel_dist = data
        self.endInsertRows()

    def rowCount(self, parent: QModelIndex | None = None) -> int:
        return 0 if parent is not None and parent.isValid() else len(self.seed_labels)

    def class_name(self, k: int) -> str:
        return self.class_names[k] if 0 <= k < len(self.class_names) else str(k)

    def images(self, row: int) -> tuple[QImage, QImage, QImage, float]:
        """Seed, test and difference pictures of a row, and the difference's ±limit."""
        cached = self._cache.get(row)
        if cached is not None:
            self._cache.move_to_end(row)
            return cached
        shown = as_display_images(np.stack([self.seeds[row], self.generated[row]]))
        diff, limit = difference_rgb(self.seeds[row], self.generated[row])
        result = (to_qimage(shown[0]), to_qimage(shown[1]), to_rgb_qimage(diff), limit)
        self._cache[row] = result
        while len(self._cache) > CACHE_PAIRS:
            self._cache.popitem(last=False)
        return result

    def caption_lines(self, row: int) -> tuple[str, str]:
        return (f"{self.class_name(int(self.seed_labels[row]))} → {self.class_name(int(self.new_labels[row]))}",
                f"grad-L2 {format_value(self.grad_l2[row])} · dist {self.rel_dist[row]:.2f}")

    def data(self, index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or index.row() >= self.rowCount():
            return None
        row = index.row()
        if role == Qt.ItemDataRole.ToolTipRole:
            limit = self.images(row)[3]
            return (f"Test #{row:,}: seed predicted <b>{self.class_name(int(self.seed_labels[row]))}</b>, "
                    f"test predicted <b>{self.class_name(int(self.new_labels[row]))}</b><br>"
                    f"{GRAD_L2_LABEL}: {format_value(self.grad_l2[row])}<br>"
                    f"relative L2 distance ‖x − x0‖₂ / ‖x0‖₂: {self.rel_dist[row]:.3f}<br>"
                    f"difference test − seed, colours scaled to ±{format_value(limit)}")
        if role == Qt.ItemDataRole.AccessibleTextRole:
            return "test " + self.caption_lines(row)[0]
        return None


class FuzzPairDelegate(QStyledItemDelegate):
    """Paints a tile: seed | test | difference, then "ŷ → new" and "grad-L2 · dist"."""

    PAD, GAP = 4, 4

    def __init__(self, parent=None, image_size: int = 56):
        super().__init__(parent)
        self.image_size = image_size

    def tile_size(self, font_height: int) -> QSize:
        return QSize(3 * self.image_size + 2 * self.GAP + 2 * self.PAD,
                     self.image_size + 2 * self.PAD + 2 * (font_height + 1) + 2)

    def sizeHint(self, option: QStyleOptionViewItem, index) -> QSize:
        return self.tile_size(option.fontMetrics.height())

    def image_boxes(self, rect: QRect, image: QImage) -> list[QRect]:
        scale = max(1, self.image_size // max(image.width(), image.height()))
        w, h = image.width() * scale, image.height() * scale
        left = rect.x() + (rect.width() - (3 * w + 2 * self.GAP)) // 2
        top = rect.y() + self.PAD + (self.image_size - h) // 2
        return [QRect(left + i * (w + self.GAP), top, w, h) for i in range(3)]

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index) -> None:
        model: FuzzPairModel = index.model()
        row = index.row()
        seed, test, diff, _ = model.images(row)
        rect, palette = option.rect, option.palette
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        painter.save()
        if selected:
            painter.fillRect(rect, palette.color(QPalette.ColorRole.Highlight))
        elif option.state & QStyle.StateFlag.State_MouseOver:
            painter.fillRect(rect, palette.color(QPalette.ColorRole.AlternateBase))
        text_color = palette.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
        boxes = self.image_boxes(rect, seed)
        for box, image in zip(boxes, (seed, test, diff)):
            painter.drawImage(box, image)
        painter.setPen(QPen(MISMATCH, 2))  # the test's label differs from the seed's: a red frame
        painter.drawRect(boxes[1].adjusted(-1, -1, 0, 0))
        muted = QColor(text_color)
        muted.setAlphaF(0.55)
        painter.setPen(QPen(muted, 1))
        painter.drawRect(boxes[2].adjusted(0, 0, -1, -1))  # white (no change) needs an edge

        fm = option.fontMetrics
        line_h = fm.height() + 1
        y = boxes[0].bottom() + self.PAD
        left, right = rect.x() + self.PAD, rect.right() - self.PAD
        seed_label, new_label = int(model.seed_labels[row]), int(model.new_labels[row])
        painter.fillRect(QRect(left, y + (line_h - 8) // 2, 8, 8), class_color(seed_label))
        first = model.class_name(seed_label)
        x = left + 12
        painter.setPen(text_color)
        first_w = min(fm.horizontalAdvance(first), (right - x) // 2)
        painter.drawText(QRect(x, y, first_w + 1, line_h), Qt.AlignmentFlag.AlignVCenter,
                         fm.elidedText(first, Qt.TextElideMode.ElideRight, first_w + 1))
        x += first_w + 4
        painter.setPen(text_color if selected else MISMATCH)
        painter.drawText(QRect(x, y, right - x, line_h), Qt.AlignmentFlag.AlignVCenter,
                         fm.elidedText("→ " + model.class_name(new_label), Qt.TextElideMode.ElideRight, right - x))
        muted.setAlphaF(0.8)
        painter.setPen(muted)
        painter.drawText(QRect(left, y + line_h, right - left, line_h), Qt.AlignmentFlag.AlignVCenter,
                         fm.elidedText(model.caption_lines(row)[1], Qt.TextElideMode.ElideRight, right - left))
        painter.restore()


def diverging_key(width: int = 90, height: int = 10) -> QPixmap:
    """A small blue–white–red strip, the key to the difference pictures."""
    lut = relevance_lut()
    row = lut[np.linspace(0, 255, width).astype(np.int64)]
    strip = np.ascontiguousarray(np.repeat(row[None], height, axis=0))
    return QPixmap.fromImage(to_rgb_qimage(strip))


class FuzzPairs(QWidget):
    """Seed → generated test pairs with a live counter.

    - `set_pairs(seeds, generated, seed_labels, new_labels, grad_l2, rel_dist, class_names)`:
      replace the gallery; images N×H×W or N×C×H×W in [0, 1]; `seed_labels` the model's ŷ for the
      seeds, `new_labels` its prediction for the tests.
    - `add_pairs(seeds, generated, seed_labels, new_labels, grad_l2, rel_dist)`: append as the fuzzer
      reports tests (the class names of the last `set_pairs`/`set_class_names`).
    - `set_progress(tests, seeds_active, elapsed, running=True, note="")`: the counter line.
    - `pair_clicked(row)`: a tile was clicked or Enter pressed on it.
    - `clear_pairs(title, text)`: the empty state; `csv_rows()`: one row per pair.
    """

    pair_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None, image_size: int = 56):
        super().__init__(parent)
        self.counter = QLabel()
        self.counter.setObjectName("fuzzCounter")
        self.counter.setStyleSheet("font-weight: bold")
        keep_space_when_hidden(self.counter).setVisible(False)  # the tiles stay put when it appears
        self.key = QLabel()
        self.key.setPixmap(diverging_key())
        self.key.setToolTip("Difference test − seed: blue where the test is darker, red where it is brighter; "
                            "each pair scaled to its own largest |difference|")
        self.key_text = QLabel("Each tile: seed · test · difference (test − seed, scaled per pair)")
        self.key_low, self.key_high = QLabel("−"), QLabel("+")
        self.running = False
        self._empty = ("", "")
        self.model = FuzzPairModel(self)
        self.delegate = FuzzPairDelegate(self, image_size)
        self.view = _PairView()
        self.view.setModel(self.model)
        self.view.setItemDelegate(self.delegate)
        self.view.clicked.connect(lambda index: self.pair_clicked.emit(index.row()))
        self.view.entered_row.connect(self.pair_clicked)
        self.model.rowsInserted.connect(lambda *_: self._show_pairs())
        self.model.modelReset.connect(self._show_pairs)

        key_row = QHBoxLayout()
        key_row.setContentsMargins(0, 0, 0, 0)
        key_row.addWidget(self.key_text)
        key_row.addSpacing(8)
        key_row.addWidget(self.key_low)
        key_row.addWidget(self.key)
        key_row.addWidget(self.key_high)
        key_row.addStretch(1)
        self.stack = headed_stack(key_row, self.view)
        fill(self, self.counter, self.stack)
        self.clear_pairs()

    # --- public API ---------------------------------------------------------------------------------

    def set_pairs(self, seeds, generated, seed_labels, new_labels, grad_l2, rel_dist,
                  class_names: Sequence[str]) -> None:
        self.model.set_pairs(seeds, generated, seed_labels, new_labels, grad_l2, rel_dist, class_names)

    def add_pairs(self, seeds, generated, seed_labels, new_labels, grad_l2, rel_dist) -> None:
        self.model.add_pairs(seeds, generated, seed_labels, new_labels, grad_l2, rel_dist)

    def set_class_names(self, class_names: Sequence[str]) -> None:
        self.model.class_names = list(class_names)
        self.view.viewport().update()

    def clear_pairs(self, title: str = "No fuzzing tests yet",
                    text: str = "Start FOL-guided fuzzing on a set of seeds; each test it generates appears here "
                                "next to its seed, with the difference between them.") -> None:
        self._empty = (title, text)
        self.model.set_pairs(np.zeros((0, 1, 1, 1)), np.zeros((0, 1, 1, 1)), [], [], [], [], self.model.class_names)

    def set_progress(self, tests: int, seeds_active: int, elapsed: float, running: bool = True,
                     note: str = "") -> None:
        """Show "1,234 tests from 87 seeds, 12.3 s" (and `note`, e.g. the stop reason, after it)."""
        self.running = running
        text = progress_text(int(tests), int(seeds_active), elapsed)
        if running:
            text += " — fuzzing…"
        if note:
            text += f" — {note}"
        self.counter.setText(text)
        self.counter.setVisible(True)
        self._show_pairs()

    def pair_count(self) -> int:
        return self.model.rowCount()

    def csv_rows(self) -> tuple[list[str], list[list]]:
        header = ["test", "seed_prediction", "test_prediction", "grad_l2", "relative_l2_distance"]
        m = self.model
        return header, [[i, m.class_name(int(m.seed_labels[i])), m.class_name(int(m.new_labels[i])),
                         float(m.grad_l2[i]), float(m.rel_dist[i])] for i in range(m.rowCount())]

    def visual_rect(self, row: int) -> QRect:
        """Where tile `row` is, in the view's viewport (tests)."""
        return self.view.visualRect(self.model.index(row))

    def _show_pairs(self) -> None:
        if self.model.rowCount():
            self.stack.show_content()
        elif self.running:
            self.stack.show_message("Fuzzing…", "No seed has produced a failing test yet.", busy=True)
        else:
            self.stack.show_message(*self._empty)


class _PairView(QListView):
    """A wrapping grid of uniform tiles; Enter emits `entered_row(row)`."""

    entered_row = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        wrap_uniform_tiles(self)
        self.setSpacing(3)
        self.setMouseTracking(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.verticalScrollBar().setSingleStep(24)

    def keyPressEvent(self, event) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.currentIndex().isValid():
            self.entered_row.emit(self.currentIndex().row())
            return
        super().keyPressEvent(event)
