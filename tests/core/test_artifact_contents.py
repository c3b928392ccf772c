"""Stored results that read but hold the wrong contents (text where numbers belong, arrays of the wrong
length or shape, a missing array or provenance field) are not reused: the job computes them again,
says so as a notice, and replaces them; readers refuse them with a `WorkbenchError`, never a traceback."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from workbench.core.coverage import measure_coverage
from workbench.core.data.dataset import Dataset
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.importance.neuron_importance import compute_importance
from workbench.core.models.evaluation import evaluate_stored
from workbench.core.models.model_io import load_model
from workbench.core.project.folder import Project

SOME = np.arange(0, 1000, 8)
DAMAGES = ("text", "short", "flat", "missing")


@pytest.fixture(scope="module")
def model():
    return load_model("lenet5-fashion")


@pytest.fixture(scope="module")
def small(fashion_slice):
    train = fashion_slice.split("train").subset(np.arange(300))
    return Dataset("fashion-slice-300", fashion_slice.class_names,
                   {"train": train, "test": fashion_slice.split("test").subset(SOME)}, fashion_slice.card)


@pytest.fixture
def project(tmp_path):
    return Project.create(tmp_path / "p", "fashion-slice-300", ["lenet5-fashion"])


def damage(project: Project, name: str, array: str | None, how: str, field: str | None = None,
           reindex: bool = False) -> Project:
    """Rewrite one array of a stored result (or drop one provenance field) in place; with `reindex`, the
    project's index is made to record the damaged layout too (as if the result had been saved so), so
    only the reader's own checks can tell. Returns the project, opened again."""
    path = project.artifact_path(project.settings["artifacts"][name])
    with h5py.File(path, "r+") as f:
        if field is not None:
            provenance = json.loads(f.attrs["provenance"])
            provenance.pop(field)
            f.attrs["provenance"] = json.dumps(provenance)
        else:
            data = f[array][()]
            del f[array]
            if how == "text":
                f[array] = np.array([b"x"] * max(1, len(data)))
            elif how == "short":
                f[array] = data[:-1]
            elif how == "flat":
                f[array] = data.reshape(-1)[:1].reshape(()) if data.ndim == 1 else data.reshape(len(data), -1)[:, 0]
        layout = {key: (list(f[key].shape), f[key].dtype.kind) for key in f.keys()}
    if reindex:
        settings = json.loads((project.folder / "project.json").read_text())
        entry = settings["artifacts"][name]
        entry["shapes"] = {key: shape for key, (shape, _) in layout.items()}
        entry["types"] = {key: kind for key, (_, kind) in layout.items()}
        (project.folder / "project.json").write_text(json.dumps(settings))
    return Project.open(project.folder)


def one_name(project: Project, kind: str) -> str:
    (name,) = project.artifacts(kind)
    return name


@pytest.mark.parametrize("reindex", [False, True], ids=["file-changed", "saved-so"])
@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_evaluation_is_evaluated_again(model, small, project, how, reindex):
    first = evaluate_stored(JobContext("cpu"), model, small, "test", project)
    name = one_name(project, "evaluation")
    project = damage(project, name, "predictions", how, reindex=reindex)
    ctx = JobContext("cpu")
    again = evaluate_stored(ctx, model, small, "test", project)
    assert "stored" not in again and again["accuracy"] == first["accuracy"]
    np.testing.assert_array_equal(again["predictions"], first["predictions"])
    assert len(ctx.notices) == 1 and name in ctx.notices[0] and "evaluated again" in ctx.notices[0]
    third = JobContext("cpu")
    assert evaluate_stored(third, model, small, "test", project)["stored"] and not third.notices  # replaced


@pytest.mark.parametrize("reindex", [False, True], ids=["file-changed", "saved-so"])
@pytest.mark.parametrize("how", [*DAMAGES, "provenance"])
def test_a_damaged_importance_result_is_computed_again(model, small, project, how, reindex):
    first = compute_importance(JobContext("cpu"), model, small, "fc2", project=project)
    name = one_name(project, "importance")
    if how == "provenance":
        project = damage(project, name, None, how, field="layer")
    else:
        project = damage(project, name, "ranking", how, reindex=reindex)
    ctx = JobContext("cpu")
    again = compute_importance(ctx, model, small, "fc2", project=project)
    assert not again.reused
    np.testing.assert_allclose(again.totals, first.totals, rtol=1e-5)
    assert len(ctx.notices) == 1 and name in ctx.notices[0] and "computed again" in ctx.notices[0]
    assert compute_importance(JobContext("cpu"), model, small, "fc2", project=project).reused


