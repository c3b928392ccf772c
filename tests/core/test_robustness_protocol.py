"""The candidate pool, robustness reports, fine-tuning, the convergence loop and stored runs
(docs/methods/fol-and-selection.md#candidate-pool and docs/methods/fuzzing-and-retraining.md), on
scikit-learn digits with a tiny trained net."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.robustness import attacks as A
from workbench.core.robustness import pool as P
from workbench.core.robustness import reports as R
from workbench.core.robustness.convergence import convergence_loop, plateaued
from workbench.core.robustness.retraining import augment_batch, fine_tune
from workbench.core.robustness.runs import load_run, save_run
from workbench.core.robustness.scores import fol_linf, input_gradients

EPS = 0.2


@pytest.fixture
def ctx():
    return JobContext("cpu")


@pytest.fixture
def test_pool(ctx, digits_model, digits):
    return P.build_pool(ctx, digits_model, digits.split("test"), EPS, seed=3, what="digits test")


def test_pool_holds_only_successes_with_their_scores(ctx, digits_model, digits, test_pool):
    split = digits.split("test")
    assert len(test_pool) > 50
    assert set(test_pool.attack_counts()) == {"fgsm", "pgd"}
    # Every candidate is misclassified by the model it was made against: 0 % on its own set.
    assert (R.predictions(ctx, digits_model, test_pool.images) != test_pool.labels).all()
    np.testing.assert_array_equal(test_pool.labels, split.labels[test_pool.source_index])
    x0 = split.numpy(test_pool.source_index)
    assert np.abs(test_pool.images - x0).max() <= EPS + 1e-6
    # FOL∞ recomputed from scratch for each candidate: the stored score is that of (x', x0, y, ε).
    xa, x0t = torch.from_numpy(test_pool.images), torch.from_numpy(x0)
    grad, _ = input_gradients(digits_model.module, xa, torch.from_numpy(test_pool.labels))
    np.testing.assert_allclose(test_pool.scores["fol_linf"], fol_linf(grad, xa, x0t, EPS).numpy(), rtol=1e-5, atol=1e-6)
    assert (test_pool.scores["fol_linf"] >= -1e-5).all()
    assert test_pool.probs.shape == (len(test_pool), 10)
    np.testing.assert_allclose(test_pool.probs.sum(1), 1.0, rtol=1e-6)


def test_pool_round_trips_through_a_project(tmp_project, test_pool):
    P.save_pool(tmp_project, "digits-pool", test_pool, note="test")
    back = P.load_pool(tmp_project, "digits-pool")
    np.testing.assert_array_equal(back.images, test_pool.images)
    np.testing.assert_array_equal(back.attack, test_pool.attack)
    for key, values in test_pool.scores.items():
        np.testing.assert_array_equal(back.scores[key], values)
    assert back.params["eps"] == EPS and "role" not in back.params
    assert tmp_project.artifacts("testset")["digits-pool"]["provenance"]["role"] == "candidate-pool"
    assert any(t["name"] == "digits-pool" for t in tmp_project.testsets)


def test_a_test_set_without_pool_arrays_is_refused(tmp_project):
    tmp_project.save_artifact("testset", "plain", {"x": np.zeros((2, 1, 8, 8)), "y": np.zeros(2)})
    with pytest.raises(WorkbenchError, match="not a candidate pool"):
        P.load_pool(tmp_project, "plain")


def test_an_attack_that_never_succeeds_gives_a_clear_error(ctx, digits_model, digits):
    split = digits.split("test")
    right = np.flatnonzero(R.predictions(ctx, digits_model, split.numpy()) == split.labels)
    with pytest.raises(WorkbenchError, match="pool is empty"):
        P.build_pool(ctx, digits_model, split, 1e-6, indices=right)


def test_pools_scored_differently_are_not_merged(test_pool):
    other = test_pool.subset(np.arange(5))
    other.params = {**other.params, "eps": 0.3}
    with pytest.raises(WorkbenchError, match="different eps"):
        P.merge_pools(test_pool, other)
    merged = P.merge_pools(test_pool, test_pool.subset(np.arange(5)))
    assert len(merged) == len(test_pool) + 5


def test_holdout_groups_by_source_and_keeps_the_attack_mix(test_pool):
    selectable, held = P.holdout(test_pool, 0.25, seed=1)
    assert len(selectable) + len(held) == len(test_pool)
    assert not set(test_pool.source_index[selectable]) & set(test_pool.source_index[held])
    sources = np.unique(test_pool.source_index)
    held_sources = np.unique(test_pool.source_index[held])
    assert abs(len(held_sources) / len(sources) - 0.25) < 0.05
    share = lambda idx: np.mean(test_pool.attack[idx] == "pgd")  # noqa: E731
    assert abs(share(held) - share(selectable)) < 0.1
    again, _ = P.holdout(test_pool, 0.25, seed=1)
    np.testing.assert_array_equal(again, selectable)


# --- reports -----------------------------------------------------------------------------------------

def test_report_of_the_original_model(ctx, digits_model, digits, test_pool):
    split = digits.split("test")
    report = R.robustness_report(ctx, digits_model, split, EPS, test_pool, subset=100, seed=5)
    assert report["static_ae_accuracy"] == 0.0
    assert set(report["static_ae_by_attack"]) == {"fgsm", "pgd"}
    clean = (R.predictions(ctx, digits_model, split.numpy()) == split.labels).mean()
    assert report["clean_accuracy"] == pytest.approx(clean)
    assert report["adaptive_inputs"] == 100
    # The adaptive number re-attacks the subset with PGD from the same seeded starts: recompute it.
    idx = R.report_subset(len(split), 100, 5)
    x0, y = split.tensor(idx), torch.from_numpy(split.labels[idx])
    adv = A.pgd(digits_model.module, x0, y, EPS, start=A.random_start(x0, EPS, torch.Generator().manual_seed(5)))
    with torch.no_grad():
        robust = (digits_model.module(adv).argmax(1) == y) & (digits_model.module(x0).argmax(1) == y)
    assert report["adaptive_robust_accuracy"] == pytest.approx(float(robust.float().mean()))
    assert report["adaptive_robust_accuracy"] <= report["clean_accuracy"] + 0.1
    assert report["fol_mean"] >= 0 and report["fol_median"] >= 0


def test_report_subset_is_fixed_by_its_seed():
    np.testing.assert_array_equal(R.report_subset(5000, 100, 1), R.report_subset(5000, 100, 1))
    assert len(set(R.report_subset(5000, 100, 1))) == 100
    np.testing.assert_array_equal(R.report_subset(50, 100, 1), np.arange(50))


def test_report_refuses_a_nan_model(ctx, digits, test_pool):
    nan_model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10), torch.nn.Dropout(1.0)).eval()
    with torch.no_grad():
        nan_model[1].weight.fill_(float("nan"))
    with pytest.raises(WorkbenchError, match="NaN"):
        R.robustness_report(ctx, nan_model, digits.split("test"), EPS, test_pool)


# --- fine-tuning -------------------------------------------------------------------------------------

def test_fine_tuning_keeps_the_best_checkpoint_and_leaves_the_original(ctx, digits_model, digits, test_pool):
    before = digits_model.fingerprint()
    selectable, held = P.holdout(test_pool, 0.3, seed=0)
    part, check = test_pool.subset(selectable), test_pool.subset(held)
    rows = []
    ctx = JobContext("cpu", on_partial=rows.append)
    result = fine_tune(ctx, digits_model, digits.split("train"), part.images, part.labels, epochs=3, seed=0,
                       checkpoint_set=(check.images, check.labels), checkpoint_mode="clean")
    assert digits_model.fingerprint() == before
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    accs = [r["checkpoint_accuracy"] for r in result.history]
    assert result.best_epoch == int(np.argmax(accs)) + 1  # ties go to the earlier epoch
    kept = (R.predictions(ctx, result.model, check.images) == check.labels).mean()
    assert kept == pytest.approx(max(accs))
    assert result.params["added_tests"] == len(part) and not result.params["optimistic"]
    # Learning the adversarials of the pool makes the model right on part of the held-out ones.
    assert max(accs) > 0.2


def test_paper_mode_is_labelled_optimistic(ctx, digits_model, digits, test_pool):
    result = fine_tune(ctx, digits_model, digits.split("train"), epochs=1,
                       checkpoint_set=(test_pool.images, test_pool.labels), checkpoint_mode="paper")
    assert result.params["optimistic"] and "test data" in result.params["checkpoint_meaning"]


def test_fine_tuning_bad_settings(ctx, digits_model, digits, test_pool):
    train = digits.split("train")
    with pytest.raises(WorkbenchError, match="checkpoint set"):
        fine_tune(ctx, digits_model, train, checkpoint_mode="clean")
    with pytest.raises(WorkbenchError, match="Unknown retraining preset"):
        fine_tune(ctx, digits_model, train, preset="robot-imagenet", checkpoint_mode="last")
    with pytest.raises(WorkbenchError, match="labels"):
        fine_tune(ctx, digits_model, train, test_pool.images, test_pool.labels[:3], checkpoint_mode="last")
    nan_images = test_pool.images[:10].copy()
    nan_images[:] = np.nan
    with pytest.raises(WorkbenchError, match="diverged"):
        fine_tune(ctx, digits_model, train, nan_images, test_pool.labels[:10], checkpoint_mode="last")


def test_fine_tuning_is_reproducible_from_its_seed(ctx, digits_model, digits):
    a = fine_tune(ctx, digits_model, digits.split("train"), epochs=1, seed=4, checkpoint_mode="last")
    b = fine_tune(ctx, digits_model, digits.split("train"), epochs=1, seed=4, checkpoint_mode="last")
    assert a.model.fingerprint() == b.model.fingerprint()


def test_augmentation_moves_images_within_the_preset_ranges():
    x = torch.zeros(64, 1, 16, 16)
    x[:, :, 6:10, 6:10] = 1.0
    out = augment_batch(x, torch.Generator().manual_seed(0))
    assert out.shape == x.shape and (out >= 0).all() and (out <= 1 + 1e-6).all()
    # Shifts of up to 10 % (1.6 px here) move the blob's centre by at most about 2 px.
    grid = torch.arange(16.0)
    mass = out.sum((2, 3))[:, 0]
    cy = (out[:, 0].sum(2) * grid).sum(1) / mass
    cx = (out[:, 0].sum(1) * grid).sum(1) / mass
    assert (cy - 7.5).abs().max() < 2.5 and (cx - 7.5).abs().max() < 2.5
    assert (cy - 7.5).abs().max() > 0.3  # and they do move
    assert torch.equal(out, augment_batch(x, torch.Generator().manual_seed(0)))


def test_job_stages_fill_their_slice_of_the_bar():
    seen = []
    ctx = JobContext("cpu", on_progress=lambda done, total, msg: seen.append((done / total, msg)))
    ctx.stage(1, 4, "second").progress(5, 10, "half")
    assert seen == [(0.375, "second: half")]


# --- the convergence loop ----------------------------------------------------------------------------

def test_convergence_rounds_raise_static_accuracy(digits_model, digits, test_pool):
    rows = []
    ctx = JobContext("cpu", on_partial=rows.append)
    result = convergence_loop(ctx, digits_model, digits, EPS, test_pool, rounds=2, requirement=0.99, epochs=2,
                              report_subset=100)
    assert [r["round"] for r in rows] == [0, 1, 2] and result.rounds == rows
    assert rows[0]["static_ae_accuracy"] == 0.0
    # Static accuracy can fall back in a round (new adversarials displace old ones), so test the best round;
    # the loss surface flattens round after round, which the FOL curve shows.
    assert max(r["static_ae_accuracy"] for r in rows) > 0.2
    assert rows[-1]["fol_mean"] < rows[0]["fol_mean"]
    assert all(r["pool_size"] >= r["selected"] > 0 for r in rows[:-1])
    assert result.stop_reason in ("rounds used up", "requirement met")
    assert result.met == (rows[-1]["static_ae_accuracy"] > 0.99)


def test_convergence_stops_when_the_requirement_is_met(digits_model, digits, test_pool):
    result = convergence_loop(JobContext("cpu"), digits_model, digits, EPS, test_pool, rounds=5, requirement=0.15,
                              epochs=2, report_subset=50)
    assert result.met and result.stop_reason == "requirement met"
    assert len(result.rounds) < 6


def test_plateau_rule():
    assert not plateaued([10.0, 9.0])
    assert plateaued([10.0, 9.9, 9.8])
    assert not plateaued([10.0, 8.0, 7.9])


def test_runs_round_trip_through_a_project(tmp_project):
    rows = [{"round": 0, "static_ae_accuracy": 0.0, "static_ae_by_attack": {"fgsm": 0.0}, "strategy": "be-st"},
            {"round": 1, "static_ae_accuracy": 0.5, "static_ae_by_attack": {"fgsm": 0.4}, "strategy": "be-st"}]
    save_run(tmp_project, "conv", "convergence", rows, {"rounds": 1})
    back = load_run(tmp_project, "conv")
    assert back["rows"] == rows and back["what"] == "convergence" and back["params"] == {"rounds": 1}
    art = tmp_project.load_artifact("conv")
    np.testing.assert_array_equal(art["static_ae_accuracy"], [0.0, 0.5])
    with pytest.raises(WorkbenchError, match="no rows"):
        save_run(tmp_project, "empty", "convergence", [], {})


# --- the RobOT protocol, reduced ---------------------------------------------------------------------

def test_reduced_robot_experiment(digits_model, digits):
    """Two strategies × two budgets × two seeds on digits: every run retrains from the original weights."""
    from workbench.core.robustness.experiment import robot_experiment

    before = digits_model.fingerprint()
    partial = []
    result = robot_experiment(JobContext("cpu", on_partial=partial.append), digits_model, digits, EPS,
                              strategies=("be-st", "random"), budgets=("5%", "20%"), seeds=(0, 1), epochs=2,
                              report_subset=100)
    assert digits_model.fingerprint() == before
    assert "setup" in partial[0] and partial[1:] == result.rows
    setup = result.setup
    assert setup["baseline"]["static_ae_accuracy"] == 0.0
    assert setup["heldout"] > 0 and setup["selectable"] + setup["heldout"] == setup["pool"]["candidates"]
    assert [(r["strategy"], r["budget"], r["seed"]) for r in result.rows] == [
        (s, b, seed) for b in ("5%", "20%") for s in ("be-st", "random") for seed in (0, 1)]
    for row in result.rows:
        assert row["selected"] == int(np.floor(float(row["budget"][:-1]) / 100 * setup["selectable"] + 1e-9))
        assert row["checkpoint_mode"] == "clean" and not row["optimistic"]
        assert 1 <= row["best_epoch"] <= 2
        assert row["static_ae_accuracy"] > 0.0  # learning pool adversarials carries over to fp_test
    table = result.table("static_ae_accuracy")
    assert set(table) == {"be-st", "random"} and all(n == 2 for by in table.values() for _, _, n in by.values())
    # More selected tests help on average (the paper's "robustness rises with the budget").
    mean = lambda b: np.mean([r["static_ae_accuracy"] for r in result.rows if r["budget"] == b])  # noqa: E731
    assert mean("20%") > mean("5%")


def test_a_grid_keeps_the_runs_of_an_earlier_comparison_with_its_protocol(digits_model, digits):
    """Adding a strategy runs only its runs; another protocol (epochs, checkpointing, pool) reuses none."""
    import json
    from dataclasses import replace

    from workbench.core.robustness.experiment import missing_runs, prepare, reusable_rows, robot_experiment

    ctx = JobContext("cpu")
    setup = prepare(ctx, digits_model, digits, EPS, pool_inputs=300, report_subset=50)
    first = robot_experiment(ctx, digits_model, digits, EPS, strategies=("random",), budgets=("10%",), seeds=(0,),
                             epochs=1, setup=setup)
    stored = json.loads(json.dumps({"rows": first.rows, "params": first.params, "setup": first.setup}))
    done = reusable_rows(stored, setup, epochs=1)
    assert done == stored["rows"] and missing_runs(done, ("random", "be-st"), ("10%",), (0,)) == 1
    assert reusable_rows(stored, setup, epochs=2) == []
    assert reusable_rows(stored, replace(setup, checkpoint_mode="paper"), epochs=1) == []
    other_pool = prepare(ctx, digits_model, digits, EPS, pool_inputs=200, report_subset=50)
    assert reusable_rows(stored, other_pool, epochs=1) == []
    partial = []
    second = robot_experiment(JobContext("cpu", on_partial=partial.append), digits_model, digits, EPS,
                              strategies=("random", "be-st"), budgets=("10%",), seeds=(0,), epochs=1, setup=setup,
                              done=done)
    assert [r["strategy"] for r in partial] == ["be-st"]  # the random run was not run again
    assert second.rows[0] == done[0] and [r["strategy"] for r in second.rows] == ["random", "be-st"]
    assert second.params["strategies"] == ["random", "be-st"]


def test_experiment_refuses_bad_settings_before_attacking(digits_model, digits):
    from workbench.core.robustness.experiment import robot_experiment

    calls = []
    ctx = JobContext("cpu", on_progress=lambda *a: calls.append(a))
    with pytest.raises(WorkbenchError, match="percentage"):
        robot_experiment(ctx, digits_model, digits, EPS, budgets=("5 percent",))
    with pytest.raises(WorkbenchError, match="outside the data range"):
        robot_experiment(ctx, digits_model, digits, 1.5)
    with pytest.raises(WorkbenchError, match="Checkpoint mode"):
        robot_experiment(ctx, digits_model, digits, EPS, checkpoint_mode="last")
    assert calls == []


def test_coverage_greedy_baseline_uses_the_coverage_reports_neurons(digits_model, digits):
    """The coverage-greedy pick covers at least as many NC neurons as a random pick of the same size."""
    from workbench.core.robustness.experiment import coverage_items, prepare, run_strategy
    from workbench.core.robustness.selection import select

    ctx = JobContext("cpu")
    setup = prepare(ctx, digits_model, digits, EPS, pool_inputs=300, report_subset=50)
    row, _ = run_strategy(ctx, setup, "coverage-greedy", 10, epochs=1)
    covers = setup.covers
    assert covers.shape[0] == len(setup.selectable) and covers.dtype == bool
    np.testing.assert_array_equal(covers, coverage_items(ctx, digits_model, setup.pool.subset(setup.selectable).images))
    picked = row["selection_params"]
    assert row["selected"] == 10 and picked["strategy"] == "coverage-greedy"
    greedy = select("coverage-greedy", {"covers": covers}, 10).indices
    random = select("random", {"covers": covers}, 10, seed=1).indices
    assert covers[greedy].any(0).sum() >= covers[random].any(0).sum()
