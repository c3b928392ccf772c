"""A class × neuron relevance heatmap with the relevance per neuron as bars underneath (pyqtgraph).

Signed relevance uses the diverging map centred at 0 with symmetric levels and a colour bar with
units, as every heatmap of the workbench. Column n is neuron n, covering [n, n+1]; the bars below stand on the same
columns (shared x axis, equal axis widths), so a neuron's bar sits under its column. A strip above
the matrix marks the top-m neurons over all classes with triangles; dots mark each class's own
top-m; the selected neuron's column is outlined. A class with no correctly classified inputs, and
any NaN, is drawn hatched in a neutral grey outside the colour map, and the read-out says why. A
legend line under the read-out says what the triangles, dots, outline and hatching mean (it is part
of the scene, so exported images carry it too).
Hovering reads a cell or a bar out; clicking one emits `neuron_clicked(neuron)`.
"""

from __future__ import annotations

from html import escape
from typing import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFontMetrics, QPen
from PySide6.QtWidgets import QGraphicsRectItem

from workbench.gui.plotting.colors import EMPTY_CELL, MARKED, RELEVANCE_COLORMAP
from workbench.gui.plotting.plot_style import (cache_axes, fit_axis_title, keep_axis_title_whole, lay_out_before_painting,
                                      set_ticks)
from workbench.gui.widgets.neuron_bars import NeuronBarsPlot, ReadoutItem, neuron_ticks
from workbench.gui.widgets.relevance_overlay import symmetric_limit

MARK_STRIP = 1.0  # height of the top-m strip above the matrix, in rows
EMPTY_SUFFIX = "  (none)"


def hatched_rect(rect: QRectF) -> QGraphicsRectItem:
    item = QGraphicsRectItem(rect)
    item.setBrush(QBrush(EMPTY_CELL, Qt.BrushStyle.BDiagPattern))
    pen = QPen(EMPTY_CELL)
    pen.setCosmetic(True)
    item.setPen(pen)
    return item


