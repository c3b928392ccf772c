"""The written report of a RobOT experiment: CSV, Markdown, JSON and a plot.

Method: docs/methods/fuzzing-and-retraining.md#the-robot-experiment.

`write_experiment_outputs(result, out_dir, plot)` writes `robot_experiment.csv` (one row per run),
`.json` (settings, setup, rows and the mean ± sd tables), `.png` (robustness against budget per
strategy) and `.md` (the protocol, the plot and the tables), each atomically. The core never
imports Qt: the plot is drawn by the `plot` callable the caller hands in (normally
`workbench.core.robustness.experiment_plot.save_experiment_plot`, matplotlib's Agg); when it cannot
draw (ImportError, RuntimeError), the PNG is skipped with a warning and the rest is written as usual.
`experiment_table` is the mean ± sd over seeds that the CLI prints too; `experiment_series` is the
mean ± sd curves per strategy and metric that the Robustness view and the PNG draw.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

OPTIMISTIC_LABEL = "optimistic (checkpoint chosen on test data)"
EXPERIMENT_COLUMNS = ("strategy", "budget", "seed", "selected", "budget_percent", "static_ae_accuracy",
                      "adaptive_robust_accuracy", "clean_accuracy", "fol_mean", "fol_median", "selected_fol_mean",
                      "best_epoch", "checkpoint_mode", "optimistic", "seconds")
#: The metrics the tables summarise, with their titles in the Markdown report.
TABLE_METRICS = {"static_ae_accuracy": "Static AE accuracy (accuracy on fp_test)",
                 "adaptive_robust_accuracy": "Adaptive robust accuracy (PGD-10 against the retrained model)",
                 "clean_accuracy": "Clean test accuracy"}
BASENAME = "robot_experiment"
STRATEGY_TITLES = {"be-st": "BE-ST", "km-st": "KM-ST", "deepgini": "DeepGini", "random": "random", "mcp": "MCP",
                   "coverage-greedy": "coverage-greedy", "kmst-legacy": "KM-ST (legacy)"}
#: Row field → (curve metric, scale): accuracies are drawn in %.
ROW_METRICS = {"static_ae_accuracy": ("static", 100.0), "adaptive_robust_accuracy": ("adaptive", 100.0),
               "clean_accuracy": ("clean", 100.0), "fol_mean": ("fol", 1.0)}


def strategy_title(name: str) -> str:
    return STRATEGY_TITLES.get(name, name)


@dataclass
class Series:
    """One strategy's values of one metric: mean (and sd over `seeds` runs) at each x.

    Accuracies are in % (0–100); `sd` None or NaN draws no band; `running` draws the line dashed.
    """

    strategy: str
    metric: str
    x: Sequence[float]
    mean: Sequence[float]
    sd: Sequence[float] | None = None
    running: bool = False
    seeds: int = 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x, mean and sd as float arrays sorted by x (sd NaN where unknown)."""
        x = np.asarray(self.x, dtype=np.float64).ravel()
        mean = np.asarray(self.mean, dtype=np.float64).ravel()
        sd = np.full(len(x), np.nan) if self.sd is None else np.asarray(self.sd, dtype=np.float64).ravel()
        if not len(x) == len(mean) == len(sd):
            raise ValueError(f"{self.strategy} / {self.metric}: x, mean and sd differ in length "
                             f"({len(x)}, {len(mean)}, {len(sd)})")
        order = np.argsort(x, kind="stable")
        return x[order], mean[order], sd[order]


