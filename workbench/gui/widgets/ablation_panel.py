"""The ablation check beside the importance heatmap: does switching off the top-m neurons hurt more
than switching off as many random ones?

Two bars of test-accuracy drop, in percentage points — the top-m switched off, and the mean of the
random draws with their spread (an error bar of ± one standard deviation, each draw a dot) — and a
sentence that gives the accuracy and says what the bars mean. Drops rather than accuracies: the
difference between two accuracies near 90 % would be invisible on a 0–100 axis. The verdict ranks the
top set among the random draws (`AblationResult.chance`): with few draws it says so and offers more.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from workbench.core.importance.ablation import CLEAR_DRAWS
from workbench.gui.plotting.colors import MARKED, UNMARKED
from workbench.gui.plotting.plot_style import cache_axes, set_tick_texts, show_grid
from workbench.gui.widgets.empty_state import MessageOrContent


def verdict_text(result) -> str:
    """What the draws say about the top neurons, in words; a link asks for more draws when too few
    were run to make a difference clear."""
    m, draws, worse = result.m, len(result.random_drops), result.draws_at_least_as_bad
    if result.clearly_important:
        return (f"<b>The top {m} neurons clearly matter more than random ones:</b> switching them off costs "
                f"more accuracy than all {draws} random sets (chance {result.chance:.2f}).")
    if worse == 0:
        return (f"<b>The top {m} cost more than all {draws} random sets, but {draws} draws cannot make that clear:"
                f"</b> it would happen by chance 1 time in {draws + 1}. <a href='more'>Check with "
                f"{CLEAR_DRAWS} draws</a>")
    return (f"<b>Not clear:</b> {worse} of the {draws} random sets cost at least as much accuracy as the top {m} "
            f"(chance {result.chance:.2f}).")


class AblationPanel(QWidget):
    """The top-m neurons switched off against random sets of m: bars, draws and a verdict that says
    how the top set ranks among the draws, and calls it clear only when the draws make it so.
    `more_draws_requested(n)`: the user asked for a check with `n` draws."""

    more_draws_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.result = None
        self.verdict = QLabel()
        self.verdict.setObjectName("ablationVerdict")
        self.verdict.setWordWrap(True)
        self.verdict.setMinimumWidth(220)
        self.verdict.linkActivated.connect(lambda _: self.more_draws_requested.emit(CLEAR_DRAWS))
        self.plot_widget = pg.PlotWidget()
        self.plot_widget.setMinimumHeight(100)
        plot = self.plot = cache_axes(self.plot_widget.getPlotItem())
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(False, False)
        plot.hideButtons()
        show_grid(plot, x=True, alpha=0.25)
        plot.invertY(True)
        plot.setLabel("bottom", "Test accuracy drop (percentage points)")
        plot.getAxis("left").setStyle(tickLength=0)
        text = plot.getAxis("left").textPen().color()
        self.bars = pg.BarGraphItem(x0=[], y=[], width=[], height=0.6)
        self.spread = pg.ErrorBarItem(x=np.zeros(0), y=np.zeros(0), width=np.zeros(0), beam=0.2,
                                      pen=pg.mkPen(text, width=1.5))
        self.draws = pg.ScatterPlotItem(size=6, pen=pg.mkPen("w", width=1), brush=pg.mkBrush(text))
        self.zero = pg.InfiniteLine(pos=0, angle=90, pen=pg.mkPen(text, width=1))
        for item in (self.bars, self.spread, self.draws, self.zero):
            plot.addItem(item)
        self._labels: list[pg.TextItem] = []
        self._x_range = (0.0, 1.0)  # what the bars, draws and labels' anchors need, in data units
        plot.vb.sigResized.connect(lambda _vb: self._fit_x_range())
        content = QWidget()
        layout = QHBoxLayout(content)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.verdict, 2, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.plot_widget, 3)
        self.stack = MessageOrContent(content)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.stack)

    def show_message(self, *args, **kwargs) -> None:
        self.result = None
        self.stack.show_message(*args, **kwargs)

    def show_result(self, result, layer: str) -> None:
        """Show an `AblationResult` of `layer`."""
        self.result = result
        top = 100 * result.important_drop
        drops = 100 * (result.baseline_accuracy - np.asarray(result.random_accuracies, dtype=float))
        mean = float(drops.mean()) if drops.size else 0.0
        std = float(drops.std()) if drops.size else 0.0
        self.bars.setOpts(x0=[0, 0], y=[0, 1], width=[top, mean], height=0.6,
                          brushes=[pg.mkBrush(MARKED), pg.mkBrush(UNMARKED)])
        self.spread.setData(x=np.array([mean]), y=np.array([1.0]), width=np.array([2 * std]))
        self.draws.setData(x=drops, y=np.full(drops.size, 1.0))
        for label in self._labels:
            self.plot.removeItem(label)
        color = self.plot.getAxis("left").textPen().color()
        self._labels = []
        reach = max(abs(top), abs(mean) + std, float(np.abs(drops).max(initial=0.0)), 0.5)
        for y, value, end in ((0, top, top), (1, mean, max(mean + std, float(drops.max(initial=mean))))):
            label = pg.TextItem(f"{value:+.1f}" if y == 0 else f"{value:+.1f} ± {std:.1f}", color=color,
                                anchor=(0, 0.5))
            label.setPos(max(end, 0) + 0.03 * reach, y)
            self.plot.addItem(label)
            self._labels.append(label)
        m, draws = result.m, len(result.random_accuracies)
        set_tick_texts(self.plot.getAxis("left"), [(0, f"top {m}"), (1, f"{m} random ({draws}×)")])
        low = min(0.0, top, float(drops.min(initial=0.0)))
        self._x_range = (low - 0.05 * reach, reach * 1.45)
        self._fit_x_range()
        self.plot.setYRange(-0.6, 1.6, padding=0)
        what = "set to zero" if result.mode == "zero" else f"set to their {result.mode}"
        self.verdict.setText(
            f"{verdict_text(result)}<br>Accuracy on {result.inputs:,} {result.split} images: "
            f"{100 * result.baseline_accuracy:.1f} % with every neuron, {100 * result.important_accuracy:.1f} % "
            f"with the top {m} of {layer} {what}, {100 * float(np.mean(result.random_accuracies)):.1f} % on "
            f"average with {m} random ones ({draws} draws).")
        self.stack.show_content()

    def _fit_x_range(self) -> None:
        """Widen the x range until each value label ends inside the plot: "+0.3 ± 0.4" is never cut."""
        low, high = self._x_range
        width = self.plot.vb.width()
        for label in self._labels:
            share = (label.boundingRect().width() + 6) / width if width > 0 else 0.0
            if 0 < share < 0.9:
                # The label starts at x and is `share` of the range wide: x + share·(high − low) ≤ high.
                high = max(high, (label.pos().x() - share * low) / (1 - share))
        self.plot.setXRange(low, high, padding=0)

    def rows(self) -> tuple[list[str], list[list]]:
        """The result as CSV rows: one per ablated set."""
        r = self.result
        header = ["set", "neurons", "accuracy", "accuracy_drop", "activation_change_at_" + r.downstream_layer]
        rows = [["none", "", r.baseline_accuracy, 0.0, 0.0],
                ["top", " ".join(map(str, r.important_neurons)), r.important_accuracy, r.important_drop,
                 r.important_activation_change]]
        for i, (neurons, accuracy, change) in enumerate(zip(r.random_neurons, r.random_accuracies,
                                                            r.random_activation_changes)):
            rows.append([f"random {i + 1}", " ".join(map(str, neurons)), accuracy, r.baseline_accuracy - accuracy,
                         change])
        return header, rows
