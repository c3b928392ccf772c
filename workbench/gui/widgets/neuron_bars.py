"""Relevance per neuron as a bar chart: the top-m neurons marked, the selected one highlighted.

Neuron n's bar stands at x = n + 0.5, the centre of column n of the relevance heatmap, so the
two line up when they share an x axis. `NeuronBarsPlot` is the plot item (the heatmap widget puts
one under its matrix); `NeuronBars` is a stand-alone widget with a hover read-out.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QSizeF, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics

from workbench.gui.plotting.colors import MARKED, UNMARKED
from workbench.gui.plotting.plot_style import (cache_axes, fit_tick_text_height, fit_value_axis, lay_out_before_painting,
                                      set_ticks, show_grid)

TICK_STEPS = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000)


def neuron_ticks(count: int, column_px: float, axis: pg.AxisItem) -> list[tuple[float, str]]:
    """Neuron ids at column centres, every n-th one so that the labels do not overlap."""
    if count <= 0:
        return []
    widest = QFontMetrics(axis.font()).horizontalAdvance(str(count - 1)) + 8
    step = next((s for s in TICK_STEPS if s * column_px >= widest), TICK_STEPS[-1])
    return [(n + 0.5, str(n)) for n in range(0, count, step)]


class ReadoutItem(pg.LabelItem):
    """A hover read-out that wraps to the width the layout gives it, two lines high at least.

    (pyqtgraph's `LabelItem` asks for the width of its whole text, so a long read-out would widen
    the plot beyond its window.)
    """

    LINES = 2

    def __init__(self, lines: int = LINES):
        super().__init__(justify="left")
        self.LINES = lines

    def updateMin(self) -> None:
        width = self.rect().width()
        self.item.setTextWidth(width if width > 40 else -1)
        line = QFontMetrics(self.item.font()).height() * 1.1
        height = max(self.item.boundingRect().height(), self.LINES * line)
        self.setMinimumWidth(0)
        self.setMinimumHeight(height)
        self._sizeHint = {Qt.SizeHint.MinimumSize: (0, height), Qt.SizeHint.PreferredSize: (0, height),
                          Qt.SizeHint.MaximumSize: (-1, -1), Qt.SizeHint.MinimumDescent: (0, 0)}
        self.updateGeometry()

    def sizeHint(self, hint, constraint):
        return QSizeF(*self._sizeHint.get(hint, (0, 0)))


class NeuronBarsPlot(pg.PlotItem):
    """`set_values(values, marked, selected)`; `column_at(scene_pos)` says which neuron is under the mouse."""

    def __init__(self, value_title: str = "Relevance", neuron_title: str = "Neuron"):
        super().__init__()
        cache_axes(self)
        self.setMenuEnabled(False)
        self.setMouseEnabled(False, False)
        self.hideButtons()
        show_grid(self, y=True, alpha=0.25)
        self.setLabel("left", value_title)
        self.setLabel("bottom", neuron_title)
        self.getAxis("bottom").setStyle(tickLength=0)
        fit_tick_text_height(self.getAxis("bottom"))
        self.values = np.zeros(0)
        self.marked = np.zeros(0, np.int64)
        self.selected: int | None = None
        self.band = pg.BarGraphItem(x=[0], height=[0], width=1.0, brush=pg.mkBrush(0, 0, 0, 28), pen=pg.mkPen(None))
        self.band.setZValue(-1)
        self.band.setVisible(False)
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8)
        self.zero = pg.InfiniteLine(pos=0, angle=0, pen=pg.mkPen(self.getAxis("left").textPen().color(), width=1))
        for item in (self.band, self.bars, self.zero):
            self.addItem(item)
        self.vb.sigResized.connect(self._update_ticks)

    def set_values(self, values: np.ndarray, marked=(), selected: int | None = None) -> None:
        """Show one value per neuron; NaN values draw no bar."""
        self.values = np.asarray(values, dtype=np.float64)
        self.marked = np.asarray(list(marked), dtype=np.int64)
        self.selected = selected
        self._redraw()

    def set_marked(self, marked) -> None:
        self.marked = np.asarray(list(marked), dtype=np.int64)
        self._redraw()

    def set_selected(self, neuron: int | None) -> None:
        self.selected = neuron
        self._redraw()

    def _redraw(self) -> None:
        n = len(self.values)
        heights = np.nan_to_num(self.values, nan=0.0, posinf=0.0, neginf=0.0)
        is_marked = np.zeros(n, bool)
        is_marked[self.marked[(self.marked >= 0) & (self.marked < n)]] = True
        # One brush and pen object per look, shared by the bars: a new one per bar per redraw was most of
        # the cost of redrawing the running totals.
        marked_brush, unmarked_brush = pg.mkBrush(MARKED), pg.mkBrush(UNMARKED)
        brushes = [marked_brush if m else unmarked_brush for m in is_marked]
        no_pen, outline = pg.mkPen(None), pg.mkPen(QColor(self.getAxis("left").textPen().color()), width=1.5)
        pens = [no_pen] * n
        if self.selected is not None and 0 <= self.selected < n:
            pens[self.selected] = outline
        # (pyqtgraph 0.14 fails on an empty `pens` list: no bars get no per-bar pens.)
        self.bars.setOpts(x=np.arange(n) + 0.5, height=heights, width=0.8, brushes=brushes or None,
                          pens=pens or None)
        low, high = (float(heights.min()), float(heights.max())) if n else (0.0, 1.0)
        low, high = min(0.0, low), max(0.0, high)
        if high - low <= 0:
            high = 1.0
        pad = 0.06 * (high - low)
        self.setXRange(0, max(n, 1), padding=0)
        self.setYRange(low - (pad if low < 0 else 0), high + pad, padding=0)
        fit_value_axis(self.getAxis("left"), low - pad, high + pad, self.vb.height())
        lay_out_before_painting(self)
        if self.selected is not None and 0 <= self.selected < n:
            self.band.setOpts(x=[self.selected + 0.5], y0=[low - pad], height=[high - low + 2 * pad], width=1.0)
            self.band.setVisible(True)
        else:
            self.band.setVisible(False)
        self._update_ticks()

    def _update_ticks(self) -> None:
        n = len(self.values)
        column_px = self.vb.width() / n if n and self.vb.width() > 0 else 0.0
        set_ticks(self.getAxis("bottom"), [neuron_ticks(n, column_px, self.getAxis("bottom"))])

    def column_at(self, scene_pos: QPointF) -> int | None:
        if not len(self.values) or not self.vb.sceneBoundingRect().contains(scene_pos):
            return None
        x = self.vb.mapSceneToView(scene_pos).x()
        n = int(np.floor(x))
        return n if 0 <= n < len(self.values) else None


class NeuronBars(pg.GraphicsLayoutWidget):
    """A `NeuronBarsPlot` with a hover read-out; clicking a bar emits `neuron_clicked(neuron)`."""

    neuron_clicked = Signal(int)

    def __init__(self, parent=None, value_title: str = "Relevance", neuron_title: str = "Neuron",
                 describe: Callable[[int, float], str] | None = None):
        super().__init__(parent)
        self.ci.setContentsMargins(4, 4, 4, 4)
        self.plot = NeuronBarsPlot(value_title, neuron_title)
        self.addItem(self.plot, row=0, col=0)
        self.readout = ReadoutItem()
        self.addItem(self.readout, row=1, col=0)
        self.describe = describe or (lambda n, v: f"Neuron {n}: {v:.4g}")
        self.readout_text = ""
        self.scene().sigMouseMoved.connect(self._on_moved)
        self.scene().sigMouseClicked.connect(self._on_clicked)

    def set_values(self, values, marked=(), selected: int | None = None, hint: str = "") -> None:
        self.plot.set_values(values, marked, selected)
        self.set_readout(hint or "Hover over a bar to read it; click it to select the neuron.")

    def set_readout(self, text: str) -> None:
        self.readout_text = text
        self.readout.setText(text, size="9pt")

    def _on_moved(self, pos: QPointF) -> None:
        n = self.plot.column_at(pos)
        if n is not None:
            self.set_readout(self.describe(n, float(self.plot.values[n])))

    def _on_clicked(self, event) -> None:
        n = self.plot.column_at(event.scenePos())
        if n is not None:
            self.neuron_clicked.emit(n)