def experiment_series(rows: list[dict], running: bool = False) -> list[Series]:
    """Mean ± sd over seeds of every metric, per strategy, against the budget (% of the selectable pool)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        if "strategy" in row:
            groups.setdefault((row["strategy"], row["budget"]), []).append(row)
    series = []
    for strategy in dict.fromkeys(s for s, _ in groups):
        budgets = [b for s, b in groups if s == strategy]
        x = [float(np.mean([r["budget_percent"] for r in groups[strategy, b]])) for b in budgets]
        seeds = max(len(groups[strategy, b]) for b in budgets)
        for field, (metric, scale) in ROW_METRICS.items():
            values = [[scale * r[field] for r in groups[strategy, b] if r.get(field) is not None] for b in budgets]
            mean = [float(np.mean(v)) if v else np.nan for v in values]
            sd = [float(np.std(v, ddof=1)) if len(v) > 1 else np.nan for v in values]
            series.append(Series(strategy_title(strategy), metric, x, mean, sd, running=running, seeds=seeds))
    return series


def pct(x) -> str:
    """An accuracy in [0, 1] as "12.3 %"; "—" when unknown."""
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x * 100:.1f} %"


def num(x, fmt: str = ".4g") -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def epochs_text(n) -> str:
    return f"{n} epoch" + ("" if n == 1 else "s")


def _mean_sd(values) -> tuple[float | None, float | None, int]:
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    if not v.size:
        return None, None, 0
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(v.size)


def experiment_table(result, metric: str) -> dict:
    """{strategy: {budget: {"mean", "sd", "runs"}}} of one metric over the seeds, in the grid's order."""
    out: dict = {}
    for row in result.rows:
        out.setdefault(row["strategy"], {}).setdefault(row["budget"], []).append(row.get(metric))
    return {s: {b: dict(zip(("mean", "sd", "runs"), _mean_sd(v))) for b, v in by.items()} for s, by in out.items()}


def plot_title(result) -> str:
    p = result.params
    title = f"RobOT experiment: {p.get('model', '?')} on {p.get('dataset', '?')}"
    if result.setup.get("eps") is not None:
        title += f", ε = {result.setup['eps']:g}"
    return title + (f" — {OPTIMISTIC_LABEL}" if p.get("checkpoint_mode") == "paper" else "")


