"""What the Robustness view draws, computed from result rows: curve series and summary lines (no Qt)."""

from __future__ import annotations

import numpy as np

from workbench.gui.widgets.robustness_curves import Series

STRATEGY_TITLES = {"be-st": "BE-ST", "km-st": "KM-ST", "deepgini": "DeepGini", "random": "random", "mcp": "MCP",
                   "coverage-greedy": "coverage-greedy", "kmst-legacy": "KM-ST (legacy)"}
#: Row field → (curve metric, scale): accuracies are drawn in %.
ROW_METRICS = {"static_ae_accuracy": ("static", 100.0), "adaptive_robust_accuracy": ("adaptive", 100.0),
               "clean_accuracy": ("clean", 100.0), "fol_mean": ("fol", 1.0)}
CONVERGENCE_SERIES = "all successes"


def strategy_title(name: str) -> str:
    return STRATEGY_TITLES.get(name, name)


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


def convergence_series(rows: list[dict], running: bool = False, title: str = CONVERGENCE_SERIES) -> list[Series]:
    """One series per metric against the round number."""
    x = [float(r["round"]) for r in rows]
    return [Series(title, metric, x, [scale * r.get(field, np.nan) for r in rows], running=running)
            for field, (metric, scale) in ROW_METRICS.items() if any(field in r for r in rows)]


def baseline_text(setup) -> str:
    """One line on the pools and the original model's robustness."""
    b = setup.baseline
    counts = ", ".join(f"{n:,} {a.upper()}" for a, n in setup.pool.attack_counts().items())
    static = b.get("static_ae_accuracy")
    return (f"Pool: {len(setup.pool):,} successful adversarials ({counts}) at ε = {setup.eps:g}; "
            f"{len(setup.selectable):,} selectable, {len(setup.heldout):,} held out for checkpointing; "
            f"fp_test {len(setup.fp_test):,}. Original model: clean {100 * b['clean_accuracy']:.1f} %, "
            f"static AE {100 * (static or 0):.1f} %, adaptive PGD {100 * b['adaptive_robust_accuracy']:.1f} %, "
            f"mean FOL∞ {b['fol_mean']:.3g}.")


def selection_text(chosen, picked) -> str:
    fol = picked.scores.get("fol_linf", np.zeros(0))
    attacks = ", ".join(f"{n:,} {a.upper()}" for a, n in picked.attack_counts().items())
    span = f"FOL∞ {fol.min():.3g} – {fol.max():.3g}" if len(fol) else ""
    return f"{strategy_title(chosen.strategy)} picked {len(chosen.indices):,} candidates ({attacks}); {span}"


def latest_run(project, what: str, fingerprint: str, eps: float) -> dict | None:
    """The newest stored run of `what` for these weights and ε, read back; None when there is none."""
    from workbench.core.errors import WorkbenchError
    from workbench.core.robustness.runs import RUN_KIND, load_run

    entries = [(entry["provenance"].get("created", ""), name) for name, entry in project.artifacts(RUN_KIND).items()
               if "problem" not in entry and entry["provenance"].get("what") == what
               and entry["provenance"].get("model_fingerprint") == fingerprint
               and entry["provenance"].get("params", {}).get("eps") == eps]
    for _, name in sorted(entries, reverse=True):
        try:
            return {"name": name, **load_run(project, name)}
        except WorkbenchError:
            continue
    return None


def table_rows(rows: list[dict]) -> tuple[list[str], list[list]]:
    """Result rows as a CSV table: every scalar field, nested ones (per-attack accuracy) flattened."""
    flat = []
    for row in rows:
        out = {}
        for key, value in row.items():
            if isinstance(value, dict):
                out.update({f"{key}.{k}": v for k, v in value.items() if not isinstance(v, (dict, list))})
            elif not isinstance(value, list):
                out[key] = value
        flat.append(out)
    header = list(dict.fromkeys(k for row in flat for k in row))
    return header, [[row.get(k) for k in header] for row in flat]