@pytest.mark.parametrize("reindex", [False, True], ids=["file-changed", "saved-so"])
@pytest.mark.parametrize("how", ("text", "short", "missing"))
def test_damaged_coverage_results_and_fits_are_measured_again(model, small, project, how, reindex):
    first = measure_coverage(JobContext("cpu"), model, small, "fc2", ["nc", "kmnc"], project=project)
    results = project.artifacts("coverage")
    fits = project.artifacts("coverage-fit")
    nc = next(n for n, e in results.items() if e["provenance"]["state"]["criterion"] == "nc")
    cover = next(k for k in project.load_artifact(nc).names if k.startswith("cover."))
    project = damage(project, nc, cover, how, reindex=reindex)
    (kmnc_fit,) = fits
    fit_array = next(k for k in project.load_artifact(kmnc_fit).names if k.startswith("fit."))
    project = damage(project, kmnc_fit, fit_array, how, reindex=reindex)
    kmnc = next(n for n, e in results.items() if e["provenance"]["state"]["criterion"] == "kmnc")
    project.delete_artifact(kmnc)  # so the KMNC result is measured on the (damaged) fit
    ctx = JobContext("cpu")
    again = measure_coverage(ctx, model, small, "fc2", ["nc", "kmnc"], project=project)
    for key in ("nc", "kmnc"):
        assert not again[key].reused and again[key].value == first[key].value
    assert len(ctx.notices) == 2 and "measured again" in ctx.notices[0] and "fitted again" in ctx.notices[1]
    third = measure_coverage(JobContext("cpu"), model, small, "fc2", ["nc", "kmnc"], project=project)
    assert all(r.reused for r in third.values())


@pytest.mark.parametrize("reindex", [False, True], ids=["file-changed", "saved-so"])
def test_damaged_pools_runs_and_fuzzer_tests_are_refused_with_a_message(project, reindex):
    from workbench.core.robustness.fuzzing import FuzzResult
    from workbench.core.robustness.pool import CandidatePool, load_pool, save_pool
    from workbench.core.robustness.runs import latest_run, load_run, save_run
    from workbench.core.robustness.study import stored_pool

    rng = np.random.default_rng(0)
    n = 6
    pool = CandidatePool(rng.random((n, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, n),
                         np.arange(n), np.array(["fgsm"] * n), {"fol_linf": rng.random(n)},
                         rng.dirichlet(np.ones(10), n), {"eps": 0.1})
    for array, how in (("y", "text"), ("probs", "short"), ("score_fol_linf", "short"), ("x", "flat"),
                       ("source_index", "missing")):
        save_pool(project, "pool", pool, kind_of_pool="train", model_fingerprint="f")
        project = damage(project, "pool", array, how, reindex=reindex)
        with pytest.raises(WorkbenchError, match="does not hold|lacks|not as it was saved"):
            load_pool(project, "pool")
        ctx = JobContext("cpu")
        assert stored_pool(ctx, project, kind_of_pool="train") == (None, None)
        assert len(ctx.notices) == 1 and "built again" in ctx.notices[0]

    row = {"strategy": "be-st", "budget": "1%", "budget_percent": 1.0, "seed": 0, "static_ae_accuracy": 0.5}
    for bad in ({**row, "static_ae_accuracy": "high"}, {k: v for k, v in row.items() if k != "budget"},
                {**row, "seed": True}):
        save_run(project, "run", "experiment", [bad], {"eps": 0.1}, model_fingerprint="f")
        with pytest.raises(WorkbenchError, match="does not hold"):
            load_run(project, "run")
        assert latest_run(project, "experiment", "f", 0.1) is None  # a damaged run is not shown
    save_run(project, "run", "experiment", [row], {"eps": 0.1}, model_fingerprint="f")
    assert latest_run(project, "experiment", "f", 0.1)["rows"] == [row]

    arrays = {"x": np.zeros((3, 1, 28, 28), np.float32), "y": np.zeros(3, np.int64),
              **{k: np.zeros(3) for k in FuzzResult.ARRAY_KEYS}}
    assert len(FuzzResult.from_arrays(arrays)) == 3
    for key in ("x", "fol_linf"):
        with pytest.raises(WorkbenchError, match="do not fit together"):
            FuzzResult.from_arrays({**arrays, key: arrays[key][:2]})
