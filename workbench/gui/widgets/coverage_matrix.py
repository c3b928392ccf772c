"""A coverage matrix: how many inputs reached each cell, or which of two test sets reached it (pyqtgraph).

Counts use the sequential count map (viridis) with a colour bar, linear or logarithmic; cells no
input reached are painted in a neutral grey outside the map, so covered and
uncovered never look alike. The difference mode paints each cell by who covers it: only set A, only
set B (each in its set's colour), both, or neither (the same grey). Rows that can never be covered
(a KMNC neuron constant on the training data) are hatched. Thin lines separate the cells while they
are large enough to see. Hovering reads a cell out (and shows it as a tooltip); clicking selects it
and emits `cell_clicked(row, col)`. Owners put axis headers into the `top` and `left` slots.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QCursor, QPalette, QPen
from PySide6.QtWidgets import QApplication, QGraphicsRectItem, QToolTip

from workbench.gui.plotting.colors import (
    BOTH_SETS,
    COUNT_COLORMAP,
    MARKED,
    NEVER_COVERABLE,
    UNCOVERED,
)
from workbench.gui.plotting.plot_style import cache_axes, fit_axis_title, keep_axis_title_whole
from workbench.gui.widgets.neuron_bars import ReadoutItem

MIN_GRID_PX = 6  # cells narrower than this get no separating lines: they would hide the colours
LOG_TICKS = (1, 2, 5)


def rgba(color: QColor) -> np.ndarray:
    return np.array([color.red(), color.green(), color.blue(), 255], np.uint8)


def log_ticks(high: float) -> list[tuple[float, str]]:
    """Colour-bar ticks at their log10 positions up to 10**high: 1, 2, 5, 10, 20, … over two decades
    or less, the decades alone over more (the labels would crowd a short bar)."""
    steps = LOG_TICKS if high <= 2 else (1,)
    ticks, decade = [], 1
    while decade <= 10 ** high * 1.0001:
        for step in steps:
            value = step * decade
            if value <= 10 ** high * 1.0001:
                ticks.append((float(np.log10(value)), f"{value:,}"))
        decade *= 10
    return ticks


class CoverageMatrix(pg.GraphicsLayoutWidget):
    """`set_counts(counts, log)` or `set_difference(a, b, color_a, color_b)`; `describe(row, col)` reads cells."""

    cell_clicked = Signal(int, int)
    cell_hovered = Signal(int, int)

    def __init__(self, parent=None, describe: Callable[[int, int], str] | None = None, zoomable: bool = False):
        super().__init__(parent)
        self.describe = describe or (lambda r, c: f"row {r}, column {c}: {int(self.counts[r, c]):,}")
        self.counts = np.zeros((0, 0), np.int64)  # what the count mode shows
        self.covered_by: tuple[np.ndarray, np.ndarray] | None = None  # difference mode: (A, B) masks
        self.mode = "counts"
        self.log = True
        self.levels = (0.0, 1.0)
        self.selected: tuple[int, int] | None = None
        self.readout_text = ""
        self.hint = "Hover over a cell to read it; click it for its inputs."
        self.ci.setContentsMargins(6, 6, 6, 6)
        self.ci.setSpacing(2)

        self.plot = cache_axes(pg.PlotItem())
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.setMouseEnabled(zoomable, zoomable)
        self.plot.vb.setLimits(xMin=0, yMin=0)
        for side in ("left", "bottom"):
            self.plot.getAxis(side).setStyle(tickLength=0)
        self.count_image = pg.ImageItem(axisOrder="row-major")
        self.mask_image = pg.ImageItem(axisOrder="row-major")  # uncovered cells, or the difference categories
        self.plot.addItem(self.count_image)
        self.plot.addItem(self.mask_image)
        self.grid = pg.PlotCurveItem(connect="pairs")
        self.plot.addItem(self.grid)
        self.colormap = pg.colormap.get(COUNT_COLORMAP)
        self.bar = pg.ColorBarItem(values=self.levels, colorMap=self.colormap, interactive=False,
                                   colorMapMenu=False, width=16)
        self.bar.setImageItem(self.count_image)
        keep_axis_title_whole(self.bar.axis)  # a long colour-bar title wraps instead of being cut
        # The chosen cell: a white frame around a dark one, visible on every colour of the map.
        self.outline_halo, self.outline = QGraphicsRectItem(), QGraphicsRectItem()
        self.row_outline = QGraphicsRectItem()
        for item, color, width in ((self.outline_halo, QColor("white"), 5), (self.outline, QColor("#111111"), 2),
                                   (self.row_outline, MARKED, 2)):
            pen = QPen(color, width)
            pen.setCosmetic(True)
            item.setPen(pen)
            item.setVisible(False)
            item.setZValue(10)
            self.plot.addItem(item)
        self._hatches: list[QGraphicsRectItem] = []
        self.unavailable_rows: list[int] = []

        self.addItem(self.plot, row=1, col=1)
        self.addItem(self.bar, row=1, col=2)
        self.readout = ReadoutItem()
        self.addItem(self.readout, row=3, col=0, colspan=3)
        self.ci.layout.setRowStretchFactor(1, 1)
        self.ci.layout.setColumnStretchFactor(1, 1)
        self.plot.vb.sigResized.connect(self._draw_grid)
        self.plot.vb.sigRangeChanged.connect(lambda *_: self._draw_grid())
        self.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.scene().sigMouseClicked.connect(self._on_clicked)

    def _text_color(self) -> QColor:
        return QColor(self.plot.getAxis("left").textPen().color())

    # --- content -------------------------------------------------------------------------------------

    def set_counts(self, counts: np.ndarray, log: bool = True, units: str = "inputs") -> None:
        """Show how many inputs reached each cell; cells with none get the uncovered grey."""
        counts = np.asarray(counts, dtype=np.int64)
        self.counts, self.mode, self.log, self.covered_by = counts, "counts", bool(log), None
        high = float(counts.max(initial=0))
        if log:
            values = np.log10(np.maximum(counts, 1)).astype(np.float32)
            self.levels = (0.0, max(float(np.log10(max(high, 1.0))), 1.0))
        else:
            values = counts.astype(np.float32)
            self.levels = (0.0, max(high, 1.0))
        self.count_image.setImage(np.ascontiguousarray(values), levels=self.levels)
        self.count_image.setVisible(True)
        mask = np.zeros(counts.shape + (4,), np.uint8)
        mask[counts == 0] = rgba(UNCOVERED)
        self._set_mask(mask)
        self.bar.setLevels(self.levels)
        self.bar.axis.setTicks([log_ticks(self.levels[1])] if log else None)
        self.bar.axis.setLabel(f"{units} (log)" if log else units)
        fit_axis_title(self.bar.axis)
        self.bar.setVisible(True)
        self._after_content()

    def set_difference(self, covered_a: np.ndarray, covered_b: np.ndarray, color_a: QColor,
                       color_b: QColor) -> None:
        """Paint each cell by who covers it: only A, only B, both, or neither (uncovered grey)."""
        a, b = np.asarray(covered_a, bool), np.asarray(covered_b, bool)
        self.mode, self.covered_by = "difference", (a, b)
        self.counts = a.astype(np.int64) + 2 * b.astype(np.int64)
        mask = np.empty(a.shape + (4,), np.uint8)
        mask[...] = rgba(UNCOVERED)
        mask[a & ~b] = rgba(color_a)
        mask[b & ~a] = rgba(color_b)
        mask[a & b] = rgba(BOTH_SETS)
        self.count_image.setVisible(False)
        self._set_mask(mask)
        self.bar.setVisible(False)
        self._after_content()

    def _set_mask(self, mask: np.ndarray) -> None:
        rows, cols = mask.shape[:2]
        self.mask_image.setImage(np.ascontiguousarray(mask), levels=(0, 255))
        for image in (self.count_image, self.mask_image):
            image.setRect(QRectF(0, 0, cols, rows))

    def _after_content(self) -> None:
        rows, cols = self.counts.shape
        self.plot.vb.setLimits(xMin=0, xMax=max(cols, 1), yMin=0, yMax=max(rows, 1))
        self.plot.setXRange(0, max(cols, 1), padding=0)
        self.plot.setYRange(0, max(rows, 1), padding=0)
        if self.selected is not None and not (self.selected[0] < rows and self.selected[1] < cols):
            self.selected = None
        self._draw_outline()
        self._draw_grid()
        self.set_readout(self.hint)

    def set_unavailable_rows(self, rows, cols: int) -> None:
        """Hatch whole rows (of `cols` cells) that can never be covered."""
        for item in self._hatches:
            self.plot.removeItem(item)
        self.unavailable_rows = [int(r) for r in rows]
        self._hatches = []
        for r in self.unavailable_rows:
            item = QGraphicsRectItem(QRectF(0, r, cols, 1))
            item.setBrush(QBrush(NEVER_COVERABLE, Qt.BrushStyle.BDiagPattern))
            pen = QPen(NEVER_COVERABLE)
            pen.setCosmetic(True)
            item.setPen(pen)
            item.setZValue(5)
            self.plot.addItem(item)
            self._hatches.append(item)

    def _draw_grid(self) -> None:
        """Lines between cells in the plot's background colour, while cells are big enough to see them."""
        rows, cols = self.counts.shape
        width, height = self.plot.vb.width(), self.plot.vb.height()
        (x0, x1), (y0, y1) = self.plot.vb.viewRange()
        if not rows or not cols or width <= 0 or height <= 0:
            self.grid.setData([], [])
            return
        cell_px = min(width / max(x1 - x0, 1e-9), height / max(y1 - y0, 1e-9))
        if cell_px < MIN_GRID_PX:
            self.grid.setData([], [])
            return
        xs = np.arange(1, cols, dtype=float)
        ys = np.arange(1, rows, dtype=float)
        x = np.concatenate([np.repeat(xs, 2), np.tile([0.0, cols], len(ys))])
        y = np.concatenate([np.tile([0.0, rows], len(xs)), np.repeat(ys, 2)])
        background = QApplication.palette().color(QPalette.ColorRole.Base)
        self.grid.setData(x, y, pen=pg.mkPen(background, width=1.5 if cell_px >= 16 else 1))

    # --- selection -----------------------------------------------------------------------------------

    def select_cell(self, row: int | None, col: int | None = None) -> None:
        self.selected = None if row is None else (int(row), int(col))
        self._draw_outline()

    def _draw_outline(self) -> None:
        for item in (self.outline_halo, self.outline):
            item.setVisible(self.selected is not None)
            if self.selected is not None:
                r, c = self.selected
                item.setRect(QRectF(c, r, 1, 1))

    def highlight_row(self, row: int | None) -> None:
        """Outline one whole row (the linked selection's neuron)."""
        if row is None or not 0 <= row < self.counts.shape[0]:
            self.row_outline.setVisible(False)
            return
        self.row_outline.setRect(QRectF(0, row, self.counts.shape[1], 1))
        self.row_outline.setVisible(True)

    # --- hover and click -----------------------------------------------------------------------------

    def cell_at(self, scene_pos: QPointF) -> tuple[int, int] | None:
        rows, cols = self.counts.shape
        if not rows or not self.plot.vb.sceneBoundingRect().contains(scene_pos):
            return None
        point = self.plot.vb.mapSceneToView(scene_pos)
        r, c = int(np.floor(point.y())), int(np.floor(point.x()))
        return (r, c) if 0 <= r < rows and 0 <= c < cols else None

    def cell_center(self, row: int, col: int) -> QPointF:
        """The scene position of a cell's centre (tests click it)."""
        return self.plot.vb.mapViewToScene(QPointF(col + 0.5, row + 0.5))

    def _on_mouse_moved(self, scene_pos: QPointF) -> None:
        cell = self.cell_at(scene_pos)
        if cell is None:
            QToolTip.hideText()
            return
        self.show_cell(*cell)
        QToolTip.showText(QCursor.pos(), self.readout_text, self)
        self.cell_hovered.emit(*cell)

    def _on_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        cell = self.cell_at(event.scenePos())
        if cell is not None:
            self.select_cell(*cell)
            self.cell_clicked.emit(*cell)

    def show_cell(self, row: int, col: int) -> None:
        """Put one cell's read-out up, as hovering it would."""
        self.set_readout(self.describe(row, col))

    def set_readout(self, text: str) -> None:
        self.readout_text = text
        self.readout.setText(text, size="9pt")
