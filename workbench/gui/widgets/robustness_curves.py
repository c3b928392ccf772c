"""Robustness against budget, round or epoch: one small plot per metric, one colour per strategy.

Retraining compares strategies (BE-ST, KM-ST, DeepGini, random, MCP, coverage-greedy …) over
budgets; the convergence loop follows one model over rounds (docs/methods/fuzzing-and-retraining.md). Several
metrics on one plot would need a line style per metric on top of a colour per strategy, and a dozen
crossing lines do not read, so each metric gets its own small plot — static AE accuracy, adaptive
robust accuracy, clean accuracy (0–100 %), mean FOL (its own units) — laid out in a grid with a shared,
linked x axis. A strategy keeps its colour in every plot (`strategy_color`), and one legend above
the grid names them. With several seeds a series carries mean and standard deviation, drawn as the
mean's line and a light ± 1 sd band; a series still being computed is drawn dashed.

`set_series(x_label, series)` replaces everything; `add_point(strategy, metric, x, value, sd)`
appends one point to a running series (live updates); `finish(strategy)` marks it done.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QGraphicsItem, QHBoxLayout, QLabel, QWidget

from workbench.core.robustness.experiment_report import Series, metric_y_range
from workbench.gui.plotting.colors import CLASS_PALETTE
from workbench.gui.plotting.plot_style import show_grid
from workbench.gui.widgets.empty_state import fill, headed_stack
from workbench.gui.widgets.export import ExportButton
from workbench.gui.widgets.fol_histogram import fit_legend, format_value, top_legend
from workbench.gui.widgets.neuron_bars import ReadoutItem


@dataclass(frozen=True)
class Metric:
    title: str  # the plot's title
    axis: str  # the y axis title, with its unit
    percent: bool  # a percentage (values 0–100)
    full_range: bool = False  # always show 0–100 % (else the y range follows the data)
    help: str = ""


# The robustness report's metrics (docs/methods/fuzzing-and-retraining.md#robustness-reports), in the
# order their plots are laid out.
METRICS: dict[str, Metric] = {
    "static": Metric("Static AE accuracy", "Accuracy on fp_test (%)", True, True,
                     "Accuracy on the frozen adversarial evaluation set fp_test (RobOT's empirical robustness)"),
    "adaptive": Metric("Adaptive robust accuracy", "PGD-10 accuracy (%)", True, True,
                       "Accuracy under PGD-10 run against the evaluated model itself"),
    "clean": Metric("Clean accuracy", "Test accuracy (%)", True, False,
                    "Accuracy on the clean test set (the y axis follows the data: retraining costs fractions of a %)"),
    "fol": Metric("Mean FOL∞", "Mean FOL∞", False, False,
                  "Mean FOL∞ of PGD examples generated against the current model on a fixed test subset"),
    "fol_selected": Metric("Mean FOL∞ of the selected set", "Mean FOL∞", False, False,
                           "Mean FOL∞ of the candidates the strategy selected"),
}

# A fixed colour per known strategy, from the qualitative palette; random is the grey baseline.
STRATEGY_COLORS = {"BE-ST": 0, "KM-ST": 1, "DeepGini": 2, "MCP": 4, "coverage-greedy": 6, "random": 9}
_SPARE_COLORS = (3, 5, 7, 8)


def strategy_color(name: str, taken: Iterable[str] = ()) -> QColor:
    """The colour of a strategy: fixed for the known ones (matched without regard to case), else the
    first palette colour not used by a known strategy in `taken`, cycling."""
    for known, index in STRATEGY_COLORS.items():
        if known.lower() == name.lower():
            return QColor(CLASS_PALETTE[index])
    others = [t for t in dict.fromkeys(taken) if t.lower() not in {k.lower() for k in STRATEGY_COLORS}]
    position = others.index(name) if name in others else len(others)
    return QColor(CLASS_PALETTE[_SPARE_COLORS[position % len(_SPARE_COLORS)]])


class RobustnessCurves(QWidget):
    """Small plots of robustness metrics against budget / round / epoch, a colour per strategy.

    - `set_series(x_label, series)`: replace all series; `x_label` titles the shared x axis,
      e.g. "Budget (% of pool)", "Round", "Epoch".
    - `add_point(strategy, metric, x, value, sd=None, seeds=1)`: append (or replace, at the same x)
      one point of a running series; `finish(strategy=None)` marks series done (solid lines);
      `set_x_label(label)` titles the x axis for series built this way.
    - `set_reference(metric, value, label)`: a dashed horizontal line, e.g. REQ = 80 % on static.
    - `set_status(text)`: a line above the plots (what is running).
    - `csv_rows()`: one row per point; `plot_for(metric)`: the plot item of a metric (tests).
    """

    def __init__(self, parent: QWidget | None = None, columns: int = 2):
        super().__init__(parent)
        self.columns = columns
        self.x_label = "Budget (% of pool)"
        self.series: list[Series] = []
        self.references: dict[str, tuple[float, str]] = {}
        self.plots: dict[str, pg.PlotItem] = {}
        self.readout_text = ""
        self._layout_metrics: list[str] = []

        self.status = QLabel()
        self.status.setWordWrap(True)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.ci.setContentsMargins(4, 4, 4, 4)
        self.export = ExportButton(lambda: self.graphics.scene(), self.csv_rows, "robustness-curves")
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.status, 1)
        header.addWidget(self.export)
        self.legend = top_legend(self.graphics.ci, row=0, columns=6)
        # What each plot shows, kept between redraws and updated in place: rebuilding every curve, band
        # and line for each new point held the UI thread for a tenth of a second and more.
        self._drawn: dict[tuple[str, str], dict] = {}  # (metric, strategy) → its items on the plot
        self._reference_lines: dict[str, pg.InfiniteLine] = {}
        self._axes_shown: dict[int, dict] = {}  # per plot: the axis settings it shows
        self._legend_key: tuple | None = None
        self.readout = ReadoutItem()
        self.graphics.scene().sigMouseMoved.connect(self._on_mouse_moved)

        self.stack = headed_stack(header, self.graphics)
        fill(self, self.stack)
        self.show_message("No robustness results yet",
                          "Retrain with a selection strategy over a range of budgets, or run the convergence "
                          "loop; accuracy and mean FOL are drawn here as the runs finish.")

    # --- public API ---------------------------------------------------------------------------------

    def show_message(self, title: str, text: str = "", actions=(), busy: bool = False) -> None:
        self.stack.show_message(title, text, list(actions), busy)

    def has_data(self) -> bool:
        return self.stack.currentWidget() is self.stack.content

    def prepare(self, metrics: list[str]) -> None:
        """Build the plots of `metrics` now, while nothing is drawn: building five plots takes a tenth of
        a second, which the first finished run would otherwise add to its own redraw."""
        if metrics != self._layout_metrics:
            self._build_plots(metrics)

    def set_series(self, x_label: str, series: Iterable[Series]) -> None:
        """Replace every series; an empty list shows the empty state."""
        self.x_label = x_label
        self.series = list(series)
        for s in self.series:
            s.arrays()  # fail early on ragged input
        self._redraw()

    def add_point(self, strategy: str, metric: str, x: float, value: float, sd: float | None = None,
                  seeds: int = 1) -> None:
        """Append one point to the (strategy, metric) series, creating it as running if new."""
        found = self._find(strategy, metric)
        if found is None:
            found = Series(strategy, metric, [], [], [], running=True, seeds=seeds)
            self.series.append(found)
        xs, means = list(found.x), list(found.mean)
        sds = list(found.sd) if found.sd is not None else [np.nan] * len(xs)
        value_sd = np.nan if sd is None else float(sd)
        if float(x) in xs:
            i = xs.index(float(x))
            means[i], sds[i] = float(value), value_sd
        else:
            xs.append(float(x))
            means.append(float(value))
            sds.append(value_sd)
        found.x, found.mean, found.sd, found.seeds = xs, means, sds, max(found.seeds, seeds)
        self._redraw()

    def finish(self, strategy: str | None = None) -> None:
        """Mark every series of `strategy` (None: all) as done: solid lines."""
        for s in self.series:
            if strategy is None or s.strategy == strategy:
                s.running = False
        self._redraw()

    def set_reference(self, metric: str, value: float | None, label: str = "") -> None:
        """A dashed horizontal line on `metric`'s plot (None removes it), e.g. ("static", 80, "REQ")."""
        if value is None:
            self.references.pop(metric, None)
        else:
            self.references[metric] = (float(value), label)
        if self.series:
            self._redraw()

    def set_x_label(self, x_label: str) -> None:
        """Title the shared x axis (for series built with `add_point`)."""
        self.x_label = x_label
        if self.series:
            self._redraw()

    def set_status(self, text: str) -> None:
        self.status.setText(text)

    def strategies(self) -> list[str]:
        """Strategies in first-seen order: the legend's order."""
        return list(dict.fromkeys(s.strategy for s in self.series))

    def metrics(self) -> list[str]:
        """Metrics present, known ones in `METRICS` order, then the others in first-seen order."""
        present = list(dict.fromkeys(s.metric for s in self.series))
        return [m for m in METRICS if m in present] + [m for m in present if m not in METRICS]

    def plot_for(self, metric: str) -> pg.PlotItem:
        return self.plots[metric]

    def csv_rows(self) -> tuple[list[str], list[list]]:
        header = ["strategy", "metric", self.x_label, "mean", "sd", "seeds", "running"]
        rows = []
        for s in self.series:
            x, mean, sd = s.arrays()
            for xi, mi, si in zip(x, mean, sd):
                rows.append([s.strategy, s.metric, float(xi), float(mi), None if np.isnan(si) else float(si),
                             s.seeds, s.running])
        return header, rows

    # --- drawing ------------------------------------------------------------------------------------

    def _find(self, strategy: str, metric: str) -> Series | None:
        return next((s for s in self.series if s.strategy == strategy and s.metric == metric), None)

    def color(self, strategy: str) -> QColor:
        return strategy_color(strategy, self.strategies())

    def _build_plots(self, metrics: list[str]) -> None:
        """(Re)create the grid of plots when the metrics shown change."""
        for plot in self.plots.values():
            self.graphics.ci.removeItem(plot)
        if self.readout.scene() is not None:
            self.graphics.ci.removeItem(self.readout)
        self.plots, self._drawn, self._reference_lines, self._axes_shown = {}, {}, {}, {}
        columns = max(1, min(self.columns, len(metrics)))
        first = None
        for i, metric in enumerate(metrics):
            row, col = divmod(i, columns)
            info = METRICS.get(metric, Metric(metric, metric, False))
            plot = self.graphics.ci.addPlot(row=1 + row, col=col, title=info.title, enableMenu=False)
            plot.hideButtons()
            plot.setMouseEnabled(False, False)
            show_grid(plot, x=True, y=True)
            for side in ("left", "bottom"):
                axis = plot.getAxis(side)
                axis.enableAutoSIPrefix(False)
                # An axis's text is its costliest part to paint: keep it as a pixmap until its range changes.
                axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            plot.setLabel("left", info.axis)
            plot.titleLabel.item.setToolTip(info.help)
            if first is None:
                first = plot
            else:
                plot.setXLink(first)
            self.plots[metric] = plot
        rows = -(-len(metrics) // columns)
        self.graphics.ci.removeItem(self.legend)
        self.graphics.ci.addItem(self.legend, row=0, col=0, colspan=columns)
        self.graphics.ci.addItem(self.readout, row=1 + rows, col=0, colspan=columns)
        self._layout_metrics = metrics

    def _redraw(self) -> None:
        if not self.series:
            self.legend.clear()
            self._legend_key = None
            for plot in self.plots.values():
                plot.clear()
            self._drawn, self._reference_lines = {}, {}
            self.show_message("No robustness results yet",
                              "Retrain with a selection strategy over a range of budgets, or run the convergence "
                              "loop; accuracy and mean FOL are drawn here as the runs finish.")
            return
        self.stack.show_content()
        metrics = self.metrics()
        if metrics != self._layout_metrics:
            self._build_plots(metrics)
        all_x = np.concatenate([s.arrays()[0] for s in self.series])
        integer_x = bool(len(all_x)) and np.allclose(all_x, np.round(all_x)) and not self.x_label.lower().startswith("budget")
        shown = {(s.metric, s.strategy) for s in self.series}
        for key in [k for k in self._drawn if k not in shown]:  # series that went away
            for item in self._drawn.pop(key)["items"]:
                self.plots[key[0]].removeItem(item)
        for metric, plot in self.plots.items():
            for s in self.series:
                if s.metric == metric:
                    self._draw_series(plot, s)
            self._draw_reference(plot, metric)
            info = METRICS.get(metric)
            if info is not None and info.full_range:
                # room for the 0 and 100 labels inside the axis
                self._set_axes(plot, y=("fixed", -7, 107), y_ticks=[[(v, str(v)) for v in range(0, 101, 20)], []])
            else:
                self._set_axes(plot, y=self._fit_y(metric, info is not None and info.percent))
            spacing = (max(1.0, float(np.ceil(np.ptp(all_x) / 10))), 1.0) if integer_x else None
            self._set_axes(plot, x_label=self.x_label, x_spacing=spacing)
        if len(all_x):
            low, high = float(all_x.min()), float(all_x.max())
            pad = 0.5 if integer_x else 0.0
            self._set_axes(next(iter(self.plots.values())), x=(low - pad, high + pad if high > low else low + 1))
        legend_key = (tuple(self.strategies()), tuple(max(s.seeds for s in self.series if s.strategy == st)
                                                      for st in self.strategies()),
                      any(s.running for s in self.series), any(np.isfinite(s.arrays()[2]).any() for s in self.series))
        if legend_key != self._legend_key:  # the legend changes only when what it explains does
            self._legend_key = legend_key
            self.legend.clear()
            self._fill_legend()
        self.set_readout("Hover over a plot to read each strategy's value at the nearest point.")

    def _fit_y(self, metric: str, percent: bool) -> tuple | None:
        """The y range of the data (bands included), a little padded (the rule of the headless plot)."""
        y_range = metric_y_range([s for s in self.series if s.metric == metric], percent)
        return None if y_range is None else ("fitted", *y_range)

    def _set_axes(self, plot: pg.PlotItem, **wanted) -> None:
        """Apply axis settings that differ from what the plot shows. An axis told anything, even what it
        already shows, lays out and renders its text again: for five plots that was most of a redraw."""
        shown = self._axes_shown.setdefault(id(plot), {})
        for what, value in wanted.items():
            if what in shown and shown[what] == value:
                continue
            shown[what] = value
            if what == "x":
                plot.setXRange(*value, padding=0.03)
            elif what == "y" and value is None:
                plot.enableAutoRange(y=True)
            elif what == "y":
                plot.setYRange(value[1], value[2], padding=0 if value[0] == "fixed" else 0.08)
            elif what == "y_ticks":
                plot.getAxis("left").setTicks(value)
            elif what == "x_label":
                plot.setLabel("bottom", value)
            elif what == "x_spacing":
                axis = plot.getAxis("bottom")
                axis.setTickSpacing(major=value[0], minor=value[1]) if value else axis.setTickSpacing()

    def _muted(self) -> QColor:
        color = QColor(next(iter(self.plots.values())).getAxis("left").textPen().color())
        color.setAlphaF(0.7)
        return color

    def _draw_series(self, plot: pg.PlotItem, s: Series) -> None:
        """The mean line of a series, with its ± 1 sd band, created once and then updated in place."""
        x, mean, sd = s.arrays()
        key = (s.metric, s.strategy)
        color = self.color(s.strategy)
        style = Qt.PenStyle.DashLine if s.running else Qt.PenStyle.SolidLine
        has_sd = np.isfinite(sd)
        band_sd = np.where(has_sd, sd, 0.0)
        drawn = self._drawn.get(key)
        if drawn is None or drawn["band"] is None and has_sd.any() or drawn["color"] != color.name():
            if drawn is not None:
                for item in drawn["items"]:
                    plot.removeItem(item)
            drawn = self._drawn[key] = {"items": [], "band": None, "color": color.name()}
            if has_sd.any():
                fill = QColor(color)
                fill.setAlpha(45)
                edge = pg.mkPen(QColor(0, 0, 0, 0))  # the band has no outline; a pen=None curve has no path
                low = pg.PlotCurveItem(x, mean - band_sd, pen=edge)
                high = pg.PlotCurveItem(x, mean + band_sd, pen=edge)
                drawn["band"] = (low, high)
                drawn["items"] += [low, high, pg.FillBetweenItem(low, high, brush=pg.mkBrush(fill))]
            drawn["line"] = pg.PlotDataItem(x, mean, pen=pg.mkPen(color, width=2, style=style), symbol="o",
                                            symbolSize=5, symbolBrush=color, symbolPen=None)
            drawn["data"], drawn["style"] = (x.tobytes(), mean.tobytes(), band_sd.tobytes()), style
            drawn["items"].append(drawn["line"])
            for item in drawn["items"]:
                plot.addItem(item)
            return
        # Only what changed is set again: the quick comparison's next run changes one strategy, and each
        # setData re-renders the line's symbols.
        data = (x.tobytes(), mean.tobytes(), band_sd.tobytes())
        if drawn.get("data") != data:
            drawn["data"] = data
            if drawn["band"] is not None:
                low, high = drawn["band"]
                low.setData(x, mean - band_sd)
                high.setData(x, mean + band_sd)
            drawn["line"].setData(x, mean)
        if drawn.get("style") != style:
            drawn["style"] = style
            drawn["line"].setPen(pg.mkPen(color, width=2, style=style))

    def _draw_reference(self, plot: pg.PlotItem, metric: str) -> None:
        """The dashed reference line of `metric` (the original model's value, a requirement), if any."""
        line = self._reference_lines.get(metric)
        if metric not in self.references:
            if line is not None:
                plot.removeItem(self._reference_lines.pop(metric))
            return
        value, label = self.references[metric]
        if line is not None and getattr(line, "label_text", None) == label:
            line.setValue(value)
            return
        if line is not None:
            plot.removeItem(line)
        line = pg.InfiniteLine(pos=value, angle=0, pen=pg.mkPen(self._muted(), width=1.5, style=Qt.PenStyle.DashLine),
                               label=label or None, labelOpts={"position": 0.06, "color": self._muted(),
                                                                "anchors": [(0, 1), (0, 1)]})
        line.label_text = label
        plot.addItem(line)
        self._reference_lines[metric] = line

    def _fill_legend(self) -> None:
        for strategy in self.strategies():
            color = self.color(strategy)
            seeds = max(s.seeds for s in self.series if s.strategy == strategy)
            sample = pg.PlotDataItem([], [], pen=pg.mkPen(color, width=3))
            self.legend.addItem(sample, strategy + (f" ({seeds} seeds)" if seeds > 1 else ""))
        muted = self._muted()
        if any(s.running for s in self.series):
            self.legend.addItem(pg.PlotDataItem([], [], pen=pg.mkPen(muted, width=2, style=Qt.PenStyle.DashLine)),
                                "running")
        if any(np.isfinite(s.arrays()[2]).any() for s in self.series):
            band = QColor(muted)
            band.setAlpha(60)
            self.legend.addItem(pg.PlotDataItem([], [], pen=pg.mkPen(band, width=8)), "mean ± 1 sd")
        fit_legend(self.legend, self.graphics.width())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self.has_data():
            fit_legend(self.legend, self.graphics.width())

    # --- hover --------------------------------------------------------------------------------------

    def _on_mouse_moved(self, scene_pos: QPointF) -> None:
        for metric, plot in self.plots.items():
            if plot.vb.sceneBoundingRect().contains(scene_pos):
                self.set_readout(self.describe(metric, plot.vb.mapSceneToView(scene_pos).x()))
                return

    def describe(self, metric: str, x: float) -> str:
        """Each strategy's value of `metric` at its point nearest to `x`."""
        info = METRICS.get(metric, Metric(metric, metric, False))
        parts = []
        for s in self.series:
            if s.metric != metric:
                continue
            xs, mean, sd = s.arrays()
            if not len(xs):
                continue
            i = int(np.argmin(np.abs(xs - x)))
            unit = " %" if info.percent else ""
            value = (f"{mean[i]:.1f}" if info.percent else format_value(mean[i])) + unit
            if np.isfinite(sd[i]):
                value = (f"{mean[i]:.1f} ± {sd[i]:.1f}" if info.percent
                         else f"{format_value(mean[i])} ± {format_value(sd[i])}") + unit
            where = f"{self.x_label.split(' (')[0].lower()} {xs[i]:g}"
            parts.append(f"<span style='color:{self.color(s.strategy).name()}'>■</span> {s.strategy}: {value} "
                         f"at {where}" + (" (running)" if s.running else ""))
        return f"<b>{info.title}</b> — " + " · ".join(parts)

    def set_readout(self, text: str) -> None:
        self.readout_text = text
        self.readout.setText(text, size="9pt")
