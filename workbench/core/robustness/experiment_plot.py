"""A RobOT experiment's robustness-against-budget curves saved as a PNG, without Qt.

`save_experiment_plot(rows, path, title)` draws the rows of a retraining grid (strategy × budget ×
seed) as the Robustness view draws them (`RobustnessCurves` on `experiment_series`): one small plot
per metric — static AE accuracy, adaptive robust accuracy, clean accuracy, mean FOL∞ — a colour per
strategy (the view's colours), the mean over the seeds as a line with a light ± 1 sd band, against
the budget in % of the selectable pool, with the title above and what each budget selected below.

It draws with matplotlib's Agg renderer only: a `Figure` on a `FigureCanvasAgg`, never pyplot, so
there is no global state, no GUI backend and no display, and headless commands (the CLI, the
benchmarks) can call it. matplotlib is imported when drawing, so importing this module is cheap and
a caller without matplotlib learns it from the ImportError of the call (`write_experiment_outputs`
then skips the PNG with a warning).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SIZE = (1200, 800)  # pixels
DPI = 100
X_LABEL = "Budget (% of the selectable pool)"

# The view's colours (workbench.gui.plotting.colors.CLASS_PALETTE, Tableau 10, and
# workbench.gui.widgets.robustness_curves.STRATEGY_COLORS), kept here because the core imports no Qt.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
           "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
STRATEGY_COLORS = {"BE-ST": 0, "KM-ST": 1, "DeepGini": 2, "MCP": 4, "coverage-greedy": 6, "random": 9}
SPARE_COLORS = (3, 5, 7, 8)

#: Metric → (plot title, y axis title, a percentage, always 0–100 %), in the view's order.
PANELS = {"static": ("Static AE accuracy", "Accuracy on fp_test (%)", True, True),
          "adaptive": ("Adaptive robust accuracy", "PGD-10 accuracy (%)", True, True),
          "clean": ("Clean accuracy", "Test accuracy (%)", True, False),
          "fol": ("Mean FOL∞", "Mean FOL∞", False, False),
          "fol_selected": ("Mean FOL∞ of the selected set", "Mean FOL∞", False, False)}

TEXT = "#202124"
MUTED = "#5f6368"
GRID = "#dadce0"


def strategy_color(name: str, taken=()) -> str:
    """The view's colour of a strategy, as hex: fixed for the known ones (matched without regard to
    case), else the first spare palette colour not used by another unknown strategy in `taken`."""
    for known, index in STRATEGY_COLORS.items():
        if known.lower() == name.lower():
            return PALETTE[index]
    known = {k.lower() for k in STRATEGY_COLORS}
    others = [t for t in dict.fromkeys(taken) if t.lower() not in known]
    position = others.index(name) if name in others else len(others)
    return PALETTE[SPARE_COLORS[position % len(SPARE_COLORS)]]


def _by_budget(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        if "strategy" in r:
            out.setdefault(str(r["budget"]), []).append(r)
    return out


def budget_ticks(rows: list[dict]) -> list[tuple[float, str]]:
    """An x tick per budget, where its runs are drawn (the mean % actually selected), labelled with the
    budget asked for: "5" for 5%, so rounding to whole tests does not print 4.82759."""
    ticks = []
    for name, runs in _by_budget(rows).items():
        x = float(np.mean([r["budget_percent"] for r in runs]))
        ticks.append((x, name[:-1] if name.endswith("%") else f"{x:.3g}"))
    return sorted(ticks)


def budget_caption(rows: list[dict]) -> str:
    """The line under the plots: how many tests each budget selected, and what lines and bands mean."""
    groups = _by_budget(rows)
    sizes = []
    for name in sorted(groups, key=lambda b: np.mean([r["budget_percent"] for r in groups[b]])):
        counts = [int(r["selected"]) for r in groups[name] if r.get("selected") is not None]
        if counts:
            sizes.append(f"{name} → {round(float(np.mean(counts))):,}")
    seeds = max(len({r.get("seed") for r in runs if r["strategy"] == s})
                for runs in groups.values() for s in {r["strategy"] for r in runs})
    how = f"Lines: mean over {seeds} seeds; bands: ± 1 sd." if seeds > 1 else "One run (seed) per point."
    return (f"Tests selected per budget: {', '.join(sizes)}. " if sizes else "") + how


def _figure_inches(size: tuple[int, int], dpi: float) -> tuple[float, float]:
    """figsize for exactly `size` pixels at `dpi`: Agg truncates width × dpi to whole pixels, so a
    quotient like 29 / 100 (× 100 = 28.999…) is nudged up by far less than a pixel."""
    return tuple((int(n) + 1e-3) / dpi for n in size)


def save_experiment_plot(rows: list[dict], path, title: str = "", size: tuple[int, int] = SIZE) -> Path:
    """Draw `rows` (each with strategy, budget, budget_percent, seed and the metrics) and save the picture
    to `path` as a PNG of exactly `size` pixels, atomically; returns the path.

    Raises ValueError when there are no rows, ImportError when matplotlib is missing."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from workbench.core.project.store import atomic_path
    from workbench.core.robustness.experiment_report import experiment_series, metric_y_range, padded

    series = experiment_series(rows)
    if not series:
        raise ValueError("There are no experiment rows to plot.")
    present = list(dict.fromkeys(s.metric for s in series))
    metrics = [m for m in PANELS if m in present] + [m for m in present if m not in PANELS]
    strategies = list(dict.fromkeys(s.strategy for s in series))
    ticks = budget_ticks(rows)
    all_x = np.concatenate([s.arrays()[0] for s in series])

    width, height = (int(n) for n in size)
    fig = Figure(figsize=_figure_inches((width, height), DPI), dpi=DPI, facecolor="white",
                 layout="constrained")
    FigureCanvasAgg(fig)
    fig.get_layout_engine().set(w_pad=8 / DPI, h_pad=6 / DPI, hspace=0.04, wspace=0.03)
    columns = max(1, min(2, len(metrics)))
    grid_rows = -(-len(metrics) // columns)
    # A row for the legend above the plots (as in the view), so it never covers data nor the title.
    grid = fig.add_gridspec(1 + grid_rows, columns, height_ratios=[0.001] + [1] * grid_rows)
    header = fig.add_subplot(grid[0, :])
    header.axis("off")
    axes = []
    for i in range(len(metrics)):
        row, col = divmod(i, columns)
        axes.append(fig.add_subplot(grid[1 + row, col], sharex=axes[0] if axes else None))
    for i, (metric, ax) in enumerate(zip(metrics, axes)):
        panel_title, y_label, percent, full_range = PANELS.get(metric, (metric, metric, False, False))
        ax.set_facecolor("white")
        ax.set_title(panel_title, fontsize=11, color=TEXT, loc="center", pad=6)
        ax.set_ylabel(y_label, fontsize=9.5, color=TEXT)
        if i + columns >= len(metrics):  # the lowest plot of its column
            ax.set_xlabel(X_LABEL, fontsize=9.5, color=TEXT)
        ax.grid(True, color=GRID, linewidth=0.7)
        ax.set_axisbelow(True)
        ax.tick_params(labelsize=9, colors=MUTED, labelcolor=TEXT, labelbottom=True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        for side in ("left", "bottom"):
            ax.spines[side].set_color(MUTED)
        for s in series:
            if s.metric != metric:
                continue
            x, mean, sd = s.arrays()
            if not len(x):
                continue
            color = strategy_color(s.strategy, strategies)
            has_sd = np.isfinite(sd)
            if has_sd.any():
                band = np.where(has_sd, sd, 0.0)
                ax.fill_between(x, mean - band, mean + band, color=color, alpha=0.18, linewidth=0)
            ax.plot(x, mean, color=color, linewidth=2.0, linestyle="--" if s.running else "-",
                    marker="o", markersize=4.5, markeredgewidth=0)
        if full_range:
            ax.set_ylim(-7, 107)  # room for the 0 and 100 labels inside the axis
            ax.set_yticks(range(0, 101, 20))
        else:
            y_range = padded(metric_y_range([s for s in series if s.metric == metric], percent))
            if y_range is not None:
                ax.set_ylim(*y_range)
            else:
                ax.set_yticks([])
                ax.text(0.5, 0.5, "no values", transform=ax.transAxes, ha="center", va="center",
                        fontsize=10, color=MUTED)
    if ticks:
        first = axes[0]
        first.set_xticks([x for x, _ in ticks], [label for _, label in ticks])
    if len(all_x):
        low, high = float(all_x.min()), float(all_x.max())
        if high <= low:  # one budget: centred
            low, high = low - 0.5, high + 0.5
        pad = 0.03 * (high - low)
        axes[0].set_xlim(low - pad, high + pad)

    handles, labels = [], []
    for strategy in strategies:
        seeds = max(s.seeds for s in series if s.strategy == strategy)
        handles.append(Line2D([], [], color=strategy_color(strategy, strategies), linewidth=3))
        labels.append(strategy + (f" ({seeds} seeds)" if seeds > 1 else ""))
    if any(s.running for s in series):
        handles.append(Line2D([], [], color=MUTED, linewidth=2, linestyle="--"))
        labels.append("running")
    if any(np.isfinite(s.arrays()[2]).any() for s in series):
        handles.append(Patch(facecolor=MUTED, alpha=0.25, edgecolor="none"))
        labels.append("mean ± 1 sd")
    header.legend(handles, labels, loc="center", ncols=max(1, min(len(handles), width // 200)), frameon=False,
                  fontsize=10, handlelength=2.2, columnspacing=1.8, borderaxespad=0.2)
    if title:
        fig.suptitle(title, fontsize=13, fontweight="bold", color=TEXT)
    fig.supxlabel(budget_caption(rows), fontsize=9.5, color=MUTED)

    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, facecolor="white")
    return path
