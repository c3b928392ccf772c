"""The Robustness view's jobs: small compositions of `core.robustness` calls, with no Qt in them.

Like `tasks.py`, they run on a worker thread and never write to the project: what they store comes
back as saves of a `ProjectSnapshot` for the session to write on the UI thread. Pools made before
against the same weights, ε, inputs and seed are read back instead of attacked again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench.core.data import Dataset
from workbench.core.jobs import JobContext
from workbench.core.model_io import LoadedModel
from workbench.gui.tasks import ProjectSnapshot, StoredRun
from workbench.gui.views.robustness_report import latest_run


@dataclass
class RobustnessBase:
    """What the view shows before any retraining: the shared setup and the clean FOL∞ of test inputs."""

    setup: object  # core.robustness.experiment.RobotSetup
    clean_fol: np.ndarray  # FOL∞ at x' = x0 (= ε‖∇J‖₁) on the report subset of the test split
    model: str
    dataset: str
    fingerprint: str
    reused: list = field(default_factory=list)  # names of stored pools read back
    stored_runs: dict = field(default_factory=dict)  # "experiment" / "convergence" → the newest stored run


def _pool_name(kind: str, model: str, eps: float, inputs: int | None, seed: int) -> str:
    size = "all" if inputs is None else f"{inputs}"
    return f"{kind} {model} eps={eps:g} inputs={size} seed={seed}"


def _stored_pool(snapshot: ProjectSnapshot, **match):
    from workbench.core.errors import WorkbenchError
    from workbench.core.robustness.pool import load_pool

    name = snapshot.find_artifact("testset", role="candidate-pool", **match)
    if name is None:
        return None, None
    try:
        return load_pool(snapshot, name), name
    except WorkbenchError:  # damaged or foreign: make it again
        return None, None


def prepare_robustness(ctx: JobContext, model: LoadedModel, dataset: Dataset, eps: float, pool_inputs: int | None,
                       seed: int, snapshot: ProjectSnapshot, report_subset: int = 1000) -> StoredRun:
    """The training-set pool, `fp_test`, the baseline report and the clean FOL∞ (experiment `prepare`)."""
    from workbench.core.robustness.experiment import prepare
    from workbench.core.robustness.pool import save_pool
    from workbench.core.robustness.reports import report_subset as subset_of
    from workbench.core.robustness.scores import score_inputs

    fingerprint = model.fingerprint()
    common = {"model_fingerprint": fingerprint, "eps": eps, "seed_of_run": seed}
    pool, pool_name = _stored_pool(snapshot, kind_of_pool="train", pool_inputs=pool_inputs, **common)
    fp_test, fp_name = _stored_pool(snapshot, kind_of_pool="fp_test", **common)
    setup = prepare(ctx.stage(0, 2, "pools and baseline"), model, dataset, eps, seed=seed, pool=pool,
                    fp_test=fp_test, pool_inputs=pool_inputs, report_subset=report_subset)
    if pool is None:
        pool_name = _pool_name("pool", model.name, eps, pool_inputs, seed)
        save_pool(snapshot, pool_name, setup.pool, kind_of_pool="train", pool_inputs=pool_inputs,
                  model=model.name, dataset=dataset.name, **common)
    if fp_test is None:
        fp_name = _pool_name("fp_test", model.name, eps, None, seed)
        save_pool(snapshot, fp_name, setup.fp_test, kind_of_pool="fp_test", model=model.name,
                  dataset=dataset.name, **common)
    test = dataset.split("test")
    index = subset_of(len(test), report_subset, seed)
    x0 = test.numpy(index)
    clean = score_inputs(ctx.stage(1, 2, "clean FOL"), model, x0, test.labels[index], x0=x0, eps=eps)
    stored_runs = {what: latest_run(snapshot, what, fingerprint, eps) for what in ("experiment", "convergence")}
    base = RobustnessBase(setup, clean["fol_linf"], model.name, dataset.name, fingerprint,
                          reused=[n for n, stored in ((pool_name, pool), (fp_name, fp_test)) if stored is not None],
                          stored_runs=stored_runs)
    return StoredRun(base, snapshot.saves)


def select_candidates(ctx: JobContext, base: RobustnessBase, strategy: str, budget, seed: int):
    """A strategy's pick from the selectable part of the pool: (Selection, the picked sub-pool)."""
    from workbench.core.robustness.experiment import selection_scores
    from workbench.core.robustness.selection import select

    ctx.progress(0, 1, f"selecting with {strategy}")
    setup = base.setup
    candidates = setup.pool.subset(setup.selectable)
    scores = selection_scores(candidates)
    if strategy == "coverage-greedy":  # its neurons are computed once per set-up and kept there
        from workbench.core.robustness.experiment import coverage_items

        if setup.covers is None:
            setup.covers = coverage_items(ctx.quiet(), setup.model, candidates.images)
        scores["covers"] = setup.covers
    chosen = select(strategy, scores, budget, seed=seed)
    ctx.progress(1, 1, "selected")
    return chosen, candidates.subset(chosen.indices)


