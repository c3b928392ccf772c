"""FOL of several test sets, overlaid: one outlined histogram per set over shared bins, and a rug of
the candidates a selection strategy picked.

`FolHistogram.set_sets(kind_label, {"clean": fol, "FGSM": fol, ...})` draws each set as a step
outline with a light fill in its own qualitative colour; the legend, in a row of its own above the
plot so that it never hides a bin, gives each set's size. All sets share one set of bins over the
union of their values, so the outlines can be compared bin by bin. `mark_selected(values)` draws one short tick per selected candidate under the
histograms, so the user sees which part of the distribution a strategy picked (BE-ST: both ends;
KM-ST: spread over the range). Hovering reads a bin out; clicking it emits `bin_clicked(bin)`, and
`members(name, bin)` gives the positions of that set's values in the bin (for linked selection).

The x axis is titled with the FOL kind, e.g. "FOL∞ (FOSC, ε = 0.1)" or "grad-L2 (RobOT fuzzer
FOL)" — `fol_kind_label` builds these; "FOL-L2" is refused, because the gradient norm
is not a FOSC value (docs/methods/fol-and-selection.md#grad-l2).

**Log x and values ≤ 0.** FOL spans decades, so the x axis can be logarithmic (`set_log_x`).
FOL∞ is ≥ 0 in theory but is exactly 0 for saturated samples (keras-compat loss), ≈ 0 for
converged attacks, and slightly negative from rounding or for fuzzed tests outside the ε-ball.
Such values have no place on a log axis, and tiny positive ones would stretch it over many empty
decades. So on a log axis the bins start at a floor — the smallest positive value, but at most
`LOG_DECADES` decades below the largest — and every value under the floor (zero and negative ones
included) is counted in one extra bin drawn apart at the left, labelled "≤ 0" (or "< floor" when it
also holds tiny positive values). Nothing is dropped: the legend counts, the read-out and the CSV
include that bin. Non-finite values (NaN, ±inf) are left out of the bins and counted in the legend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QWidget

from workbench.core.robustness.scores import GRAD_L2_LABEL
from workbench.gui.plotting.colors import CLASS_PALETTE
from workbench.gui.plotting.plot_style import cache_axes, show_grid
from workbench.gui.widgets.empty_state import fill, headed_stack
from workbench.gui.widgets.export import ExportButton
from workbench.gui.widgets.neuron_bars import ReadoutItem

LOG_DECADES = 6  # a log axis covers at most this many decades below the largest value
LOW_BIN = -1  # the bin index of the "≤ 0" / "< floor" bin of a log axis
RUG_SHARE = 0.09  # the rug's height as a share of the tallest bar


def fol_kind_label(kind: str, eps: float | None = None) -> str:
    """The axis title of a FOL kind, named as the core's score keys: "fol_linf" (or "fol_inf") →
    "FOL∞ (FOSC, ε = 0.1)", "fosc_l2" → "FOSC-L2 (ε = 0.5)", "grad_l2" → "grad-L2 (RobOT fuzzer FOL)"
    (docs/methods/fol-and-selection.md)."""
    eps_text = "" if eps is None else f"ε = {eps:.4g}"
    if kind in ("fol_linf", "fol_inf"):
        return "FOL∞ (FOSC" + (f", {eps_text})" if eps_text else ")")
    if kind == "fosc_l2":
        return "FOSC-L2" + (f" ({eps_text})" if eps_text else "")
    if kind == "grad_l2":
        return GRAD_L2_LABEL
    raise ValueError(f"unknown FOL kind {kind!r}: use 'fol_linf', 'fosc_l2' or 'grad_l2'")


def format_value(value: float) -> str:
    """Three significant digits, no float noise: 0.0123, 1.5e-05, 123."""
    if not np.isfinite(value):
        return "−∞" if value < 0 else ("∞" if value > 0 else "NaN")
    return f"{value:.3g}".replace("-", "−")


def _decade_text(k: int, mantissa: int = 1) -> str:
    value = mantissa * 10.0 ** k
    return f"{value:g}" if -3 <= k <= 4 else f"{mantissa}e{k}"


class SwatchSample(pg.ItemSample):
    """A legend sample for a filled histogram: a square in the fill colour, outlined by the pen.
    Clicking it hides or shows the histogram, as pyqtgraph's samples do."""

    def paint(self, p, *args):
        opts = self.item.opts
        p.setRenderHint(p.RenderHint.Antialiasing)
        if not self.item.isVisible():
            p.setPen(pg.mkPen(opts["pen"]))
            p.drawRect(4, 5, 12, 12)
            return
        p.setPen(pg.mkPen(opts["pen"]))
        p.setBrush(pg.mkBrush(opts.get("fillBrush") or opts.get("brush") or (0, 0, 0, 0)))
        p.drawRect(4, 5, 12, 12)


