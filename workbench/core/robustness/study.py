"""A robustness study of one model, as the Robustness view runs it: the shared set-up (pools,
`fp_test`, baseline), selections, the retraining grid, the convergence loop and the fuzzer.

Each job takes the project it stores to as `project` (a `StagedProject` when run through
`run_staged`, so what it saves is committed only when it finishes). Pools made before against the
same weights, ε, inputs and seed are read back instead of attacked again, and the newest stored
runs come back with the set-up, so reopening a project shows what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from workbench.core.data.dataset import Dataset
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.models.model_io import LoadedModel
from workbench.core.project.store import reading
from workbench.core.robustness.runs import latest_run


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
    step_rate: float = 0.0  # images per second of a fine-tuning step on this machine (for estimates)
    pool_key: str = ""  # the stored pool's name for this model, ε, inputs and seed (fuzzer tests that join it say so)
    fuzz_tests: object = None  # the newest fuzzer tests that joined the pool (core.robustness.fuzzing.FuzzResult)


def pool_name(kind: str, model: str, eps: float, inputs: int | None, seed: int) -> str:
    size = "all" if inputs is None else f"{inputs}"
    return f"{kind} {model} eps={eps:g} inputs={size} seed={seed}"


def stored_pool(ctx: JobContext, project, **match):
    """(pool, name) of a stored pool whose provenance holds `match`; (None, None) when there is none,
    or it is damaged (said as a notice: the pool is built again)."""
    from workbench.core.robustness.pool import load_pool

    if project is None:
        return None, None
    name = project.find_artifact("testset", role="candidate-pool", **match)
    if name is None:
        return None, None
    try:
        return load_pool(project, name), name
    except WorkbenchError as exc:  # damaged or foreign: make it again
        ctx.notice(f"{exc.message} The pool is built again.")
        return None, None


def pools_stored(project, fingerprint: str, eps: float, pool_inputs: int | None, seed: int = 0) -> bool:
    """Whether the project holds both pools `prepare_robustness` would build (so it only reads them)."""
    if project is None:
        return False
    common = {"role": "candidate-pool", "model_fingerprint": fingerprint, "eps": eps, "seed_of_run": seed}
    return (project.find_artifact("testset", kind_of_pool="train", pool_inputs=pool_inputs, **common) is not None
            and project.find_artifact("testset", kind_of_pool="fp_test", **common) is not None)


# An attack's input gradient (with its sign step, projection and clamping) costs about this many
# training steps: measured as 38.5 s for a 27.6 s estimate at 1.0 (LeNet-5, Fashion-MNIST, 2 cores).
ATTACK_STEP_COST = 1.4


def setup_seconds(ctx: JobContext, model: LoadedModel, dataset: Dataset, pool_inputs: int | None,
                  report_subset: int = 1000) -> float:
    """About how long `prepare_robustness` takes when it builds both pools: the input gradients it
    needs (the attacks and FOL of the training pool and of `fp_test`, the baseline's PGD-10 and the
    clean FOL on the report subset), at this machine's measured rate of training steps."""
    from workbench.core.robustness.attacks import PGD_STEPS

    rate = measure_step_rate(ctx, model, dataset.image_shape) / ATTACK_STEP_COST
    train, test = len(dataset.split("train")), len(dataset.split("test"))
    attacked = train if pool_inputs is None else min(pool_inputs, train)
    gradients = (attacked + test) * (3 + PGD_STEPS) + min(report_subset, test) * (PGD_STEPS + 2) + test / 3
    return gradients / rate


