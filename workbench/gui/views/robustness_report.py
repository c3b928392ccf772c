"""What the Robustness view draws, computed from result rows: curve series and summary lines (no Qt)."""

from __future__ import annotations

import numpy as np

from workbench.core.robustness.experiment_report import ROW_METRICS, Series, strategy_title

CONVERGENCE_SERIES = "all successes"


def convergence_series(rows: list[dict], running: bool = False, title: str = CONVERGENCE_SERIES) -> list[Series]:
    """One series per metric against the round number."""
    x = [float(r["round"]) for r in rows]
    return [Series(title, metric, x, [scale * r.get(field, np.nan) for r in rows], running=running)
            for field, (metric, scale) in ROW_METRICS.items() if any(field in r for r in rows)]


def baseline_text(setup) -> str:
    """One line on the pools and the original model's robustness."""
    b = setup.baseline
    counts = ", ".join(f"{n:,} {a.upper() if a in ('fgsm', 'pgd') else a}"
                       for a, n in setup.pool.attack_counts().items())
    static = b.get("static_ae_accuracy")
    return (f"Pool: {len(setup.pool):,} successful adversarials ({counts}) at ε = {setup.eps:g}; "
            f"{len(setup.selectable):,} selectable, {len(setup.heldout):,} held out for checkpointing; "
            f"fp_test {len(setup.fp_test):,}. Original model: clean {100 * b['clean_accuracy']:.1f} %, "
            f"static AE {100 * (static or 0):.1f} %, adaptive PGD {100 * b['adaptive_robust_accuracy']:.1f} %, "
            f"mean FOL∞ {b['fol_mean']:.3g}. {clean_test_text(setup)}")


def clean_test_text(setup) -> str:
    """What the histogram's "clean test" set is: the reports' seeded subset, not the whole test split."""
    test = len(setup.dataset.split("test"))
    shown = min(setup.report_subset, test)
    if shown >= test:
        return f"“clean test” is the FOL∞ of all {test:,} test images."
    return (f"“clean test” is the FOL∞ of a seeded {shown:,} of the {test:,} test images: the subset every "
            "robustness report attacks with PGD-10, so the histograms compare like with like.")


def selection_text(chosen, picked) -> str:
    fol = picked.scores.get("fol_linf", np.zeros(0))
    attacks = ", ".join(f"{n:,} {a.upper()}" for a, n in picked.attack_counts().items())
    span = f"FOL∞ {fol.min():.3g} – {fol.max():.3g}" if len(fol) else ""
    return f"{strategy_title(chosen.strategy)} picked {len(chosen.indices):,} candidates ({attacks}); {span}"


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
