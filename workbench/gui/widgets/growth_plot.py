"""Coverage growth: one criterion's coverage against the number of inputs measured, one curve per set.

The x axis is logarithmic — sets of a thousand and of sixty thousand inputs share one plot, and the
early inputs are where coverage grows. Each set keeps its colour from the summary table; a set still
being measured is drawn dashed. Hovering reads the nearest point of each curve out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor

from workbench.gui.plot_style import cache_axes, show_grid
from workbench.gui.widgets.neuron_bars import ReadoutItem


@dataclass
class Curve:
    title: str
    color: QColor
    inputs: np.ndarray  # measured inputs at each point
    percent: np.ndarray  # coverage in % at each point
    running: bool = False


class GrowthPlot(pg.GraphicsLayoutWidget):
    """`set_curves(criterion_title, curves, unit)`: unit "%" for coverage, a noun for counts (TKNP)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.curves: list[Curve] = []
        self._items: list[pg.PlotDataItem] = []  # one per drawn curve, in order
        self._look = None  # what the drawn items show: criterion, unit, each curve's title, colour, style
        self.unit = "%"
        self.readout_text = ""
        self.ci.setContentsMargins(6, 6, 6, 6)
        self.plot = cache_axes(self.addPlot(row=0, col=0))
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(False, False)
        show_grid(self.plot, x=True, y=True)
        self.plot.setLogMode(x=True, y=False)
        self.plot.setLabel("bottom", "Inputs measured (log scale)")
        self.legend = self.plot.addLegend(offset=(-10, -10), labelTextSize="9pt")  # bottom right: curves rise
        self.readout = ReadoutItem()
        self.readout.LINES = 1
        self.addItem(self.readout, row=1, col=0)
        self.scene().sigMouseMoved.connect(self._on_mouse_moved)

    def set_curves(self, criterion: str, curves: list[Curve], unit: str = "%") -> None:
        self.curves, self.unit = list(curves), unit
        shown = [c for c in self.curves if (c.inputs > 0).any()]
        look = (criterion, unit, [(c.title, c.color.name(), c.running) for c in shown])
        if look == self._look:  # the same curves grown by a batch: new points, no new items or legend
            for item, curve in zip(self._items, shown):
                keep = curve.inputs > 0
                item.setData(curve.inputs[keep].astype(float), curve.percent[keep])
        else:
            self._look = look
            self.plot.clear()
            self.legend.clear()
            self.plot.setLabel("left", f"{criterion} coverage ({unit})")
            self._items = []
            for curve in shown:
                keep = curve.inputs > 0
                style = Qt.PenStyle.DashLine if curve.running else Qt.PenStyle.SolidLine
                self._items.append(self.plot.plot(curve.inputs[keep].astype(float), curve.percent[keep],
                                                  pen=pg.mkPen(curve.color, width=2, style=style),
                                                  name=curve.title + (" (measuring…)" if curve.running else "")))
        top = max((float(np.nanmax(c.percent[c.inputs > 0])) for c in shown), default=0.0)
        if unit == "%":
            self.plot.setYRange(0, min(100.0, max(5.0, top * 1.1)), padding=0)
        else:
            self.plot.enableAutoRange(y=True)
        self.set_readout("Hover over the plot to read the curves." if self.curves else "")

    def _on_mouse_moved(self, scene_pos: QPointF) -> None:
        if not self.curves or not self.plot.vb.sceneBoundingRect().contains(scene_pos):
            return
        x = 10 ** self.plot.vb.mapSceneToView(scene_pos).x()  # the view works in log10 units
        parts = []
        for curve in self.curves:
            if not len(curve.inputs):
                continue
            i = int(np.argmin(np.abs(curve.inputs - x)))
            value = f"{curve.percent[i]:.1f} %" if self.unit == "%" else f"{curve.percent[i]:,.0f} {self.unit}"
            parts.append(f"<span style='color:{curve.color.name()}'>■</span> {curve.title}: {value} after "
                         f"{int(curve.inputs[i]):,} inputs")
        self.set_readout(" · ".join(parts))

    def set_readout(self, text: str) -> None:
        self.readout_text = text
        self.readout.setText(text, size="9pt")
