"""Criterion states on disk: one HDF5 artifact each, arrays as datasets, the rest as JSON provenance.

A fitted criterion (kind `coverage-fit`) holds what was learnt from the training data; a result
(kind `coverage`) holds the covered items, the growth curve and the name of its fit artifact, so a
large fit (surprise adequacy keeps every training activation trace) is stored once. Loading a state
into a criterion goes through `Criterion.load_state_dict`, which refuses a state whose recorded
identity hash (model fingerprint, layer, options) differs from the criterion's.
"""

from __future__ import annotations

import os

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.project.store import provenance, read_artifact, write_artifact

FIT_KIND = "coverage-fit"
RESULT_KIND = "coverage"
STATE_FILE_KIND = "coverage-state"


def split_state(state: dict) -> tuple[dict, dict[str, np.ndarray]]:
    """(JSON header, arrays) of a state dict."""
    header = {k: v for k, v in state.items() if k != "arrays"}
    return header, dict(state["arrays"])


def join_state(header: dict, arrays: dict[str, np.ndarray]) -> dict:
    return {**header, "arrays": arrays}


def save_state_file(path: str | os.PathLike, state: dict, **how) -> None:
    """Write a criterion state to a standalone HDF5 file, atomically."""
    header, arrays = split_state(state)
    write_artifact(path, STATE_FILE_KIND, arrays, provenance(state=header, **how))


def load_state_file(path: str | os.PathLike) -> dict:
    artifact = read_artifact(path)
    if "state" not in artifact.provenance:
        raise WorkbenchError(f"{os.fspath(path)} holds no coverage-criterion state.", "Choose a criterion state file.")
    return join_state(artifact.provenance["state"], {n: artifact[n] for n in artifact.names})


def save_fit(project, name: str, state: dict, **how) -> str:
    header, arrays = split_state(state)
    fit_arrays = {k: v for k, v in arrays.items() if k.startswith("fit.")}
    header = {**header, "meta": {k: v for k, v in header["meta"].items() if k != "cover"}}
    project.save_artifact(FIT_KIND, name, fit_arrays, state=header, **how)
    return name


def save_result(project, name: str, state: dict, fit_artifact: str | None, curve: np.ndarray, **how) -> str:
    header, arrays = split_state(state)
    cover_arrays = {k: v for k, v in arrays.items() if not k.startswith("fit.")}
    project.save_artifact(RESULT_KIND, name, {**cover_arrays, "curve": np.asarray(curve, dtype=np.float64)},
                          state=header, fit_artifact=fit_artifact, **how)
    return name


def read_state(project, name: str) -> tuple[dict, dict]:
    """(state, provenance) of a fit or result artifact; a result is joined with its fit artifact."""
    artifact = project.load_artifact(name)
    if artifact.kind not in (FIT_KIND, RESULT_KIND):
        raise WorkbenchError(f"Result {name!r} is a {artifact.kind} result, not coverage.", "Choose a coverage result.")
    how = artifact.provenance
    arrays = {n: artifact[n] for n in artifact.names if n != "curve"}
    fit_name = how.get("fit_artifact")
    if artifact.kind == RESULT_KIND and fit_name:
        if fit_name not in project.artifacts(FIT_KIND):
            raise WorkbenchError(f"Coverage result {name!r} needs its fitted criterion {fit_name!r}, which is missing.",
                                 "Measure the coverage again.")
        fit = project.load_artifact(fit_name)
        arrays.update({n: fit[n] for n in fit.names})
    return join_state(how["state"], arrays), how


def read_curve(project, name: str) -> np.ndarray:
    artifact = project.load_artifact(name)
    return artifact.numbers("curve", ndim=2) if "curve" in artifact.names else np.zeros((0, 3))