def retrain_strategies(ctx: JobContext, base: RobustnessBase, strategies: list[str], budgets: list, seeds: list[int],
                       epochs: int | None, snapshot: ProjectSnapshot, name: str) -> StoredRun:
    """The RobOT grid over the prepared setup; one partial row per finished run; the run is stored."""
    from workbench.core.robustness.experiment import robot_experiment
    from workbench.core.robustness.runs import save_run

    result = robot_experiment(ctx, base.setup.model, base.setup.dataset, base.setup.eps, strategies=strategies,
                              budgets=budgets, seeds=seeds, epochs=epochs, setup=base.setup)
    save_run(snapshot, name, "experiment", result.rows, result.params, model=base.model, dataset=base.dataset,
             model_fingerprint=base.fingerprint, setup=result.setup)
    return StoredRun(result, snapshot.saves)


def run_convergence(ctx: JobContext, base: RobustnessBase, rounds: int, requirement: float, epochs: int,
                    pool_inputs: int | None, snapshot: ProjectSnapshot, name: str) -> StoredRun:
    """The §9 loop from the prepared model and `fp_test`; one partial row per round; the run is stored."""
    from workbench.core.robustness.convergence import convergence_loop
    from workbench.core.robustness.runs import save_run

    setup = base.setup
    result = convergence_loop(ctx, setup.model, setup.dataset, setup.eps, setup.fp_test, rounds=rounds,
                              requirement=requirement, epochs=epochs, pool_inputs=pool_inputs,
                              seed=setup.seed, report_subset=setup.report_subset)
    save_run(snapshot, name, "convergence", result.rounds, result.params, model=base.model, dataset=base.dataset,
             model_fingerprint=base.fingerprint, met=result.met, stop_reason=result.stop_reason)
    return StoredRun(result, snapshot.saves)


@dataclass
class FuzzRun:
    """The fuzzer's tests, and the set-up whose pool they joined (None when they were not joined)."""

    tests: object  # core.robustness.fuzzing.FuzzResult
    joined: RobustnessBase | None = None


def join_fuzzer_tests(ctx: JobContext, base: RobustnessBase, tests, seeds: np.ndarray) -> RobustnessBase:
    """A copy of `base` whose pool also holds the fuzzer's tests, scored like the attacks' candidates (§5.3).

    The tests become selectable (none are held out: checkpointing keeps the held-out part of the
    attacks' pool). The original set-up is left as it is, so jobs still using it are not disturbed.
    """
    from dataclasses import replace

    from workbench.core.robustness.fuzzing import ATTACK_NAME
    from workbench.core.robustness.pool import CandidatePool, merge_pools, score_candidates

    setup = base.setup
    loss_mode = setup.pool.params.get("loss_mode", "logits")
    scores, probs = score_candidates(ctx, setup.model, tests.images, tests.labels, seeds, setup.eps, loss_mode)
    fuzzed = CandidatePool(tests.images, tests.labels, tests.seed_index, np.full(len(tests), ATTACK_NAME), scores,
                           probs, {"eps": setup.eps, "loss_mode": loss_mode, "what": "fuzzer tests"})
    pool = merge_pools(setup.pool, fuzzed)
    selectable = np.concatenate([setup.selectable, np.arange(len(setup.pool), len(pool))])
    return replace(base, setup=replace(setup, pool=pool, selectable=selectable, covers=None))


def run_fuzzer(ctx: JobContext, base: RobustnessBase, model: LoadedModel, dataset: Dataset, n_seeds: int,
               time_budget_s: float, project_linf: bool, join: bool, seed: int, snapshot: ProjectSnapshot,
               name: str) -> StoredRun:
    """FOL-guided fuzzing from training seeds; the tests are stored as a project test set and, with
    `join`, added to a copy of the set-up's pool."""
    from workbench.core.robustness.fuzzing import fuzz

    train = dataset.split("train")
    tests = fuzz(ctx.stage(0, 2, "fuzzing"), model, train, eps=base.setup.eps, n_seeds=n_seeds, seed=seed,
                 time_budget_s=time_budget_s, project_linf=project_linf)
    joined = None
    if len(tests):
        snapshot.save_artifact("testset", name, tests.to_arrays(), **{
            **tests.params, "role": "fuzz-tests", "model": model.name, "dataset": dataset.name,
            "model_fingerprint": model.fingerprint()})
        if join:
            joined = join_fuzzer_tests(ctx.stage(1, 2, "scoring the tests"), base, tests, train.numpy(tests.seed_index))
    return StoredRun(FuzzRun(tests, joined), snapshot.saves)