def prepare_robustness(ctx: JobContext, model: LoadedModel, dataset: Dataset, eps: float, pool_inputs: int | None,
                       seed: int, report_subset: int = 1000, project=None) -> RobustnessBase:
    """The training-set pool, `fp_test`, the baseline report and the clean FOL∞ (experiment `prepare`)."""
    from workbench.core.robustness.experiment import prepare
    from workbench.core.robustness.pool import save_pool
    from workbench.core.robustness.reports import report_subset as subset_of
    from workbench.core.robustness.scores import score_inputs

    fingerprint = model.fingerprint()
    common = {"model_fingerprint": fingerprint, "eps": eps, "seed_of_run": seed}
    pool, pool_artifact = stored_pool(ctx, project, kind_of_pool="train", pool_inputs=pool_inputs, **common)
    fp_test, fp_artifact = stored_pool(ctx, project, kind_of_pool="fp_test", **common)
    setup = prepare(ctx.stage(0, 2, "pools and baseline"), model, dataset, eps, seed=seed, pool=pool,
                    fp_test=fp_test, pool_inputs=pool_inputs, report_subset=report_subset)
    if pool is None and project is not None:
        pool_artifact = pool_name("pool", model.name, eps, pool_inputs, seed)
        save_pool(project, pool_artifact, setup.pool, kind_of_pool="train", pool_inputs=pool_inputs,
                  model=model.name, dataset=dataset.name, **common)
    if fp_test is None and project is not None:
        fp_artifact = pool_name("fp_test", model.name, eps, None, seed)
        save_pool(project, fp_artifact, setup.fp_test, kind_of_pool="fp_test", model=model.name,
                  dataset=dataset.name, **common)
    test = dataset.split("test")
    index = subset_of(len(test), report_subset, seed)
    x0 = test.numpy(index)
    clean = score_inputs(ctx.stage(1, 2, "clean FOL"), model, x0, test.labels[index], x0=x0, eps=eps)
    stored_runs = {what: latest_run(project, what, fingerprint, eps) for what in ("experiment", "convergence")} \
        if project is not None else {}
    rate = measure_step_rate(ctx.quiet(), model, dataset.image_shape)
    base = RobustnessBase(setup, clean["fol_linf"], model.name, dataset.name, fingerprint, step_rate=rate,
                          reused=[n for n, stored in ((pool_artifact, pool), (fp_artifact, fp_test)) if stored is not None],
                          stored_runs=stored_runs, pool_key=pool_name("pool", model.name, eps, pool_inputs, seed))
    return rejoin_fuzzer_tests(ctx.quiet(), base, dataset, project)


def rejoin_fuzzer_tests(ctx: JobContext, base: RobustnessBase, dataset: Dataset, project) -> RobustnessBase:
    """`base` with the stored fuzzer tests that joined its pool joined again, oldest first: what the
    view showed before the project was closed, it shows after."""
    from workbench.core.robustness.fuzzing import FuzzResult

    if project is None:
        return base
    joined = [(name, entry) for name, entry in project.artifacts("testset").items()
              if entry.get("provenance", {}).get("role") == "fuzz-tests"
              and entry["provenance"].get("joined_to") == base.pool_key
              and entry["provenance"].get("model_fingerprint") == base.fingerprint]
    train = dataset.split("train")
    for name, entry in sorted(joined, key=lambda item: str(item[1]["provenance"].get("created", ""))):
        try:
            stored = project.load_artifact(name)
            with reading(stored):
                tests = FuzzResult.from_arrays({key: stored[key] for key in stored.names}, entry["provenance"])
            if len(tests) and not 0 <= tests.seed_index.min() <= tests.seed_index.max() < len(train):
                raise stored.wrong_contents(f"its seeds are not among the {len(train):,} training images")
        except WorkbenchError as exc:
            ctx.notice(f"{exc.message} Its tests are left out of the pool.")
            continue
        if len(tests):
            base = replace(join_fuzzer_tests(ctx, base, tests, train.numpy(tests.seed_index)), fuzz_tests=tests)
    return base


def measure_step_rate(ctx: JobContext, model: LoadedModel, image_shape, batch_size: int = 64, steps: int = 3) -> float:
    """Images per second of a training step (forward, backward, Adam update) on a copy of the model."""
    import time

    import torch

    from workbench.core.models.hooks import private_copy

    module = private_copy(model.module).to(ctx.device).train()
    optimiser = torch.optim.Adam(module.parameters(), lr=1e-4)
    x = torch.rand((batch_size, *image_shape), device=ctx.device)
    y = torch.zeros(batch_size, dtype=torch.long, device=ctx.device)
    started = None
    for step in range(steps + 1):  # the first step warms up and is not timed
        if step == 1:
            started = time.perf_counter()
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(module(x), y).backward()
        optimiser.step()
    return batch_size * steps / max(time.perf_counter() - started, 1e-9)


def retraining_seconds(base: RobustnessBase, strategies: list[str], budgets: list, seeds: list[int],
                       epochs: int, done: list[dict] = ()) -> float | None:
    """About how long the retraining grid takes: each run fine-tunes on the training split plus its
    selection for `epochs` epochs, then attacks the report subset with PGD-10 and scores fp_test and
    the test split; None when the step rate is unknown. Runs that `done` holds take no time."""
    from workbench.core.robustness.experiment import run_key
    from workbench.core.robustness.selection import resolve_budget

    if base.step_rate <= 0:
        return None
    setup = base.setup
    train = len(setup.dataset.split("train"))
    test = len(setup.dataset.split("test"))
    selectable = len(setup.selectable)
    have = {run_key(row) for row in done}
    images = 0.0
    for budget in budgets:
        added = resolve_budget(budget, selectable)
        per_run = epochs * (train + added) + 11 * setup.report_subset + (len(setup.fp_test) + test) / 3
        images += per_run * sum((s, str(budget), int(seed)) not in have for s in strategies for seed in seeds)
    return images / base.step_rate


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
                       epochs: int | None, name: str, project=None, done: list[dict] = ()):
    """The RobOT grid over the prepared setup; one partial row per finished run; the run is stored.
    Runs that `done` holds (rows `reusable_rows` accepted) are kept, not run again."""
    from workbench.core.robustness.experiment import robot_experiment
    from workbench.core.robustness.runs import save_run

    result = robot_experiment(ctx, base.setup.model, base.setup.dataset, base.setup.eps, strategies=strategies,
                              budgets=budgets, seeds=seeds, epochs=epochs, setup=base.setup, done=done)
    if project is not None:
        save_run(project, name, "experiment", result.rows, result.params, model=base.model, dataset=base.dataset,
                 model_fingerprint=base.fingerprint, setup=result.setup)
    return result


