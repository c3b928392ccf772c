"""A gallery of seed → result pairs from a latent search, drawn as one canvas (hundreds of pairs stay cheap).

Each tile shows the seed image and the best input found, nearest-neighbour enlarged, the intended
and predicted classes, the generations used, a sparkline of the best fitness per generation (the
logit margin under the benchmark's objective, whose dashed line at 0 is where the classifier starts
to misbehave; a distance under an IDC objective) and, once the run has been judged,
the validity proxies' verdicts (SO: SelfOracle, DAIV, oracle: whether the oracle classifier still
reads the intended class — kept, changed or unsure). A found
misbehaviour has a red frame; an unfinished seed (the run was stopped) a dashed one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import QPointF, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QImage, QPainter, QPen, QPixmap, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from workbench.gui.plotting.colors import MISMATCH

ZOOM = 2  # screen pixels per image pixel unless `set_zoom` says otherwise
PAD = 6
LINE = 15  # text line height
SPARK_H = 26


@dataclass
class Pair:
    generator: str
    seed: int
    seed_image: np.ndarray  # (C, H, W) in [0, 1]
    image: np.ndarray
    label: int
    predicted: int
    generations: int
    found: bool
    finished: bool = True
    fitness: list = field(default_factory=list)
    verdicts: dict | None = None  # {"selforacle": bool ok, "daiv": bool ok, "oracle": "preserved" | …}


def to_qimage(image: np.ndarray, zoom: int) -> QImage:
    pixels = np.clip(np.nan_to_num(np.asarray(image, dtype=np.float32)) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    pixels = np.repeat(np.repeat(pixels, zoom, axis=1), zoom, axis=2)
    if pixels.shape[0] == 1:
        data = np.ascontiguousarray(pixels[0])
        return QImage(data.tobytes(), data.shape[1], data.shape[0], data.shape[1],
                      QImage.Format.Format_Grayscale8).copy()
    data = np.ascontiguousarray(pixels[:3].transpose(1, 2, 0))
    return QImage(data.tobytes(), data.shape[1], data.shape[0], 3 * data.shape[1], QImage.Format.Format_RGB888).copy()


class PairGallery(QWidget):
    """Seed → result tiles in rows that fill the width; `add` appends one as a search finishes it."""

    clicked = Signal(int)  # the index of the pair clicked

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.pairs: list[Pair] = []
        self.class_names: list[str] = []
        self._images: list[tuple[QImage, QImage]] = []
        self.unjudged = "proxies: not judged yet"  # what a tile says while it has no verdicts
        self.zoom = ZOOM
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.setMouseTracking(False)

    # --- contents ------------------------------------------------------------------------------------

    def clear(self) -> None:
        self.pairs, self._images = [], []
        self._relayout()

    def set_pairs(self, pairs: list[Pair], class_names: list[str]) -> None:
        self.class_names = list(class_names)
        self.pairs = list(pairs)
        self._images = [(to_qimage(p.seed_image, self.zoom), to_qimage(p.image, self.zoom)) for p in self.pairs]
        self._relayout()

    def set_zoom(self, zoom: int) -> None:
        """Draw the images at `zoom` screen pixels per image pixel (nearest neighbour)."""
        self.zoom = max(1, int(zoom))
        self.set_pairs(self.pairs, self.class_names)

    def add(self, pair: Pair) -> None:
        self.pairs.append(pair)
        self._images.append((to_qimage(pair.seed_image, self.zoom), to_qimage(pair.image, self.zoom)))
        self._relayout()

    # --- geometry ------------------------------------------------------------------------------------

    def _image_size(self) -> tuple[int, int]:
        if self.pairs:
            _, h, w = self.pairs[0].image.shape
            return w * self.zoom, h * self.zoom
        return 28 * self.zoom, 28 * self.zoom

    def tile_size(self) -> QSize:
        w, h = self._image_size()  # room for the text lines at any zoom
        return QSize(max(2 * w + 3 * PAD + 14, 176), h + 5 * LINE + SPARK_H + 3 * PAD)

    def _columns(self) -> int:
        return max(1, (max(self.width(), 1) + PAD) // (self.tile_size().width() + PAD))

    def _relayout(self) -> None:
        self.updateGeometry()
        self.setMinimumHeight(self.heightForWidth(self.width()))
        self.update()

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        tile = self.tile_size()
        columns = max(1, (max(width, 1) + PAD) // (tile.width() + PAD))
        rows = (len(self.pairs) + columns - 1) // columns
        return max(rows * (tile.height() + PAD), 1)

    def sizeHint(self) -> QSize:
        tile = self.tile_size()
        return QSize(4 * (tile.width() + PAD), self.heightForWidth(4 * (tile.width() + PAD)))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.setMinimumHeight(self.heightForWidth(self.width()))

    def tile_rect(self, index: int) -> QRect:
        tile, columns = self.tile_size(), self._columns()
        row, column = divmod(index, columns)
        return QRect(column * (tile.width() + PAD), row * (tile.height() + PAD), tile.width(), tile.height())

    def index_at(self, point) -> int | None:
        tile, columns = self.tile_size(), self._columns()
        column, row = point.x() // (tile.width() + PAD), point.y() // (tile.height() + PAD)
        index = row * columns + column
        if column < columns and 0 <= index < len(self.pairs) and self.tile_rect(index).contains(point):
            return index
        return None

    # --- painting ------------------------------------------------------------------------------------

    def _name(self, k: int) -> str:
        return self.class_names[k] if 0 <= k < len(self.class_names) else str(k)

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        visible = event.rect()
        for i, pair in enumerate(self.pairs):
            rect = self.tile_rect(i)
            if rect.intersects(visible):
                self._paint_tile(painter, rect, pair, self._images[i])
        painter.end()

    def _paint_tile(self, painter: QPainter, rect: QRect, pair: Pair, images) -> None:
        palette = self.palette()
        text = palette.color(palette.ColorRole.WindowText)
        frame = QPen(MISMATCH if pair.found else palette.color(palette.ColorRole.Mid), 2 if pair.found else 1)
        if not pair.finished:
            frame.setStyle(Qt.PenStyle.DashLine)
        painter.setPen(frame)
        painter.drawRect(rect.adjusted(0, 0, -1, -1))
        w, h = self._image_size()
        x, y = rect.x() + PAD, rect.y() + PAD
        painter.drawImage(x, y, images[0])
        painter.setPen(text)
        painter.drawText(QRect(x + w, y, 14 + PAD, h), Qt.AlignmentFlag.AlignCenter, "→")
        painter.drawImage(x + w + 14 + PAD, y, images[1])
        y += h + 2
        width = rect.width() - 2 * PAD
        painter.drawText(QRect(x, y, width, LINE), Qt.AlignmentFlag.AlignLeft, self._name(pair.label))
        painter.setPen(MISMATCH if pair.predicted != pair.label else text)
        painter.drawText(QRect(x, y, width, LINE), Qt.AlignmentFlag.AlignRight, self._name(pair.predicted))
        painter.setPen(text)
        y += LINE
        metrics = painter.fontMetrics()
        painter.drawText(QRect(x, y, width, LINE), Qt.AlignmentFlag.AlignLeft,
                         metrics.elidedText(f"{pair.generator} #{pair.seed}", Qt.TextElideMode.ElideMiddle, width))
        y += LINE
        state = "found" if pair.found else ("stopped" if not pair.finished else "not found")
        painter.drawText(QRect(x, y, width, LINE), Qt.AlignmentFlag.AlignLeft, f"gen. {pair.generations} · {state}")
        y += LINE
        self._paint_sparkline(painter, QRect(x, y + 2, width, SPARK_H - 4), pair.fitness)
        y += SPARK_H
        painter.drawText(QRect(x, y, width, LINE), Qt.AlignmentFlag.AlignLeft,
                         metrics.elidedText(self._verdict_text(pair), Qt.TextElideMode.ElideRight, width))

    def _verdict_text(self, pair: Pair) -> str:
        v = pair.verdicts
        if v is None:
            return self.unjudged
        mark = {True: "✓", False: "✗"}
        oracle = {"preserved": "kept", "changed": "changed", "uncertain": "unsure"}.get(v["oracle"], v["oracle"])
        return f"SO {mark[v['selforacle']]}  DAIV {mark[v['daiv']]}  {oracle}"

    def _paint_sparkline(self, painter: QPainter, rect: QRect, fitness: list) -> None:
        values = np.asarray([f for f in fitness if np.isfinite(f)], dtype=np.float64)
        if len(values) < 1:
            return
        low, high = min(values.min(), 0.0), max(values.max(), 0.0)
        span = (high - low) or 1.0
        n = max(len(values) - 1, 1)

        def point(i, v):
            return QPointF(rect.x() + rect.width() * i / n, rect.bottom() - (v - low) / span * rect.height())

        zero = QPen(self.palette().color(self.palette().ColorRole.Mid), 1, Qt.PenStyle.DashLine)
        painter.setPen(zero)
        painter.drawLine(point(0, 0.0), point(n, 0.0))
        painter.setPen(QPen(QColor(40, 110, 200), 1.5))
        painter.drawPolyline(QPolygonF([point(i, v) for i, v in enumerate(values)]))

    # --- interaction ---------------------------------------------------------------------------------

    def mousePressEvent(self, event) -> None:
        index = self.index_at(event.position().toPoint())
        if index is not None:
            self.clicked.emit(index)
        super().mousePressEvent(event)

    def event(self, event) -> bool:
        if event.type() == event.Type.ToolTip:
            index = self.index_at(event.pos())
            if index is None:
                QToolTip.hideText()
                return True
            p = self.pairs[index]
            fitness = f"{p.fitness[-1]:+.3f}" if p.fitness else "—"
            QToolTip.showText(event.globalPos(), f"{p.generator}, seed {p.seed}: intended {self._name(p.label)}, "
                                                 f"predicted {self._name(p.predicted)}; best fitness {fitness} after "
                                                 f"{p.generations} generations. Validity proxies (not verdicts): "
                                                 f"{self._verdict_text(p)}", self)
            return True
        return super().event(event)

    def picture(self) -> QPixmap:
        """The whole gallery as a pixmap (what Export saves)."""
        pixmap = QPixmap(self.size())
        pixmap.fill(self.palette().color(self.backgroundRole()))
        self.render(pixmap)
        return pixmap