class RelevanceHeatmap(pg.GraphicsLayoutWidget):
    """`set_matrix(values, row_labels, empty_rows, units)`, then `set_marks`, `set_selected`, `bars`."""

    neuron_clicked = Signal(int)
    cell_hovered = Signal(int, int)

    def __init__(self, parent=None, describe_cell: Callable[[int, int, float], str] | None = None,
                 describe_bar: Callable[[int, float], str] | None = None):
        super().__init__(parent)
        self.describe_cell = describe_cell or (lambda r, c, v: f"class {r}, neuron {c}: {v:.4g}")
        self.describe_bar = describe_bar or (lambda n, v: f"neuron {n}: {v:.4g}")
        self.matrix = np.zeros((0, 0), np.float32)  # what is drawn; NaN where there is no value
        self.row_labels: list[str] = []
        self.empty_rows: list[int] = []
        self.levels = (-1.0, 1.0)
        self.top_columns = np.zeros(0, np.int64)
        self.class_top: list[np.ndarray] = []
        self.selected: int | None = None
        self.readout_text = ""
        self.ci.setContentsMargins(6, 6, 6, 6)
        self.ci.setSpacing(4)

        self.plot = cache_axes(pg.PlotItem())
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.setLabel("left", "True class")
        for side in ("left", "bottom"):
            self.plot.getAxis(side).setStyle(tickLength=0)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.colormap = pg.colormap.get(RELEVANCE_COLORMAP)
        self.bar = pg.ColorBarItem(values=self.levels, colorMap=self.colormap, interactive=False, colorMapMenu=False,
                                   width=16)
        self.bar.setImageItem(self.image)
        keep_axis_title_whole(self.bar.axis)  # a long colour-bar title wraps instead of being cut
        self.top_marks = pg.ScatterPlotItem(symbol="t", size=11, pen=pg.mkPen(None), brush=pg.mkBrush(MARKED))
        self.class_marks = pg.ScatterPlotItem(symbol="o", size=6, pen=pg.mkPen("w", width=1),
                                              brush=pg.mkBrush("#202020"))
        self.outline = QGraphicsRectItem()
        pen = QPen(QColor(self.plot.getAxis("left").textPen().color()), 2)
        pen.setCosmetic(True)
        self.outline.setPen(pen)
        self.outline.setVisible(False)
        for item in (self.top_marks, self.class_marks, self.outline):
            self.plot.addItem(item)
        self._hatches: list[QGraphicsRectItem] = []

        self.bars = NeuronBarsPlot("Relevance", "Neuron")
        self.bars.setXLink(self.plot)
        self.addItem(self.plot, row=0, col=0)
        self.addItem(self.bar, row=0, col=1)
        self.addItem(self.bars, row=1, col=0)
        self.readout = ReadoutItem()
        self.addItem(self.readout, row=2, col=0, colspan=2)
        self.legend = ReadoutItem(lines=1)  # wraps when narrow, so no entry is cut
        self.legend_text = ""
        self.addItem(self.legend, row=3, col=0, colspan=2)
        self.ci.layout.setRowStretchFactor(0, 3)
        self.ci.layout.setRowStretchFactor(1, 2)
        self.plot.vb.sigResized.connect(self._update_ticks)
        self._layout = None  # what the axes, ticks and hatching were laid out for (`set_matrix`)
        self.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.scene().sigMouseClicked.connect(self._on_clicked)

    # --- content -----------------------------------------------------------------------------------

    def set_matrix(self, values: np.ndarray, row_labels: list[str], empty_rows=(), units: str = "relevance",
                   neuron_title: str = "Neuron") -> None:
        """Show `values` (rows × neurons, signed); `empty_rows` have no value and are hatched."""
        matrix = np.array(values, dtype=np.float32)
        rows, cols = matrix.shape
        self.empty_rows = [int(r) for r in empty_rows]
        matrix[self.empty_rows] = np.nan
        self.matrix = np.ascontiguousarray(matrix)
        self.row_labels = list(row_labels)
        limit = symmetric_limit(matrix)
        self.levels = (-limit, limit)
        # The image gets explicit levels and no NaN: missing cells are 0, hatched over.
        self.image.setImage(np.ascontiguousarray(np.nan_to_num(matrix, nan=0.0, posinf=0.0, neginf=0.0)),
                            levels=self.levels)
        self.bar.setLevels(self.levels)
        layout = (rows, cols, tuple(self.row_labels), tuple(self.empty_rows), units, neuron_title,
                  np.isnan(matrix).tobytes())
        if layout == self._layout:  # a partial result of the same matrix: the axes, ticks and marks stand
            return
        self._layout = layout
        self.image.setRect(QRectF(0, 0, cols, rows))
        self.bar.axis.setLabel(units)
        fit_axis_title(self.bar.axis)
        self._hatch()
        self.plot.setXRange(0, cols, padding=0)
        self.plot.setYRange(-MARK_STRIP, rows, padding=0)
        self.bars.setLabel("bottom", neuron_title)
        self._fit_left_axes()
        self._draw_marks()
        self._update_ticks()
        self._update_legend()
        note = " Hatched: no correctly classified training images." if self.empty_rows or np.isnan(matrix).any() else ""
        self.set_readout("Hover over a cell or a bar to read it; click one to select the neuron." + note)
        self._settle()

    def _settle(self) -> None:
        """The matrix, bars and colour bar laid out in their grid before the scene paints (see
        `lay_out_before_painting`): a new matrix had three paints."""
        self.ci.layout.activate()
        lay_out_before_painting(self.plot, self.bars, self.bar)

    def _hatch(self) -> None:
        for item in self._hatches:
            self.plot.removeItem(item)
        self._hatches = []
        rows, cols = self.matrix.shape
        missing = np.isnan(self.matrix)
        for r in range(rows):
            if missing[r].all():
                self._hatches.append(hatched_rect(QRectF(0, r, cols, 1)))
            else:
                self._hatches.extend(hatched_rect(QRectF(c, r, 1, 1)) for c in np.flatnonzero(missing[r]))
        for item in self._hatches:
            self.plot.addItem(item)

    def _fit_left_axes(self) -> None:
        """The same left-axis width above and below, so the bars stand under their columns."""
        axis = self.plot.getAxis("left")
        labels = self._row_tick_labels() + [f"top {max(1, len(self.top_columns))}"]
        widest = max(QFontMetrics(axis.font()).horizontalAdvance(t) for t in labels) if labels else 40
        width = widest + 40  # tick text, spacing and the rotated axis title
        for each in (axis, self.bars.getAxis("left")):
            if each.fixedWidth != width:  # an axis given its width again makes its picture again
                each.setWidth(width)

    def _row_tick_labels(self) -> list[str]:
        return [label + (EMPTY_SUFFIX if r in self.empty_rows else "") for r, label in enumerate(self.row_labels)]

    def set_marks(self, top_columns, class_top: list) -> None:
        """Triangles over the top-m neurons of all classes, dots on each class's own top-m cells."""
        self.top_columns = np.asarray(list(top_columns), dtype=np.int64)
        self.class_top = [np.asarray(list(c), dtype=np.int64) for c in class_top]
        self._fit_left_axes()
        self._draw_marks()
        self._update_ticks()
        self._update_legend()
        self._settle()

    def legend_entries(self) -> list[str]:
        """What the legend line says, one entry per kind of mark shown."""
        entries = []
        if len(self.top_columns):
            entries.append(f"▼ top {len(self.top_columns)} neurons over all classes")
        if any(len(row) for row in self.class_top):
            m = max(len(row) for row in self.class_top)
            entries.append(f"● a class's own top {m}")
        entries.append("▯ outline: the selected neuron")
        if self.empty_rows or np.isnan(self.matrix).any():
            entries.append("▨ hatched: no value (no correctly classified image, or NaN)")
        return entries

    def _update_legend(self) -> None:
        symbols = {"▼": MARKED.name(), "▨": EMPTY_CELL.name()}
        parts = []
        for entry in self.legend_entries():
            symbol, text = entry[0], escape(entry[2:])
            colour = symbols.get(symbol)
            mark = f"<span style='color:{colour}'>{symbol}</span>" if colour else symbol
            parts.append(f"{mark}&nbsp;{text}")
        self.legend_text = " · ".join(self.legend_entries())
        self.legend.setText("&nbsp;&nbsp; ".join(parts), size="9pt")

    def _draw_marks(self) -> None:
        self.top_marks.setData(x=self.top_columns + 0.5, y=np.full(len(self.top_columns), -MARK_STRIP / 2))
        xs = [c + 0.5 for row in self.class_top for c in row]
        ys = [r + 0.5 for r, row in enumerate(self.class_top) for _ in row]
        self.class_marks.setData(x=xs, y=ys)
        self._draw_outline()

    def set_selected(self, neuron: int | None) -> None:
        self.selected = neuron
        self._draw_outline()
        self.bars.set_selected(neuron)

    def _draw_outline(self) -> None:
        rows, cols = self.matrix.shape
        if self.selected is None or not 0 <= self.selected < cols:
            self.outline.setVisible(False)
            return
        self.outline.setRect(QRectF(self.selected, -MARK_STRIP, 1, rows + MARK_STRIP))
        self.outline.setVisible(True)

    def _update_ticks(self) -> None:
        cols = self.matrix.shape[1]
        if not cols:
            return
        column_px = self.plot.vb.width() / cols if self.plot.vb.width() > 0 else 0.0
        left = [(-MARK_STRIP / 2, f"top {len(self.top_columns)}")] if len(self.top_columns) else []
        left += [(r + 0.5, t) for r, t in enumerate(self._row_tick_labels())]
        set_ticks(self.plot.getAxis("bottom"), [neuron_ticks(cols, column_px, self.plot.getAxis("bottom"))])
        set_ticks(self.plot.getAxis("left"), [left])  # its width is fixed by `_fit_left_axes`

    # --- hover and click ---------------------------------------------------------------------------

    def cell_at(self, scene_pos: QPointF) -> tuple[int, int] | None:
        """(row, neuron) under a scene position; row −1 is the top-m strip."""
        rows, cols = self.matrix.shape
        if not rows or not self.plot.vb.sceneBoundingRect().contains(scene_pos):
            return None
        point = self.plot.vb.mapSceneToView(scene_pos)
        c, y = int(np.floor(point.x())), point.y()
        r = -1 if -MARK_STRIP <= y < 0 else int(np.floor(y))
        return (r, c) if -1 <= r < rows and 0 <= c < cols else None

    def cell_center(self, row: int, col: int) -> QPointF:
        """The scene position of a cell's centre (tests click it)."""
        return self.plot.vb.mapViewToScene(QPointF(col + 0.5, row + 0.5))

    def _on_mouse_moved(self, scene_pos: QPointF) -> None:
        cell = self.cell_at(scene_pos)
        if cell is not None:
            r, c = cell
            if r >= 0:
                self.set_readout(self.describe_cell(r, c, float(self.matrix[r, c])))
                self.cell_hovered.emit(r, c)
            else:
                self.set_readout(self.describe_bar(c, float(self.bars.values[c])) if len(self.bars.values) > c else "")
            return
        n = self.bars.column_at(scene_pos)
        if n is not None:
            self.set_readout(self.describe_bar(n, float(self.bars.values[n])))

    def _on_clicked(self, event) -> None:
        cell = self.cell_at(event.scenePos())
        neuron = cell[1] if cell is not None else self.bars.column_at(event.scenePos())
        if neuron is not None:
            self.neuron_clicked.emit(int(neuron))

    def show_cell(self, row: int, col: int) -> None:
        """Put one cell's read-out up, as hovering it would."""
        self.set_readout(self.describe_cell(row, col, float(self.matrix[row, col])))

    def set_readout(self, text: str) -> None:
        self.readout_text = text
        self.readout.setText(text, size="9pt")

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        # pyqtgraph resizes once while constructing the view, and again while closing it, when its
        # items are gone already (touching them then crashes).
        if hasattr(self, "bars") and not getattr(self, "closed", False):
            self._update_ticks()
