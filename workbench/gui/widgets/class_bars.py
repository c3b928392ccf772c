"""Horizontal bars of a per-class percentage, each class in its own colour, value at the bar's end."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF

from workbench.gui.plotting.colors import class_color
from workbench.gui.plotting.plot_style import cache_axes, set_tick_texts, set_ticks, show_grid
from workbench.gui.widgets.view_labels import ViewLabels

VALUE_GAP = 1.0  # % between a bar's end and its value


class ClassBars(pg.PlotWidget):
    """`set_values(names, fractions)`: one bar per class, 0–100 %; a missing value draws no bar."""

    def __init__(self, parent=None, axis_title: str = "Accuracy (%)"):
        super().__init__(parent)
        self.plot = cache_axes(self.getPlotItem())
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.setLabel("bottom", axis_title)
        show_grid(self.plot, x=True, alpha=0.25)
        self.plot.getAxis("left").setStyle(tickLength=0)
        self.values = np.zeros(0)
        self._items: list = []
        self.labels = ViewLabels(anchor=(0, 0.5), color=self.plot.getAxis("bottom").textPen().color())
        self.labels.setZValue(5)
        self.plot.addItem(self.labels)

    def set_values(self, names: list[str], fractions: list[float | None]) -> None:
        for item in self._items:
            self.plot.removeItem(item)
        self._items = []
        k = len(names)
        self.values = np.array([np.nan if f is None else 100.0 * f for f in fractions], dtype=float)
        brushes = [pg.mkBrush(class_color(i)) for i in range(k)]
        widths = np.nan_to_num(self.values, nan=0.0)
        bars = pg.BarGraphItem(x0=np.zeros(k), y=np.arange(k), height=0.7, width=widths, brushes=brushes,
                               pen=pg.mkPen(None))
        self.plot.addItem(bars)
        self._items.append(bars)
        self.labels.set_labels([(0.0 if np.isnan(v) else float(v) + VALUE_GAP, float(i),
                                 "—" if np.isnan(v) else f"{v:.1f} %", None) for i, v in enumerate(self.values)],
                               QRectF(0, -0.5, 115, k))
        set_tick_texts(self.plot.getAxis("left"), list(enumerate(names)))
        self.plot.setXRange(0, 115, padding=0)  # room for the value labels after a full bar
        self.plot.setYRange(-0.5, k - 0.5, padding=0.02)
        set_ticks(self.plot.getAxis("bottom"), [[(v, str(v)) for v in range(0, 101, 20)]])