def top_legend(layout: pg.GraphicsLayout, row: int, col: int = 0, columns: int = 3) -> pg.LegendItem:
    """A legend in its own row of a graphics layout, above the plot, so it never covers the data."""
    legend = pg.LegendItem(offset=None, colCount=columns, labelTextSize="9pt", horSpacing=14)
    layout.addItem(legend, row=row, col=col)
    return legend


def fit_legend(legend: pg.LegendItem, width: float) -> None:
    """Lay a layout-managed legend out in as many columns as `width` pixels hold, packed to the left,
    and give it the height its rows need (it sizes itself; the layout does not ask it)."""
    entries = legend.items
    legend.setVisible(bool(entries))
    if not entries:
        legend.setMaximumHeight(0)
        return
    spacing = legend.layout.horizontalSpacing() + 8
    widest = max(sample.width() + label.item.boundingRect().width() + spacing for sample, label in entries)
    columns = max(1, min(len(entries), int(max(width - 20, widest) // widest)))
    legend.setColumnCount(columns)
    legend.layout.invalidate()
    size = legend.layout.effectiveSizeHint(Qt.SizeHint.PreferredSize)
    legend.setMinimumHeight(size.height())
    legend.setMaximumHeight(size.height())
    legend.setMaximumWidth(size.width() + 4)
    parent = legend.parentLayoutItem()
    if isinstance(parent, pg.GraphicsLayout):
        parent.layout.setAlignment(legend, Qt.AlignmentFlag.AlignLeft)
        parent.layout.invalidate()


class _CountAxis(pg.AxisItem):
    """The count axis: no ticks (nor grid lines) in the rug's strip below zero."""

    def tickValues(self, minVal, maxVal, size):
        return [(spacing, [v for v in values if v >= -1e-9])
                for spacing, values in super().tickValues(minVal, maxVal, size)]


class FolHistogram(QWidget):
    """Overlaid FOL histograms of named test sets with a rug of the selected candidates.

    - `set_sets(kind_label, sets, colors=None, bins=None)`: the sets to draw, in legend order.
    - `mark_selected(values, label="selected")`: ticks for the selected candidates' FOL, or None.
    - `set_log_x(on)`, `set_percent(on)`: log x axis; heights as % of each set instead of counts.
    - `csv_rows()`: header and one row per bin (its range, each set's count, the selected count).
    - `bin_clicked(bin)`: a bin was clicked; `bin_range(bin)` and `members(name, bin)` say what it holds.
    - `show_message(title, text, actions)`: the empty state (shown until `set_sets` gets data).
    """

    bin_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None, max_bins: int = 80):
        super().__init__(parent)
        self.max_bins = max_bins
        self.kind_label = ""
        self.names: list[str] = []
        self.values: dict[str, np.ndarray] = {}
        self.colors: dict[str, QColor] = {}
        self.requested_bins: int | None = None
        self.selected: np.ndarray | None = None
        self.selected_label = "selected"
        self.selected_color: QColor | None = None
        self.log_x = False
        self.percent = False
        self.edges = np.zeros(0)  # bin edges in data units
        self.floor: float | None = None  # log axis: values below it fall in the LOW_BIN bin
        self.counts: dict[str, np.ndarray] = {}
        self.low_counts: dict[str, int] = {}
        self.readout_text = ""
        self._view_edges = np.zeros(0)
        self._low_span: tuple[float, float] | None = None  # the low bin's extent in view units
        self._low_text = "≤ 0"
        self._rug_bottom = 0.0

        self.log_box = QCheckBox("Log x")
        self.log_box.setToolTip("Logarithmic FOL axis; values ≤ 0 get their own bin at the left")
        self.log_box.toggled.connect(self.set_log_x)
        self.percent_box = QCheckBox("% of each set")
        self.percent_box.setToolTip("Bar heights as a share of each set, so sets of different sizes compare")
        self.percent_box.toggled.connect(self.set_percent)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.ci.setContentsMargins(4, 4, 4, 4)
        self.export = ExportButton(lambda: self.graphics.scene(), self.csv_rows, "fol-histogram")
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.log_box)
        header.addWidget(self.percent_box)
        header.addStretch(1)
        header.addWidget(self.export)

        self.plot = cache_axes(self.graphics.addPlot(row=1, col=0, axisItems={"left": _CountAxis("left")}))
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(False, False)
        show_grid(self.plot, x=True, y=True)
        self.plot.getAxis("left").enableAutoSIPrefix(False)
        self.plot.getAxis("bottom").enableAutoSIPrefix(False)
        self.legend = top_legend(self.graphics.ci, row=0)
        self.legend.setLabelTextColor(self.plot.getAxis("left").textPen().color())
        self.readout = ReadoutItem()
        self.readout.LINES = 2
        self.graphics.addItem(self.readout, row=2, col=0)
        self.graphics.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.graphics.scene().sigMouseClicked.connect(self._on_clicked)

        self.stack = headed_stack(header, self.graphics)
        fill(self, self.stack)
        self.show_message("No FOL values yet",
                          "Generate adversarial candidates (FGSM, PGD) or run the fuzzer; the first-order loss "
                          "of each test set is drawn here.")

    # --- public API ---------------------------------------------------------------------------------

    def show_message(self, title: str, text: str = "", actions=(), busy: bool = False) -> None:
        """Show the empty state instead of the plot (e.g. while FOL is being computed)."""
        self.stack.show_message(title, text, list(actions), busy)

    def has_data(self) -> bool:
        return self.stack.currentWidget() is self.stack.content

    def set_sets(self, kind_label: str, sets: Mapping[str, Sequence[float]],
                 colors: Mapping[str, QColor | str] | None = None, bins: int | None = None) -> None:
        """Draw one histogram per named set, in the mapping's order.

        `kind_label` titles the x axis (see `fol_kind_label`); `colors` overrides the default palette
        order per name; `bins` fixes the number of bins (default: Rice's rule, 10 to `max_bins`).
        Sets without any finite value get a legend entry but no outline; with no finite value at all
        the empty state says so.
        """
        if "FOL-L2" in kind_label.upper().replace("–", "-"):
            raise ValueError(f"{kind_label!r}: the RobOT gradient norm is called {GRAD_L2_LABEL!r}, never "
                             "'FOL-L2' (docs/methods/fol-and-selection.md#grad-l2)")
        self.kind_label = kind_label
        self.names = list(sets)
        self.values = {name: np.asarray(v, dtype=np.float64).ravel() for name, v in sets.items()}
        colors = dict(colors or {})
        self.colors = {name: QColor(colors.get(name, CLASS_PALETTE[i % len(CLASS_PALETTE)]))
                       for i, name in enumerate(self.names)}
        self.requested_bins = bins
        if not any(np.isfinite(v).any() for v in self.values.values()):
            self.edges, self.counts, self.low_counts = np.zeros(0), {}, {}
            if self.names:
                self.show_message("No finite FOL values",
                                  f"The sets {', '.join(self.names)} hold no finite {kind_label} value; "
                                  "recompute FOL for them.")
            else:
                self.show_message("No FOL values yet", "Choose the test sets whose FOL to compare.")
            return
        self.stack.show_content()
        self._redraw()

    def mark_selected(self, values: Sequence[float] | None, label: str = "selected",
                      color: QColor | str | None = None) -> None:
        """Draw a tick under the histograms at each selected candidate's FOL (None removes them).

        The ticks take the axis text colour by default — distinct from every set's colour on light
        and dark palettes; `label` names them in the legend (e.g. "BE-ST selection"), followed by their count.
        """
        self.selected = None if values is None else np.asarray(values, dtype=np.float64).ravel()
        self.selected_label = label
        self.selected_color = None if color is None else QColor(color)
        if self.has_data():
            self._redraw()

    def set_log_x(self, on: bool) -> None:
        """Log x axis (the "Log x" box). With no positive value at all the axis stays linear."""
        self.log_x = bool(on)
        if self.log_box.isChecked() != self.log_x:
            self.log_box.setChecked(self.log_x)  # re-enters once, with the same value
            return
        if self.has_data():
            self._redraw()

    def set_percent(self, on: bool) -> None:
        self.percent = bool(on)
        if self.percent_box.isChecked() != self.percent:
            self.percent_box.setChecked(self.percent)
            return
        if self.has_data():
            self._redraw()

    def bin_count(self) -> int:
        """Regular bins (the log axis's low bin not included)."""
        return max(0, len(self.edges) - 1)

    def bin_range(self, index: int) -> tuple[float, float]:
        """(low, high) of a bin in FOL units; the low bin is (−inf, floor)."""
        if index == LOW_BIN:
            return -np.inf, float(self.floor if self.floor is not None else 0.0)
        return float(self.edges[index]), float(self.edges[index + 1])

    def members(self, name: str, index: int) -> np.ndarray:
        """Positions in set `name`'s values of the values counted in bin `index`."""
        return np.flatnonzero(self._bin_of(self.values[name]) == index)

    def csv_rows(self) -> tuple[list[str], list[list]]:
        """One row per bin: low, high, the count of each set, then the selected count if marked."""
        header = ["bin_low", "bin_high", *self.names]
        selected = self.selected is not None and self.has_data()
        if selected:
            header.append(self.selected_label)
        rows = []
        selected_bins = self._bin_of(self.selected) if selected else None
        indices = ([LOW_BIN] if self.floor is not None else []) + list(range(self.bin_count()))
        for i in indices:
            low, high = self.bin_range(i)
            row = [low, high] + [int(self._count(name, i)) for name in self.names]
            if selected:
                row.append(int((selected_bins == i).sum()))
            rows.append(row)
        return header, rows

    # --- binning ------------------------------------------------------------------------------------

    def _finite_union(self) -> np.ndarray:
        union = np.concatenate([v for v in self.values.values()]) if self.values else np.zeros(0)
        return union[np.isfinite(union)]

    def _compute_bins(self) -> None:
        union = self._finite_union()
        n_bins = self.requested_bins or int(np.clip(np.ceil(2 * len(union) ** (1 / 3)), 10, self.max_bins))
        self.floor = None
        positive = union[union > 0]
        if self.log_x and positive.size:
            high = float(positive.max())
            floor = max(float(positive.min()), high * 10.0 ** -LOG_DECADES)
            if floor >= high:
                floor = high / 10.0
            self.floor = floor
            self._view_edges = np.linspace(np.log10(floor), np.log10(high), n_bins + 1)
            self.edges = 10.0 ** self._view_edges
            self.edges[0], self.edges[-1] = floor, high
            width = self._view_edges[1] - self._view_edges[0]
            span = max(2 * width, 0.04 * (self._view_edges[-1] - self._view_edges[0]))
            right = self._view_edges[0] - span / 2
            self._low_span = (right - span, right)
        else:
            low, high = float(union.min()), float(union.max())
            if high <= low:
                pad = 0.5 * abs(low) if low else 0.5
                low, high = low - pad, high + pad
            self.edges = np.linspace(low, high, n_bins + 1)
            self._view_edges = self.edges
            self._low_span = None

    def _bin_of(self, values: np.ndarray | None) -> np.ndarray:
        """Each value's bin: 0…bins−1, LOW_BIN under a log axis's floor, −2 for non-finite values."""
        if values is None:
            return np.zeros(0, np.int64)
        values = np.asarray(values, dtype=np.float64)
        result = np.full(values.shape, -2, np.int64)
        finite = np.isfinite(values)
        if not len(self.edges):
            return result
        inner = np.clip(np.searchsorted(self.edges, values[finite], side="right") - 1, 0, self.bin_count() - 1)
        if self.floor is not None:
            inner = np.where(values[finite] < self.floor, LOW_BIN, inner)
        result[finite] = inner
        return result

    def _count(self, name: str, index: int) -> int:
        if index == LOW_BIN:
            return self.low_counts.get(name, 0)
        return int(self.counts[name][index])

    # --- drawing ------------------------------------------------------------------------------------

    def _height(self, name: str, counts):
        if not self.percent:
            return np.asarray(counts, dtype=np.float64)
        total = int(np.isfinite(self.values[name]).sum())
        return 100.0 * np.asarray(counts, dtype=np.float64) / max(1, total)

    def _to_view(self, values: np.ndarray) -> np.ndarray:
        """FOL values as x positions: log10 on a log axis, the low bin's centre under the floor."""
        if self.floor is None:
            return values
        centre = 0.5 * (self._low_span[0] + self._low_span[1])
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(values < self.floor, centre, np.log10(np.maximum(values, self.floor)))

    def _redraw(self) -> None:
        self._compute_bins()
        self.plot.clear()
        self.legend.clear()
        self.counts, self.low_counts = {}, {}
        top = 0.0
        for name in self.names:
            bins = self._bin_of(self.values[name])
            self.counts[name] = np.bincount(bins[bins >= 0], minlength=self.bin_count())
            self.low_counts[name] = int((bins == LOW_BIN).sum())
            color = self.colors[name]
            fill = QColor(color)
            fill.setAlpha(38)
            pen = pg.mkPen(color, width=2)
            heights = self._height(name, self.counts[name])
            finite = int((bins != -2).sum())
            legend = f"{name} (n = {finite:,}"
            missing = len(bins) - finite
            legend += f", {missing:,} not finite)" if missing else ")"
            item = pg.PlotDataItem(self._view_edges, heights, stepMode="center", fillLevel=0, brush=fill, pen=pen)
            self.plot.addItem(item)
            self.legend.addItem(SwatchSample(item), legend)
            top = max(top, float(heights.max(initial=0)))
            if self.floor is not None:
                low = self._height(name, [self.low_counts[name]])
                low_item = pg.PlotDataItem(np.array(self._low_span), low, stepMode="center", fillLevel=0,
                                           brush=fill, pen=pen)
                self.plot.addItem(low_item)
                item.visibleChanged.connect(lambda item=item, low_item=low_item: low_item.setVisible(item.isVisible()))
                top = max(top, float(low[0]))
        top = top if top > 0 else 1.0
        self._draw_rug(top)
        fit_legend(self.legend, self.graphics.width())
        self._set_axes(top)
        self.set_readout("Hover over a bin to read its counts; click it to pick its inputs.")

    def _draw_rug(self, top: float) -> None:
        self._rug_bottom = -0.05 * top  # room for the "0" label
        if self.selected is None:
            return
        values = self.selected[np.isfinite(self.selected)]
        color = self.selected_color or QColor(self.plot.getAxis("bottom").textPen().color())
        height = RUG_SHARE * top
        self._rug_bottom = -1.25 * height
        x = np.repeat(self._to_view(values), 2)
        y = np.tile([-1.15 * height, -0.15 * height], len(values))
        rug_color = QColor(color)
        rug_color.setAlphaF(0.55 if len(values) > 200 else 0.9)
        name = f"{self.selected_label} (n = {len(values):,})"  # e.g. "BE-ST selection (n = 600)"
        rug = pg.PlotDataItem(x, y, connect="pairs", pen=pg.mkPen(rug_color, width=1.5))
        self.plot.addItem(rug)
        self.legend.addItem(rug, name)

    def _set_axes(self, top: float) -> None:
        unit = "% of set" if self.percent else "Inputs"
        self.plot.setLabel("left", unit)
        self.plot.setLabel("bottom", self.kind_label + (" — log scale" if self.floor is not None else ""))
        left = self._low_span[0] if self._low_span else self._view_edges[0]
        self.plot.setXRange(left, self._view_edges[-1], padding=0.02)
        self.plot.setYRange(self._rug_bottom, top * 1.12, padding=0)
        axis = self.plot.getAxis("bottom")
        axis.setTicks(self._log_ticks() if self.floor is not None else None)

    def _log_ticks(self) -> list[list[tuple[float, str]]]:
        lo, hi = self._view_edges[0], self._view_edges[-1]
        major, minor = [], []
        for k in range(int(np.floor(lo)), int(np.ceil(hi)) + 1):
            if lo - 1e-9 <= k <= hi + 1e-9:
                major.append((float(k), _decade_text(k)))
            for m in (2, 5):
                x = k + np.log10(m)
                if lo <= x <= hi:
                    minor.append((x, _decade_text(k, m)))
        if len(major) < 2:  # less than a decade shown: label the 2× and 5× ticks too
            major, minor = sorted(major + minor), []
        else:
            minor = [(x, "") for x, _ in minor]
        low_centre = 0.5 * (self._low_span[0] + self._low_span[1])
        has_tiny_positive = any(((v > 0) & (v < self.floor)).any() for v in self.values.values())
        major.append((low_centre, f"< {format_value(self.floor)}" if has_tiny_positive else "≤ 0"))
        self._low_text = major[-1][1]
        return [major, minor]

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self.has_data():
            fit_legend(self.legend, self.graphics.width())

    # --- hover and click ----------------------------------------------------------------------------

    def _bin_at(self, scene_pos: QPointF) -> int | None:
        if not self.has_data() or not len(self.edges) or not self.plot.vb.sceneBoundingRect().contains(scene_pos):
            return None
        x = self.plot.vb.mapSceneToView(scene_pos).x()
        if self._low_span is not None and self._low_span[0] <= x <= self._low_span[1]:
            return LOW_BIN
        if not self._view_edges[0] <= x <= self._view_edges[-1]:
            return None
        return int(min(self.bin_count() - 1, np.searchsorted(self._view_edges, x, side="right") - 1))

    def describe_bin(self, index: int) -> str:
        """The read-out of one bin: its range and each set's count (and the selected count)."""
        low, high = self.bin_range(index)
        if index == LOW_BIN:
            where = f"{self.kind_label} {self._low_text}"
        else:
            last = index == self.bin_count() - 1
            where = f"{self.kind_label} in [{format_value(low)}, {format_value(high)}{']' if last else ')'}"
        parts = []
        for name in self.names:
            count = self._count(name, index)
            text = f"{count:,}"
            if self.percent:
                text += f" ({float(self._height(name, [count])[0]):.1f} %)"
            parts.append(f"<span style='color:{self.colors[name].name()}'>■</span> {name}: {text}")
        if self.selected is not None:
            parts.append(f"{self.selected_label}: {int((self._bin_of(self.selected) == index).sum()):,}")
        return f"<b>{where}</b> — " + " · ".join(parts)

    def _on_mouse_moved(self, scene_pos: QPointF) -> None:
        index = self._bin_at(scene_pos)
        if index is not None:
            self.set_readout(self.describe_bin(index))

    def _on_clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        index = self._bin_at(event.scenePos())
        if index is not None:
            self.bin_clicked.emit(index)

    def set_readout(self, text: str) -> None:
        self.readout_text = text
        self.readout.setText(text, size="9pt")
