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

from workbench.gui.plotting.plot_style import cache_axes, set_ticks, show_grid
from workbench.gui.widgets.neuron_bars import ReadoutItem

FEW_POINTS = 12  # a curve with this many points or fewer shows each point as a dot


@dataclass
class Curve:
    title: str
    color: QColor
    inputs: np.ndarray  # measured inputs at each point
    percent: np.ndarray  # coverage in % at each point
    running: bool = False
    total: int = 0  # inputs the set holds: where its curve will end (0: its last point)


def headroom(top: float) -> float:
    """The y range's top for values up to `top`: the next of 1, 2, 5 × 10^k above it with a tenth to
    spare (1 for nothing above zero). A range that steps changes a few times while a set is measured,
    not at every batch."""
    wanted = top * 1.1 if np.isfinite(top) and top > 0 else 1.0
    decade = 10.0 ** np.floor(np.log10(wanted))
    return next(step * decade for step in (1, 2, 5, 10) if step * decade >= wanted)


def power_of_ten_text(k: int) -> str:
    """10**k as a short count: 1, 10, 100, 1k, 10k, 100k, 1M, …"""
    for power, suffix in ((9, "G"), (6, "M"), (3, "k")):
        if k >= power:
            return f"{10 ** (k - power)}{suffix}"
    return str(10 ** k)


class GrowthPlot(pg.GraphicsLayoutWidget):
    """`set_curves(criterion_title, curves, unit)`: unit "%" for coverage, a noun for counts (TKNP).

    The ranges stay put while sets are measured: x spans the largest set from the start, y steps up
    (`headroom`). Each change of range redraws the axes and the grid lines they draw across the plot,
    which was 15–30 ms of every batch's repaint; a new point alone repaints only its curve."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.curves: list[Curve] = []
        self._items: list[pg.PlotDataItem] = []  # one per drawn curve, in order
        self._look = None  # what the drawn items show: criterion, unit, each curve's title, colour, style
        self.unit = "%"
        self._ranges = None  # (x end in log10 units, y top) last set
        self.readout_text = ""
        self.ci.setContentsMargins(6, 6, 14, 6)  # room for the last count, centred on the right edge
        self.plot = cache_axes(self.addPlot(row=0, col=0))
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(False, False)
        show_grid(self.plot, x=True, y=True)
        self.plot.setLogMode(x=True, y=False)
        self.plot.setLabel("bottom", "Inputs measured (log scale)")
        self.plot.getAxis("bottom").setStyle(hideOverlappingLabels=False)
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
                # a set measured in one batch has one point, which a line alone does not show
                dots = {"symbol": "o", "symbolSize": 6, "symbolBrush": curve.color, "symbolPen": None} \
                    if int(keep.sum()) <= FEW_POINTS else {}
                self._items.append(self.plot.plot(curve.inputs[keep].astype(float), curve.percent[keep],
                                                  pen=pg.mkPen(curve.color, width=2, style=style),
                                                  name=curve.title + (" (measuring…)" if curve.running else ""),
                                                  **dots))
        top = max((float(np.nanmax(c.percent[c.inputs > 0])) for c in shown), default=0.0)
        end = max((max(c.total, float(c.inputs.max())) for c in shown), default=1.0)
        y_top = min(100.0, max(5.0, headroom(top))) if unit == "%" else max(1.0, headroom(top))
        ranges = (float(np.log10(max(end, 10.0))), y_top)  # the view works in log10 units along x
        if ranges != self._ranges:
            self._ranges = ranges
            self.plot.setRange(xRange=(0.0, ranges[0]), yRange=(0.0, y_top), padding=0.02)
            # a line and a count at each power of ten: the minor lines of a log axis, as bright as
            # these in an opaque grid, crowded the plot
            set_ticks(self.plot.getAxis("bottom"),
                      [[(float(k), power_of_ten_text(k)) for k in range(int(np.ceil(ranges[0])) + 1)]])
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
