"""Loss and accuracy per epoch, side by side, growing one point per epoch while a model trains."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from workbench.gui.plotting.colors import CLASS_PALETTE
from workbench.gui.plotting.plot_style import cache_axes, show_grid

LOSS_COLOR, TRAIN_COLOR, TEST_COLOR = CLASS_PALETTE[2], CLASS_PALETTE[0], CLASS_PALETTE[1]


class TrainingCurves(pg.GraphicsLayoutWidget):
    """`set_history(rows)` / `add_epoch(row)` with rows as `training.train` reports them."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[dict] = []
        self._stale = False  # rows changed while hidden: drawn when shown
        self.loss_plot = cache_axes(self.addPlot(row=0, col=0, title="Training loss"))
        self.accuracy_plot = cache_axes(self.addPlot(row=0, col=1, title="Accuracy"))
        for plot in (self.loss_plot, self.accuracy_plot):
            plot.setMenuEnabled(False)
            show_grid(plot, x=True, y=True)
            plot.setLabel("bottom", "Epoch")
            plot.getAxis("left").enableAutoSIPrefix(False)
        self.loss_plot.setLabel("left", "Cross-entropy loss")
        self.accuracy_plot.setLabel("left", "Accuracy (%)")
        legend = self.accuracy_plot.addLegend(offset=(-10, -10))
        legend.setLabelTextColor(self.accuracy_plot.getAxis("left").textPen().color())
        symbol = dict(symbol="o", symbolSize=7)
        self.loss_curve = self.loss_plot.plot([], [], pen=pg.mkPen(LOSS_COLOR, width=2), symbolBrush=LOSS_COLOR,
                                              symbolPen=None, **symbol)
        self.train_curve = self.accuracy_plot.plot([], [], name="train", pen=pg.mkPen(TRAIN_COLOR, width=2),
                                                   symbolBrush=TRAIN_COLOR, symbolPen=None, **symbol)
        self.test_curve = self.accuracy_plot.plot([], [], name="test", pen=pg.mkPen(TEST_COLOR, width=2),
                                                  symbolBrush=TEST_COLOR, symbolPen=None, **symbol)

    def set_history(self, rows: list[dict]) -> None:
        self.rows = [dict(r) for r in rows]
        self._redraw()

    def add_epoch(self, row: dict) -> None:
        self.rows.append(dict(row))
        self._redraw()

    def reset(self) -> None:
        """No points (not `clear()`: pyqtgraph's layout widget uses that name to remove every plot)."""
        self.set_history([])

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._stale:
            self._redraw()

    def _redraw(self) -> None:
        """Draw the rows, or, while hidden, when next shown: the model card's history drawn into the
        hidden Training view as the demo's model loaded cost the window 12 ms of its start-up."""
        self._stale = not self.isVisible()
        if self._stale:
            return
        epochs = np.array([r["epoch"] for r in self.rows], dtype=float)
        self.loss_curve.setData(epochs, np.array([r["train_loss"] for r in self.rows], dtype=float))
        self.train_curve.setData(epochs, 100 * np.array([r["train_accuracy"] for r in self.rows], dtype=float))
        tested = [r for r in self.rows if r.get("test_accuracy") is not None]
        self.test_curve.setData(np.array([r["epoch"] for r in tested], dtype=float),
                                100 * np.array([r["test_accuracy"] for r in tested], dtype=float))
        last = max(1.0, float(epochs.max())) if len(epochs) else 1.0
        for plot in (self.loss_plot, self.accuracy_plot):
            plot.setXRange(0.5, last + 0.5, padding=0.02)
            plot.getAxis("bottom").setTickSpacing(major=max(1, int(np.ceil(last / 10))), minor=1)

    def csv_rows(self) -> tuple[list[str], list[list]]:
        header = ["epoch", "train_loss", "train_accuracy", "test_accuracy", "seconds"]
        return header, [[r.get(h) for h in header] for r in self.rows]