def run_convergence(ctx: JobContext, base: RobustnessBase, rounds: int, requirement: float, epochs: int,
                    pool_inputs: int | None, name: str, project=None):
    """The convergence loop (docs/methods/fuzzing-and-retraining.md#convergence-loop) from the prepared
    model and `fp_test`; one partial row per round; the run is stored."""
    from workbench.core.robustness.convergence import convergence_loop
    from workbench.core.robustness.runs import save_run

    setup = base.setup
    result = convergence_loop(ctx, setup.model, setup.dataset, setup.eps, setup.fp_test, rounds=rounds,
                              requirement=requirement, epochs=epochs, pool_inputs=pool_inputs,
                              seed=setup.seed, report_subset=setup.report_subset)
    if project is not None:
        save_run(project, name, "convergence", result.rounds, result.params, model=base.model, dataset=base.dataset,
                 model_fingerprint=base.fingerprint, met=result.met, stop_reason=result.stop_reason)
    return result


@dataclass
class FuzzRun:
    """The fuzzer's tests, and the set-up whose pool they joined (None when they were not joined)."""

    tests: object  # core.robustness.fuzzing.FuzzResult
    joined: RobustnessBase | None = None


def join_fuzzer_tests(ctx: JobContext, base: RobustnessBase, tests, seeds: np.ndarray) -> RobustnessBase:
    """A copy of `base` whose pool also holds the fuzzer's tests, scored like the attacks' candidates
    (docs/methods/fol-and-selection.md#candidate-pool)."""
    from workbench.core.robustness.pool import fuzzer_candidates

    setup = base.setup
    loss_mode = setup.pool.params.get("loss_mode", "logits")
    return join_pool(base, fuzzer_candidates(ctx, setup.model, tests, seeds, setup.eps, loss_mode))


def join_pool(base: RobustnessBase, candidates) -> RobustnessBase:
    """A copy of `base` whose pool also holds `candidates` (fuzzer tests, a generated set's misbehaviours).

    They become selectable (none are held out: checkpointing keeps the held-out part of the attacks'
    pool). The original set-up is left as it is, so jobs still using it are not disturbed.
    """
    from workbench.core.robustness.pool import merge_pools

    setup = base.setup
    pool = merge_pools(setup.pool, candidates)
    selectable = np.concatenate([setup.selectable, np.arange(len(setup.pool), len(pool))])
    return replace(base, setup=replace(setup, pool=pool, selectable=selectable, covers=None))


def run_fuzzer(ctx: JobContext, base: RobustnessBase, model: LoadedModel, dataset: Dataset, n_seeds: int,
               time_budget_s: float, project_linf: bool, join: bool, seed: int, name: str,
               project=None) -> "FuzzRun":
    """FOL-guided fuzzing from training seeds; the tests are stored as a project test set and, with
    `join`, added to a copy of the set-up's pool."""
    from workbench.core.robustness.fuzzing import fuzz
    from workbench.core.testsets import save_testset

    train = dataset.split("train")
    tests = fuzz(ctx.stage(0, 2, "fuzzing"), model, train, eps=base.setup.eps, n_seeds=n_seeds, seed=seed,
                 time_budget_s=time_budget_s, project_linf=project_linf)
    joined = None
    if len(tests) and project is not None:
        save_testset(project, name, tests.to_arrays(), **{
            **tests.params, "role": "fuzz-tests", "model": model.name, "dataset": dataset.name,
            "model_fingerprint": model.fingerprint(), **({"joined_to": base.pool_key} if join else {})})
    if len(tests):
        if join:
            joined = replace(join_fuzzer_tests(ctx.stage(1, 2, "scoring the tests"), base, tests,
                                               train.numpy(tests.seed_index)), fuzz_tests=tests)
    return FuzzRun(tests, joined)
