"""Retraining experiments and convergence runs stored in a project, with every setting
(docs/methods/fuzzing-and-retraining.md#the-robot-experiment and #convergence-loop).

A run is a list of flat rows (one per retraining run or per round). The artifact holds each numeric
or text column as an array, for HDF5 readers, and the rows themselves in its provenance, so the
GUI and CLI read them back exactly.
"""

from __future__ import annotations

import numpy as np

from workbench.core.errors import WorkbenchError

RUN_KIND = "robustness"
# Fields of a run's rows that are drawn and averaged: a stored run must hold numbers there.
NUMERIC_FIELDS = ("static_ae_accuracy", "adaptive_robust_accuracy", "clean_accuracy", "fol_mean", "budget_percent",
                  "round", "seed", "selected")


def rows_to_columns(rows: list[dict]) -> dict[str, np.ndarray]:
    """Scalar fields shared by every row as arrays (numbers as float64, text as str)."""
    columns = {}
    for key in rows[0] if rows else ():
        values = [row.get(key) for row in rows]
        if all(isinstance(v, (bool, int, float, np.number)) or v is None for v in values):
            columns[key] = np.array([np.nan if v is None else float(v) for v in values])
        elif all(isinstance(v, str) for v in values):
            columns[key] = np.array(values, dtype=str)
    return columns


def save_run(project, name: str, what: str, rows: list[dict], params: dict, **how) -> dict:
    """Store a run (`what` is "experiment" or "convergence") under `name`; replaces one of that name."""
    if not rows:
        raise WorkbenchError("The run produced no rows; nothing is stored.", "Run at least one round.")
    return project.save_artifact(RUN_KIND, name, rows_to_columns(rows), what=what, rows=rows, params=params, **how)


def load_run(project, name: str) -> dict:
    """{"what", "rows", "params", ...} of a stored run."""
    artifact = project.load_artifact(name, kind=RUN_KIND)
    how = artifact.provenance
    if "rows" not in how:
        raise WorkbenchError(f"Result {name!r} holds no run rows.", "Run the experiment again.")
    rows = how["rows"]
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise artifact.wrong_contents("its rows are not a list of records")
    for row in rows:
        if how.get("what") == "experiment" and "strategy" in row and not {"budget", "budget_percent", "seed"} <= set(row):
            raise artifact.wrong_contents("a retraining row lacks its budget or seed")
        bad = [key for key in NUMERIC_FIELDS if key in row and row[key] is not None
               and (isinstance(row[key], bool) or not isinstance(row[key], (int, float)))]
        if bad:
            raise artifact.wrong_contents(f"its {', '.join(map(repr, bad))} values are not numbers")
    if not isinstance(how.get("params", {}), dict):
        raise artifact.wrong_contents("its parameters are not a record")
    return how


def latest_run(project, what: str, fingerprint: str, eps: float) -> dict | None:
    """The newest stored run of `what` for these weights and ε, read back; None when there is none."""
    entries = [(entry["provenance"].get("created", ""), name) for name, entry in project.artifacts(RUN_KIND).items()
               if "problem" not in entry and entry["provenance"].get("what") == what
               and fingerprint in (entry["provenance"].get("model_fingerprint"),
                                   entry["provenance"].get("params", {}).get("model_fingerprint"))
               and entry["provenance"].get("params", {}).get("eps") == eps]
    for _, name in sorted(entries, reverse=True):
        try:
            return {"name": name, **load_run(project, name)}
        except WorkbenchError:
            continue
    return None
