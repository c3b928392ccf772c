"""A neuron's gallery: the images that make it most relevant and most active, relevance drawn over them.

`GalleryGrid` paints a few tiles itself (no widget per image): each image scaled by a whole factor
with nearest-neighbour sampling, the relevance overlay at the chosen opacity, and two lines under
it: the true label with its class colour, then the score — or, with a red frame, the prediction
where it differs from the label, as under every thumbnail in the workbench. Tiles are as wide as
their longest caption needs, so no class name is cut. The tooltip says all of it. Arrow keys move
between tiles; a click or Enter emits `activated(position)`.
`GalleryPanel` puts the two rankings side by side under the neuron's name, with one colour scale
for their overlays: each image's relevance is scaled to its own largest |R|, and the scale says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QImage, QPainter, QPalette, QPen, QPixmap
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from workbench.gui.plotting.colors import MISMATCH, class_color
from workbench.gui.widgets.empty_state import MessageOrContent, keep_space_when_hidden
from workbench.gui.widgets.relevance_overlay import overlay_image, symmetric_limit
from workbench.gui.widgets.relevance_scale import RelevanceScale, limit_text
from workbench.gui.widgets.thumbnail_grid import SWATCH, SWATCH_GAP


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

    def __init__(self, parent: QWidget | None = None, columns: int = 3, scale: int = 2, score_name: str = "score",
                 rows: int = 1):
        super().__init__(parent)
        self.columns, self.scale, self.score_name = columns, scale, score_name
        self.rows = rows  # rows of room kept before the tiles come: their coming lays nothing else out again
        self.tiles: list[Tile] = []
        self.images: list[QImage] = []
        self.limits: list[float] = []  # each tile's overlay runs to ±its own largest |relevance|
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
        self.limits = [symmetric_limit(t.heatmap) if t.heatmap is not None else 1.0 for t in self.tiles]
        self.images = [overlay_image(t.pixels, t.heatmap, self.opacity, limit)
                       for t, limit in zip(self.tiles, self.limits)]

    def image_side(self) -> int:
        side = max((max(t.pixels.shape[:2]) for t in self.tiles), default=28)
        return side * self.scale

    @staticmethod
    def right_text(tile: Tile) -> str:
        """The second caption line: the score, or the prediction where it is wrong."""
        return f"→ {tile.prediction_name}" if tile.wrong else tile.caption

    def text_width(self) -> int:
        """What the widest caption line needs: a class name after its swatch, or the second line."""
        fm = self.fontMetrics()
        widths = [max(SWATCH + SWATCH_GAP + fm.horizontalAdvance(t.label_name),
                      fm.horizontalAdvance(self.right_text(t))) for t in self.tiles]
        return max(widths, default=0) + 1

    def tile_size(self) -> QSize:
        line = self.fontMetrics().height()
        side = self.image_side()
        width = max(side, 80, min(self.text_width(), 2 * max(side, 80)))
        return QSize(width + 2 * self.PAD, self.PAD + side + self.PAD // 2 + 2 * line + self.PAD // 2)

    def caption_rects(self, position: int) -> tuple[QRect, QRect, QRect]:
        """(swatch, class name, score or prediction) rectangles of the tile at `position`."""
        rect = self.tile_rect(position)
        line = self.fontMetrics().height()
        y = rect.y() + self.PAD + self.image_side() + self.PAD // 2
        swatch = QRect(rect.x() + self.PAD, y + (line - SWATCH) // 2, SWATCH, SWATCH)
        left = rect.x() + self.PAD + SWATCH + SWATCH_GAP
        name = QRect(left, y, rect.x() + rect.width() - self.PAD - left, line)
        second = QRect(rect.x() + self.PAD, y + line, rect.width() - 2 * self.PAD, line)
        return swatch, name, second

    def captions(self, position: int) -> list[tuple[QRect, str]]:
        """The tile's two caption lines as painted: (rect, text), elided only past the widest tile."""
        fm = self.fontMetrics()
        tile = self.tiles[position]
        _, name, second = self.caption_rects(position)
        return [(r, fm.elidedText(text, Qt.TextElideMode.ElideRight, r.width()))
                for r, text in ((name, tile.label_name), (second, self.right_text(tile)))]

    def tile_rect(self, position: int) -> QRect:
        size = self.tile_size()
        row, col = divmod(position, self.columns)
        return QRect(col * size.width(), row * size.height(), size.width(), size.height())

    def sizeHint(self) -> QSize:
        size = self.tile_size()
        rows = max(self.rows, -(-len(self.tiles) // self.columns))
        return QSize(size.width() * self.columns, size.height() * rows)

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        palette = self.palette()
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
            # Two lines: the true class after its colour, then the score (or the wrong prediction).
            swatch = self.caption_rects(position)[0]
            painter.fillRect(swatch, class_color(tile.label))
            (name_rect, name), (second_rect, second) = self.captions(position)
            painter.setPen(text_color)
            painter.drawText(name_rect, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, name)
            muted = QColor(text_color)
            muted.setAlphaF(0.7)
            painter.setPen(MISMATCH if tile.wrong and not (selected and self.hasFocus()) else muted)
            painter.drawText(second_rect, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, second)
        painter.end()

    def tooltip_for(self, position: int) -> str:
        tile = self.tiles[position]
        verdict = f"predicted <b>{tile.prediction_name}</b>" + (" (wrong)" if tile.wrong else "")
        return (f"Training image #{tile.index:,}: <b>{tile.label_name}</b>, {verdict}<br>"
                f"{self.score_name}: {tile.caption}<br>"
                + (f"Colours: relevance to ±{limit_text(self.limits[position])}, this image's largest |R|<br>"
                   if tile.heatmap is not None else "")
                + "Click or press Enter to inspect it")

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

    def __init__(self, parent: QWidget | None = None, columns: int = 3, capacity: int = 0):
        """`capacity`: the tiles each grid keeps room for, tiles or not. A panel that grew when they came
        made the Importance view taller than the window, which then grew and drew everything again."""
        super().__init__(parent)
        rows = max(1, -(-capacity // columns))
        self.title = QLabel()
        self.title.setStyleSheet("font-weight: bold")
        # Each tile is drawn to its own largest |R| (GalleryGrid.limits), so one scale of ±1 serves all.
        self.scale = RelevanceScale(
            title="relevance ÷ each image's largest |R|", orientation=Qt.Orientation.Horizontal, length=90,
            tip=("The colours over the images: blue is relevance against the predicted class, white none, red "
                 "relevance for it. Each image is scaled to its own largest |relevance| (its tooltip says how "
                 "large), so ±1 is that image's strongest pixel; compare patterns between images, not strengths."))
        self.scale.setObjectName("galleryScale")
        self.scale.set_limit(1.0)
        keep_space_when_hidden(self.scale).setVisible(False)  # the title row keeps its height, tiles or not
        self.note = QLabel()  # the last line of the panel: nothing under it moves when it comes or goes
        self.note.setWordWrap(True)
        keep_space_when_hidden(self.note)  # and the panel is as tall with it as without
        self.by_relevance = GalleryGrid(columns=columns, score_name="Relevance reaching the neuron", rows=rows)
        self.by_relevance.setObjectName("galleryByRelevance")
        self.by_activation = GalleryGrid(columns=columns, score_name="The neuron's activation", rows=rows)
        self.by_activation.setObjectName("galleryByActivation")
        grids = QHBoxLayout()
        grids.setSpacing(16)
        for text, tip, grid in (
                ("Most relevant (by R)", ("Training images in which this neuron carries the most relevance "
                                          "(LRP); the number is that relevance, R"), self.by_relevance),
                ("Most active (by activation)", ("Training images on which this neuron's activation is highest; "
                                                 "the number is the activation"), self.by_activation)):
            column = QVBoxLayout()
            column.setSpacing(2)
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
        layout.setSpacing(2)
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.title, 1)
        header.addWidget(self.scale)
        layout.addLayout(header)
        layout.addWidget(self.stack, 1)
        self.stack.currentChanged.connect(lambda _: self.scale.setVisible(self.stack.currentWidget() is self.content))

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
