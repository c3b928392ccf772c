"""The KMNC matrix: one row per neuron of the measured layers, one column per section of its training
range (core `KMNC.matrix()`), zoomable with the mouse wheel because k = 1000 sections are more than
a screen's pixels.

The left axis names the layers, lines separate them, and neurons that were constant on the training
data — never coverable — are hatched. Everything else is `CoverageMatrix`.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QFontMetrics

from workbench.gui.widgets.coverage_matrix import CoverageMatrix


class KmncMatrix(CoverageMatrix):
    """`set_layers(layer_sizes, k)` once per fitted KMNC, then `set_counts` / `set_difference`."""

    def __init__(self, parent=None, describe=None):
        super().__init__(parent, describe, zoomable=True)
        self.layer_sizes: dict[str, int] = {}
        self.k = 1
        self.plot.setLabel("bottom", "Section of the neuron's training range")
        self.boundaries = pg.PlotCurveItem(connect="pairs")
        self.boundaries.setZValue(6)
        self.plot.addItem(self.boundaries)
        self._layer_ticks: list[tuple[float, str]] = []
        self.plot.vb.sigResized.connect(self._fit_layer_ticks)
        self.plot.vb.sigRangeChanged.connect(lambda *_: self._fit_layer_ticks())

    def set_layers(self, layer_sizes: dict[str, int], k: int) -> None:
        self.layer_sizes, self.k = dict(layer_sizes), int(k)
        starts = np.cumsum([0] + list(self.layer_sizes.values()))
        if len(self.layer_sizes) == 1:  # one layer: its neurons' indices
            name, size = next(iter(self.layer_sizes.items()))
            step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10 ** 9) if size / s <= 12)
            self._layer_ticks = [(n + 0.5, str(n)) for n in range(0, size, step)]
            self.plot.setLabel("left", f"Neuron of {name}")
        else:
            self._layer_ticks = [((a + b) / 2, name) for name, a, b in
                                 zip(self.layer_sizes, starts[:-1], starts[1:])]
            self.plot.setLabel("left", "Neurons by layer")
        self._fit_layer_ticks()
        sections = [(s + 0.5, f"{s + 1:,}") for s in sorted({0, k // 4 - 1, k // 2 - 1, 3 * k // 4 - 1, k - 1})
                    if s >= 0]
        self.plot.getAxis("bottom").setTicks([sections, []])
        inner = starts[1:-1].astype(float)
        xs = np.tile([0.0, float(k)], len(inner))
        ys = np.repeat(inner, 2)
        self.boundaries.setData(xs, ys, pen=pg.mkPen(self._text_color(), width=1))

    def _fit_layer_ticks(self) -> None:
        """Layer names at their middles, leaving out a name that would overlap the one above it."""
        axis = self.plot.getAxis("left")
        (_, _), (y0, y1) = self.plot.vb.viewRange()
        px_per_row = self.plot.vb.height() / max(y1 - y0, 1e-9)
        line = QFontMetrics(axis.font()).height()
        kept, last = [], -np.inf
        for y, name in self._layer_ticks:
            if (y - last) * px_per_row >= line:
                kept.append((y, name))
                last = y
        axis.setTicks([kept, []])

    def row_of(self, layer: str, neuron: int) -> int | None:
        """The matrix row of neuron `neuron` of `layer`, if KMNC measured that layer."""
        start = 0
        for name, size in self.layer_sizes.items():
            if name == layer:
                return start + neuron if 0 <= neuron < size else None
            start += size
        return None

    def neuron_of(self, row: int) -> tuple[str, int] | None:
        start = 0
        for name, size in self.layer_sizes.items():
            if row < start + size:
                return name, row - start
            start += size
        return None

    def reset_zoom(self) -> None:
        rows, cols = self.counts.shape
        self.plot.setXRange(0, max(cols, 1), padding=0)
        self.plot.setYRange(0, max(rows, 1), padding=0)
