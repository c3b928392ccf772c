"""A neuron's gallery: the images that make it most relevant and most active, relevance drawn over them.

`GalleryGrid` paints a few tiles itself (no widget per image): each image scaled by a whole factor
with nearest-neighbour sampling, the relevance overlay at the chosen opacity, and one line under it:
the true label with its class colour and the score — or, with a red frame, the prediction where it
differs from the label, as under every thumbnail in the workbench. The tooltip says all of it. Arrow
keys move between tiles; a click or Enter emits `activated(position)`.
`GalleryPanel` puts the two rankings side by side under the neuron's name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QImage, QPainter, QPalette, QPen, QPixmap
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from workbench.gui.colors import MISMATCH, class_color
from workbench.gui.widgets.empty_state import MessageOrContent
from workbench.gui.widgets.relevance_overlay import overlay_image


@dataclass
class Tile:
    index: int  # dataset index of the image
    pixels: np.ndarray  # H×W×C uint8
    heatmap: np.ndarray | None  # H×W signed relevance, or None
    label: int
    prediction: int
    score: float  # what the image was ranked by: the neuron's relevance or activation
    caption: str  # the score as shown, e.g. "12.3"
    label_name: str = ""
    prediction_name: str = ""

    @property
    def wrong(self) -> bool:
        return self.label != self.prediction


class GalleryGrid(QWidget):
    """Tiles in a fixed number of columns; `set_tiles`, `set_opacity`; `activated(position)`."""

    activated = Signal(int)
    PAD = 4

    def __init__(self, parent: QWidget | None = None, columns: int = 3, scale: int = 2, score_name: str = "score"):
        super().__init__(parent)
        self.columns, self.scale, self.score_name = columns, scale, score_name
        self.tiles: list[Tile] = []
        self.images: list[QImage] = []
        self.opacity = 0.6
        self.current = -1
        font = self.font()
        font.setPointSizeF(font.pointSizeF() * 0.9)  # captions fit under 2× thumbnails
        self.setFont(font)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)

    def set_tiles(self, tiles: list[Tile]) -> None:
        self.tiles = list(tiles)
        self.current = 0 if self.tiles else -1
        self._render_images()
        self.updateGeometry()
        self.update()

    def set_opacity(self, opacity: float) -> None:
        self.opacity = opacity
        self._render_images()
        self.update()

    def _render_images(self) -> None:
        self.images = [overlay_image(t.pixels, t.heatmap, self.opacity) for t in self.tiles]

    def image_side(self) -> int:
        side = max((max(t.pixels.shape[:2]) for t in self.tiles), default=28)
        return side * self.scale

    def tile_size(self) -> QSize:
        line = self.fontMetrics().height() + 1
        side = self.image_side()
        return QSize(max(side, 80) + 2 * self.PAD, side + 2 * self.PAD + line)

    def tile_rect(self, position: int) -> QRect:
        size = self.tile_size()
        row, col = divmod(position, self.columns)
        return QRect(col * size.width(), row * size.height(), size.width(), size.height())

    def sizeHint(self) -> QSize:
        size = self.tile_size()
        rows = max(1, -(-len(self.tiles) // self.columns))
        return QSize(size.width() * self.columns, size.height() * rows)

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        palette = self.palette()
        fm = self.fontMetrics()
        line = fm.height() + 1
        for position, (tile, image) in enumerate(zip(self.tiles, self.images)):
            rect = self.tile_rect(position)
            selected = position == self.current
            if selected:
                painter.fillRect(rect, palette.color(QPalette.ColorRole.Highlight if self.hasFocus()
                                                     else QPalette.ColorRole.AlternateBase))
            text_color = palette.color(QPalette.ColorRole.HighlightedText if selected and self.hasFocus()
                                       else QPalette.ColorRole.Text)
            w, h = image.width() * self.scale, image.height() * self.scale
            box = QRect(rect.x() + (rect.width() - w) // 2, rect.y() + self.PAD, w, h)
            painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
            painter.drawImage(box, image)
            if tile.wrong:
                painter.setPen(QPen(MISMATCH, 3))
                painter.drawRect(box.adjusted(-1, -1, 1, 1))
            y = box.bottom() + self.PAD // 2
            swatch = QRect(rect.x() + self.PAD, y + (line - 8) // 2, 8, 8)
            painter.fillRect(swatch, class_color(tile.label))
            # The score (or the wrong prediction) keeps its width; the class name gets what is left.
            right = f"→{tile.prediction_name}" if tile.wrong else tile.caption
            right_w = min(fm.horizontalAdvance(right) + 2, (rect.width() - 2 * self.PAD) // 2 + 8)
            right_rect = QRect(rect.right() - self.PAD - right_w, y, right_w, line)
            text_w = right_rect.left() - swatch.right() - 6
            painter.setPen(text_color)
            painter.drawText(QRect(swatch.right() + 3, y, text_w, line), Qt.AlignmentFlag.AlignVCenter,
                             fm.elidedText(tile.label_name, Qt.TextElideMode.ElideRight, text_w))
            muted = QColor(text_color)
            muted.setAlphaF(0.7)
            painter.setPen(MISMATCH if tile.wrong and not (selected and self.hasFocus()) else muted)
            painter.drawText(right_rect, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight,
                             fm.elidedText(right, Qt.TextElideMode.ElideRight, right_w))
        painter.end()

    def tooltip_for(self, position: int) -> str:
        tile = self.tiles[position]
        verdict = f"predicted <b>{tile.prediction_name}</b>" + (" (wrong)" if tile.wrong else "")
        return (f"Training image #{tile.index:,}: <b>{tile.label_name}</b>, {verdict}<br>"
                f"{self.score_name}: {tile.caption}<br>"
                "Click or press Enter to inspect it")

    def position_at(self, point) -> int:
        for position in range(len(self.tiles)):
            if self.tile_rect(position).contains(point):
                return position
        return -1

    def event(self, event) -> bool:
        if event.type() == event.Type.ToolTip:
            position = self.position_at(event.pos())
            self.setToolTip(self.tooltip_for(position) if position >= 0 else "")
        return super().event(event)

    def mousePressEvent(self, event) -> None:
        position = self.position_at(event.position().toPoint())
        if position >= 0:
            self.current = position
            self.update()
            self.activated.emit(position)

    def keyPressEvent(self, event) -> None:
        moves = {Qt.Key.Key_Left: -1, Qt.Key.Key_Right: 1, Qt.Key.Key_Up: -self.columns,
                 Qt.Key.Key_Down: self.columns}
        key = event.key()
        if key in moves and self.tiles:
            self.current = min(len(self.tiles) - 1, max(0, self.current + moves[key]))
            self.update()
        elif key in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.current >= 0:
            self.activated.emit(self.current)
        else:
            super().keyPressEvent(event)


class GalleryPanel(QWidget):
    """Two `GalleryGrid`s — most relevant, most active — under a title; a message while there are none."""

    activated = Signal(int)  # dataset index of the image the user chose

    def __init__(self, parent: QWidget | None = None, columns: int = 3):
        super().__init__(parent)
        self.title = QLabel()
        self.title.setStyleSheet("font-weight: bold")
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.by_relevance = GalleryGrid(columns=columns, score_name="Relevance reaching the neuron")
        self.by_relevance.setObjectName("galleryByRelevance")
        self.by_activation = GalleryGrid(columns=columns, score_name="The neuron's activation")
        self.by_activation.setObjectName("galleryByActivation")
        grids = QHBoxLayout()
        grids.setSpacing(16)
        for text, tip, grid in (
                ("Most relevant (by R)", ("Training images in which this neuron carries the most relevance "
                                          "(LRP); the number is that relevance, R"), self.by_relevance),
                ("Most active (by activation)", ("Training images on which this neuron's activation is highest; "
                                                 "the number is the activation"), self.by_activation)):
            column = QVBoxLayout()
            heading = QLabel(text)
            heading.setToolTip(tip)
            column.addWidget(heading)
            column.addWidget(grid)
            column.addStretch(1)
            grids.addLayout(column)
            grid.activated.connect(lambda position, grid=grid: self.activated.emit(grid.tiles[position].index))
        grids.addStretch(1)
        self.content = QWidget()
        content_layout = QVBoxLayout(self.content)
        content_layout.setContentsMargins(0, 0, 0, 0)
        content_layout.addLayout(grids)
        content_layout.addWidget(self.note)
        self.stack = MessageOrContent(self.content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.stack, 1)

    def set_tiles(self, by_relevance: list[Tile], by_activation: list[Tile], note: str = "") -> None:
        self.by_relevance.set_tiles(by_relevance)
        self.by_activation.set_tiles(by_activation)
        self.note.setText(note)
        self.note.setVisible(bool(note))
        self.stack.show_content()

    def set_opacity(self, opacity: float) -> None:
        self.by_relevance.set_opacity(opacity)
        self.by_activation.set_opacity(opacity)

    def has_tiles(self) -> bool:
        return self.stack.currentWidget() is self.content and bool(self.by_relevance.tiles)

    def grab_png(self, path: str, scale: float = 2.0) -> bool:
        """Save the gallery (title and both grids) as PNG at `scale` times its size on screen."""
        size = self.size()
        pixmap = QPixmap(int(size.width() * scale), int(size.height() * scale))
        pixmap.setDevicePixelRatio(scale)
        pixmap.fill(self.palette().color(QPalette.ColorRole.Window))
        self.render(pixmap)
        return pixmap.save(str(path), "PNG")