def experiment_markdown(result, plot_file: str | None = None) -> str:
    """The protocol and the mean ± sd tables; `plot_file` (a name beside the report) is shown when given."""
    p, s = result.params, result.setup
    baseline = s["baseline"]
    budgets = list(dict.fromkeys(r["budget"] for r in result.rows))
    optimistic = p.get("checkpoint_mode") == "paper"
    mode = ("paper: the epoch with the best fp_test accuracy is kept — " + OPTIMISTIC_LABEL) if optimistic else \
        "clean: the epoch with the best accuracy on the held-out part of the pool is kept"
    pool = s["pool"]
    lines = [f"# RobOT experiment: {p.get('model', '?')} on {p.get('dataset', '?')}", "", "## Protocol", "",
             f"- model: {p.get('model', '?')} (weights {p.get('model_fingerprint', '?')})",
             f"- data: {p.get('dataset', '?')}",
             f"- eps (L∞): {s['eps']:g} ({p.get('eps_source', '')})",
             f"- pool: {pool['candidates']:,} successful FGSM/PGD adversarials ("
             + ", ".join(f"{a} {n:,}" for a, n in pool["by_attack"].items())
             + f") of {p.get('pool_attacked', 'the whole training set')}",
             f"- selectable: {s['selectable']:,}; held out for checkpointing: {s['heldout']:,}",
             f"- fp_test: {s['fp_test']['candidates']:,} successful adversarials of the test set against the original model",
             f"- preset: {p['preset']}, {epochs_text(p['epochs'])} of fine-tuning from the original weights per run",
             f"- strategies: {', '.join(p['strategies'])}; budgets (% of the selectable pool): {', '.join(p['budgets'])}",
             f"- seeds: {', '.join(str(x) for x in p['seeds'])}",
             f"- checkpoint mode: {mode}",
             ("- adaptive robust accuracy: PGD-10 (α = ε/6, random start) against each model on "
              f"{baseline.get('adaptive_inputs', p.get('report_subset'))} test inputs"),
             (f"- baseline (original model): static AE accuracy {pct(baseline.get('static_ae_accuracy'))}, "
              f"adaptive robust accuracy {pct(baseline['adaptive_robust_accuracy'])}, clean accuracy "
              f"{pct(baseline['clean_accuracy'])}, mean FOL∞ {num(baseline['fol_mean'])}"), ""]
    if plot_file:
        lines += ["## Robustness against budget", "",
                  "Mean ± 1 sd over the seeds per strategy; x: budget (% of the selectable pool)"
                  + (" — " + OPTIMISTIC_LABEL if optimistic else "") + ".", "",
                  f"![Robustness against budget per strategy]({plot_file})", ""]
    for metric, title in TABLE_METRICS.items():
        table = experiment_table(result, metric)
        lines += [f"## {title}, mean ± sd over seeds (%)" + (" — " + OPTIMISTIC_LABEL if optimistic else ""), "",
                  "| strategy | " + " | ".join(budgets) + " |", "|---|" + "---|" * len(budgets)]
        for strategy, by in table.items():
            cells = []
            for b in budgets:
                c = by.get(b)
                cells.append("—" if not c or c["mean"] is None else f"{c['mean'] * 100:.1f} ± {c['sd'] * 100:.1f}")
            lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _warn_on_stderr(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


def write_experiment_outputs(result, out_dir, plot: Callable | None = None,
                             on_warning: Callable[[str], None] | None = None) -> dict[str, str]:
    """Write robot_experiment.csv, .json, .png (when `plot` is given and Qt starts) and .md into `out_dir`,
    each atomically; returns {"csv", "json", "md"} paths, and "png" when the plot was written.

    `result` is an `ExperimentResult` whose `params` may also carry model, dataset, eps_source and
    pool_attacked for the protocol. `plot(rows, path, title)` draws the PNG (normally
    `workbench.core.robustness.experiment_plot.save_experiment_plot`); if it raises ImportError or
    RuntimeError (say, no matplotlib), the PNG is skipped and `on_warning` gets one line (default: printed
    to stderr).
    """
    import csv
    import json

    from workbench.core.project.store import atomic_path, lenient_json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"csv": out / f"{BASENAME}.csv", "json": out / f"{BASENAME}.json"}
    attacks = sorted({a for r in result.rows for a in (r.get("static_ae_by_attack") or {})})
    with atomic_path(files["csv"]) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(list(EXPERIMENT_COLUMNS) + [f"static_ae_accuracy_{a}" for a in attacks])
        for r in result.rows:
            by = r.get("static_ae_by_attack") or {}
            w.writerow([r.get(c) for c in EXPERIMENT_COLUMNS] + [by.get(a) for a in attacks])
    with atomic_path(files["json"]) as tmp:
        data = {"params": result.params, "setup": result.setup, "rows": result.rows,
                "tables": {m: experiment_table(result, m) for m in TABLE_METRICS}}
        tmp.write_text(json.dumps(data, indent=2, default=lenient_json))
    if plot is not None and result.rows:
        png = out / f"{BASENAME}.png"
        try:
            files["png"] = Path(plot(result.rows, png, plot_title(result)))
        except (ImportError, RuntimeError) as exc:
            (on_warning or _warn_on_stderr)(f"the plot {png.name} was not drawn ({exc}); "
                                            "the CSV, JSON and Markdown reports are complete without it")
    files["md"] = out / f"{BASENAME}.md"
    with atomic_path(files["md"]) as tmp:
        tmp.write_text(experiment_markdown(result, files["png"].name if "png" in files else None))
    return {k: str(files[k]) for k in ("csv", "md", "json", "png") if k in files}


def metric_y_range(series, percent: bool) -> tuple[float, float] | None:
    """The y range a plot of one metric's series shows: the data with its ± sd bands, at least 2
    points wide for percentages and within 0–100 %; None when nothing is finite."""
    lows, highs = [], []
    for s in series:
        _, mean, sd = s.arrays()
        band = np.nan_to_num(sd, nan=0.0)
        lows.append(mean - band)
        highs.append(mean + band)
    if not lows:
        return None
    low_values, high_values = np.concatenate(lows), np.concatenate(highs)
    finite = np.isfinite(low_values) & np.isfinite(high_values)
    if not finite.any():
        return None
    low, high = float(low_values[finite].min()), float(high_values[finite].max())
    if percent and high - low < 2.0:
        middle = (low + high) / 2
        low, high = middle - 1.0, middle + 1.0
    elif high <= low:
        low, high = low - (abs(low) or 1) * 0.1, high + (abs(high) or 1) * 0.1
    if percent:
        low, high = max(0.0, low), min(100.0, high)
    return low, high


def padded(y_range: tuple[float, float] | None, fraction: float = 0.08) -> tuple[float, float] | None:
    """`y_range` widened by `fraction` of its height on each side."""
    if y_range is None:
        return None
    low, high = y_range
    pad = fraction * (high - low)
    return low - pad, high + pad
