"""A generator's training losses per epoch, one line per loss (a VAE's total, BCE and KL; a GAN's two)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from workbench.gui.plotting.colors import CLASS_PALETTE
from workbench.gui.plotting.plot_style import cache_axes, show_grid


class LossCurves(pg.PlotWidget):
    """`set_curve(rows)` with rows {"epoch", <loss name>: value, "seconds"} as a generator's card holds them."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[dict] = []
        plot = self.plot_item = cache_axes(self.getPlotItem())
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(False, False)
        plot.hideButtons()
        show_grid(plot, x=True, y=True)
        plot.setLabel("bottom", "Epoch")
        plot.setLabel("left", "Mean loss per batch")
        plot.getAxis("left").enableAutoSIPrefix(False)
        self.legend = plot.addLegend(offset=(-10, 10))
        self.legend.setLabelTextColor(plot.getAxis("left").textPen().color())
        self.curves: dict[str, pg.PlotDataItem] = {}

    def set_curve(self, rows: list[dict]) -> None:
        self.rows = [dict(r) for r in rows]
        names = [k for k in dict.fromkeys(k for r in self.rows for k in r) if k not in ("epoch", "seconds")]
        for name in [n for n in self.curves if n not in names]:
            self.plot_item.removeItem(self.curves.pop(name))
            self.legend.removeItem(name)
        epochs = np.array([r.get("epoch", i + 1) for i, r in enumerate(self.rows)], dtype=np.float64)
        for i, name in enumerate(names):
            values = np.array([r.get(name, np.nan) for r in self.rows], dtype=np.float64)
            if name not in self.curves:
                color = CLASS_PALETTE[i % len(CLASS_PALETTE)]
                self.curves[name] = self.plot_item.plot([], [], name=name, pen=pg.mkPen(color, width=2),
                                                        symbol="o", symbolSize=5, symbolBrush=color, symbolPen=None)
            self.curves[name].setData(epochs, values)

    def csv_rows(self) -> tuple[list[str], list[list]]:
        header = list(dict.fromkeys(k for r in self.rows for k in r))
        return header, [[r.get(k) for k in header] for r in self.rows]
