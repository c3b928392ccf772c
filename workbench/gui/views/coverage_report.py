"""What the Coverage view says about its runs, in words and curves: a table cell per criterion and set,
the summary line above the panels, and the growth curves of one criterion. Plain functions of the
runs (`coverage_runs.SetRun`), so the view only places what they return.
"""

from __future__ import annotations

import numpy as np

from workbench.gui.session.coverage_choices import coverage_text, criterion_help, criterion_titles
from workbench.gui.session.coverage_runs import CANCELLED, DONE, FAILED, RUNNING, CoverageRequest, SetRun
from workbench.gui.views.view_inputs import error_text, fitted_on
from workbench.gui.widgets.growth_plot import Curve

NEURON_CRITERIA = ("nc", "kmnc", "nbc", "snac", "tknc", "tknp")


def cell_text(run: SetRun | None, name: str, offered: bool = False) -> tuple[str, str, str]:
    """(text, state, tooltip) of criterion `name` on one set, the state as `CoverageTable.set_cell` takes it;
    `offered`: the set's measuring waits for the user's click."""
    if run is None:
        return "", "waiting", ""
    result, error = run.result(name), run.criterion_error(name)
    if run.state == DONE and result is not None:
        how = "stored result, reused" if result.reused else "measured now"
        tip = f"{criterion_help().get(name, name)}\n{result.value} of {run.choice.title} ({how})"
        if result.warnings:
            tip += "\n\n⚠ " + "\n⚠ ".join(result.warnings)
        return coverage_text(result.value) + ("  ⚠" if result.warnings else ""), "done", tip
    if error is not None:
        return ("cancelled" if run.state == CANCELLED else "failed"), "failed", error_text(error)
    if run.state == RUNNING:
        points = run.growth.get(name) or []
        done, total = run.progress
        if points:
            return f"{100 * points[-1][1]:.1f} % so far", "running", f"{done:,} of {total:,} inputs measured"
        return "measuring…", "running", "Fitting on the training data, then measuring (see Jobs)"
    if offered:
        return "not measured yet", "waiting", "Measuring takes a while on this machine: press Measure above to start"
    if run.waiting_for:
        return "waiting", "waiting", f"Waiting for {run.waiting_for}"
    return "waiting", "waiting", "Measured after the sets before it, reusing their fit"


def summary_text(request: CoverageRequest, data, runs: list[SetRun]) -> str:
    """Where each criterion measures and on what it was fitted; then the sets being measured or failed."""
    parts = []
    if "idc" in request.criteria:
        parts.append(f"<b>IDC</b> on {request.layer} with its {request.m} most relevant neurons")
    titles = criterion_titles()
    neuron = [titles[n] for n in request.criteria if n in NEURON_CRITERIA]
    if neuron:
        parts.append(f"<b>{', '.join(neuron)}</b> on every conv, pooling and dense layer")
    if data is not None:
        parts.append(f"fitted on the {len(data.split(data.fit_split)):,} {fitted_on(data)} of {data.name}")
    notes = []
    for run in runs:
        if run.state == RUNNING:
            done, total = run.progress
            so_far = f": {done:,} of {total:,} inputs…" if total else "…"
            notes.append(f"measuring {run.choice.title}{so_far}")
        elif run.state in (FAILED, CANCELLED) and run.error is not None:
            message = getattr(run.error, "message", None) or str(run.error)
            notes.append(f"<span style='color:#d62728'>{run.choice.title}: {message}</span>")
    return " · ".join(parts) + ("<br>" + " · ".join(notes) if notes else "")


def growth_curves(name: str, runs: list[tuple[SetRun, object]]) -> tuple[list[Curve], str]:
    """The growth curve of criterion `name` for each (run, colour): measured points, or the running
    values of a set still being measured; and the unit ("%", or "patterns" for a count)."""
    curves, unit = [], "%"
    for run, color in runs:
        result = run.result(name)
        if result is not None and len(result.curve):
            if result.value.total is None:
                unit, values = "patterns", result.curve[:, 1]
            else:
                values = 100 * np.nan_to_num(result.curve[:, 2])
            curves.append(Curve(run.choice.title, color, result.curve[:, 0], values))
        elif run.state == RUNNING and run.growth.get(name):
            points = np.asarray(run.growth[name], dtype=np.float64)
            curves.append(Curve(run.choice.title, color, points[:, 0], 100 * points[:, 1], running=True,
                                total=run.progress[1]))
    return curves, unit
