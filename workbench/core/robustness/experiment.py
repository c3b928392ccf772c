"""The RobOT protocol: select, retrain, measure robustness.

Method: docs/methods/fuzzing-and-retraining.md#the-robot-experiment.

1. **Setup** (`prepare`): the training-set pool (FGSM ∪ PGD successes against the original model),
   its held-out checkpointing part (clean mode), and `fp_test`, the successes on the test split,
   frozen. The original model's report is the baseline (its static AE accuracy is 0 by construction).
2. **Runs** (`run_strategy`): for each (strategy, budget, seed), select from the selectable part of
   the pool, fine-tune a copy of the *original* model on train ∪ selected, and report.
3. `robot_experiment` runs the grid and hands out one row per run as it finishes; the same seeds
   are used for every strategy so the comparison is paired.

Budgets are % of the selectable pool (or absolute counts); both forms are recorded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.execution.shard_plan import ShardPlan
from workbench.core.execution.sharding import run_plan, sharding
from workbench.core.robustness.attacks import check_eps
from workbench.core.robustness.pool import CandidatePool, build_pool, holdout
from workbench.core.robustness.reports import REPORT_SUBSET, robustness_report
from workbench.core.robustness.retraining import CHECKPOINT_MODES, fine_tune
from workbench.core.robustness.selection import resolve_budget, select
from workbench.core.sampling import seeded_sample

DEFAULT_STRATEGIES = ("be-st", "km-st", "deepgini", "random")


@dataclass
class RobotSetup:
    """What every run of one experiment shares."""

    model: object
    dataset: object
    eps: float
    pool: CandidatePool
    selectable: np.ndarray
    heldout: np.ndarray
    fp_test: CandidatePool
    baseline: dict
    checkpoint_mode: str = "clean"
    report_subset: int = REPORT_SUBSET
    seed: int = 0
    covers: np.ndarray | None = None  # NC items of the selectable candidates, once coverage-greedy needed them

    def checkpoint_set(self):
        if self.checkpoint_mode == "clean":
            part = self.pool.subset(self.heldout)
            return part.images, part.labels
        if self.checkpoint_mode == "paper":
            return self.fp_test.images, self.fp_test.labels
        return None

    def summary(self) -> dict:
        return {"eps": self.eps, "pool": self.pool.summary(), "selectable": int(len(self.selectable)),
                "heldout": int(len(self.heldout)), "fp_test": self.fp_test.summary(),
                "checkpoint_mode": self.checkpoint_mode, "baseline": self.baseline}


def prepare(ctx, model, dataset, eps: float, seed: int = 0, checkpoint_mode: str = "clean",
            holdout_fraction: float = 0.1, pool: CandidatePool | None = None,
            fp_test: CandidatePool | None = None, pool_inputs: int | None = None,
            report_subset: int = REPORT_SUBSET) -> RobotSetup:
    """Build (or take) the pool and `fp_test`, hold out the checkpointing part, report the original.

    `pool_inputs` attacks a seeded subset of that many training images instead of all of them.
    """
    eps = check_eps(eps)
    if checkpoint_mode not in CHECKPOINT_MODES or checkpoint_mode == "last":
        raise WorkbenchError(f"Checkpoint mode {checkpoint_mode!r} is not one of the protocol's.",
                             "Use clean (the default) or paper.")
    train, test = dataset.split("train"), dataset.split("test")
    if pool is None:
        indices = None
        if pool_inputs is not None and pool_inputs < len(train):
            indices = seeded_sample(len(train), pool_inputs, seed)
        pool = build_pool(ctx.stage(0, 3, "training-set pool"), model, train, eps, seed=seed, indices=indices,
                          what="the training set")
    if fp_test is None:
        fp_test = build_pool(ctx.stage(1, 3, "fp_test"), model, test, eps, seed=seed + 100, what="the test set")
    if checkpoint_mode == "clean":
        selectable, held = holdout(pool, holdout_fraction, seed)
    else:
        selectable, held = np.arange(len(pool)), np.zeros(0, dtype=np.int64)
    baseline = robustness_report(ctx.stage(2, 3, "baseline report"), model, test, eps, fp_test,
                                 report_subset, seed)
    return RobotSetup(model, dataset, eps, pool, selectable, held, fp_test, baseline, checkpoint_mode,
                      report_subset, seed)


def selection_scores(pool: CandidatePool) -> dict:
    """The score vectors `selection.select` reads, from a pool."""
    return {**pool.scores, "probs": pool.probs}


COVERAGE_THRESHOLD = 0.75  # NC's threshold in the coverage reports (docs/methods/classic-criteria.md#nc)


def coverage_items(ctx, model, images) -> np.ndarray:
    """Which NC neurons each candidate covers, for the coverage-greedy baseline.

    The neurons are those the coverage reports' default preset measures (every Conv/Linear and
    pooling layer, conv channels as their means, after the activation), with NC's threshold 0.75.
    """
    from workbench.core.coverage.measure import preset_layers
    from workbench.core.models.layers import layer_catalogue
    from workbench.core.robustness.scores import torch_module
    from workbench.core.robustness.selection import neuron_coverage_items

    module = torch_module(model)
    layers, point, _ = preset_layers(layer_catalogue(module, tuple(images.shape[1:])), "deepimportance")
    return neuron_coverage_items(ctx, model, layers, images, threshold=COVERAGE_THRESHOLD, point=point)


def run_strategy(ctx, setup: RobotSetup, strategy: str, budget, seed: int = 0, preset: str = "robot-mnist",
                 epochs: int | None = None, extra_scores: dict | None = None) -> tuple[dict, object]:
    """Select with one strategy and budget, fine-tune the original model, report: (row, retrained model).

    The coverage-greedy baseline gets its coverage items from `coverage_items` (computed once per
    setup and kept) unless `extra_scores` brings its own `covers`.
    """
    started = time.monotonic()
    candidates = setup.pool.subset(setup.selectable)
    scores = {**selection_scores(candidates), **(extra_scores or {})}
    if strategy == "coverage-greedy" and "covers" not in scores:
        if setup.covers is None:
            setup.covers = coverage_items(ctx.quiet(), setup.model, candidates.images)
        scores["covers"] = setup.covers
    chosen = select(strategy, scores, budget, seed=seed)
    picked = candidates.subset(chosen.indices)
    tuned = fine_tune(ctx.stage(0, 2, f"{strategy} {budget}: fine-tuning"), setup.model,
                      setup.dataset.split("train"), picked.images, picked.labels, preset=preset, seed=seed,
                      checkpoint_set=setup.checkpoint_set(), checkpoint_mode=setup.checkpoint_mode, epochs=epochs)
    report = robustness_report(ctx.stage(1, 2, f"{strategy} {budget}: report"), tuned.model,
                               setup.dataset.split("test"), setup.eps, setup.fp_test, setup.report_subset,
                               setup.seed)
    n = len(chosen.indices)
    row = {"strategy": strategy, "budget": str(budget), "selected": n,
           "budget_percent": 100.0 * n / len(candidates), "seed": int(seed),
           "selected_fol_mean": float(np.mean(picked.scores["fol_linf"])) if "fol_linf" in picked.scores else None,
           **report, "best_epoch": tuned.best_epoch, "checkpoint_mode": setup.checkpoint_mode,
           "optimistic": setup.checkpoint_mode == "paper", "seconds": time.monotonic() - started,
           "selection_params": chosen.params}
    return row, tuned.model


@dataclass
class ExperimentResult:
    rows: list[dict]
    setup: dict
    params: dict = field(default_factory=dict)

    def table(self, metric: str = "static_ae_accuracy") -> dict:
        """{strategy: {budget: (mean, sd, runs)}} of one metric over seeds."""
        out: dict = {}
        for row in self.rows:
            out.setdefault(row["strategy"], {}).setdefault(row["budget"], []).append(row[metric])
        return {s: {b: (float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0, len(v))
                    for b, v in by.items()} for s, by in out.items()}


def robot_experiment(ctx, model, dataset, eps: float, strategies=DEFAULT_STRATEGIES, budgets=("1%", "2%", "4%"),
                     seeds=(0, 1, 2), preset: str = "robot-mnist", epochs: int | None = None,
                     checkpoint_mode: str = "clean", setup: RobotSetup | None = None, pool_inputs: int | None = None,
                     report_subset: int = REPORT_SUBSET, done: Sequence[dict] = ()) -> ExperimentResult:
    """The grid of strategies × budgets × seeds over one setup; a partial result per finished run.

    `done` holds rows of earlier runs on this setup with this protocol (`reusable_rows`): the grid's
    cells they cover are not run again, and the result holds them beside the new ones, so adding a
    strategy to a comparison runs only that strategy.
    """
    for budget in budgets:  # refuse a bad budget before minutes of attacks
        resolve_budget(budget, None)
    if not strategies or not seeds:
        raise WorkbenchError("The experiment needs at least one strategy and one seed.", "Name them.")
    rows = list(done)
    have = {run_key(row) for row in rows}
    grid = [(s, b, seed) for b in budgets for s in strategies for seed in seeds if (s, str(b), int(seed)) not in have]
    stages = len(grid) + (setup is None)
    if setup is None:
        setup = prepare(ctx.stage(0, stages, "setup"), model, dataset, eps, seed=seeds[0],
                        checkpoint_mode=checkpoint_mode, pool_inputs=pool_inputs, report_subset=report_subset)
        ctx.partial({"setup": setup.summary()})
    offset = stages - len(grid)
    if sharding(ctx) and grid:  # every run a shard: the rows come in grid order
        runs = ctx.stage(offset, stages, "runs", partials=True, span=len(grid))
        rows += _sharded_grid(runs, GridInputs(setup, preset, epochs), grid)
    else:
        for k, (strategy, budget, seed) in enumerate(grid):
            row, _ = run_strategy(ctx.stage(offset + k, stages, f"run {k + 1}/{len(grid)}"), setup, strategy,
                                  budget, seed, preset=preset, epochs=epochs)
            rows.append(row)
            ctx.partial(row)
    params = {"strategies": list(dict.fromkeys(r["strategy"] for r in rows)),
              "budgets": list(dict.fromkeys(r["budget"] for r in rows)),
              "seeds": list(dict.fromkeys(r["seed"] for r in rows)),
              "preset": preset, "epochs": epochs, "checkpoint_mode": setup.checkpoint_mode,
              "report_subset": setup.report_subset, "eps": setup.eps}
    return ExperimentResult(rows, setup.summary(), params)


@dataclass
class GridInputs:
    """What every run of a grid needs, sent once: the setup (model, data, pools) and the protocol."""

    setup: RobotSetup
    preset: str
    epochs: int | None


RUN_STEPS = 100  # a run's progress, in hundredths


def grid_run(ctx, inputs: GridInputs, cell: tuple) -> dict:
    """One cell of the grid (strategy, budget, seed) as a shard: its row."""
    strategy, budget, seed = cell
    row, _ = run_strategy(ctx, inputs.setup, strategy, budget, seed, preset=inputs.preset, epochs=inputs.epochs)
    return row


def _sharded_grid(ctx, inputs: GridInputs, grid: list[tuple]) -> list[dict]:
    """The grid's runs as independent shards, one run each; the rows in grid order, each handed out as its run
    ends. A run is the same wherever it runs (selection and fine-tuning are seeded), to float rounding where
    another thread count sums in another order."""
    setup = inputs.setup
    if any(strategy == "coverage-greedy" for strategy, _, _ in grid) and setup.covers is None:
        setup.covers = coverage_items(ctx.quiet(), setup.model, setup.pool.subset(setup.selectable).images)
    shown: set[int] = set()

    def partial(parts: dict) -> list[dict]:
        new = [parts[i] for i in sorted(set(parts) - shown)]
        shown.update(parts)
        return new

    return run_plan(ctx, ShardPlan("runs", inputs, list(grid), grid_run, list, [RUN_STEPS] * len(grid), units="runs",
                                   partial=partial, describe=lambda cell: f"{cell[0]} at {cell[1]}, seed {cell[2]}"))


def run_key(row: dict) -> tuple[str, str, int]:
    """What tells one retraining run of a grid from another: (strategy, budget, seed)."""
    return row["strategy"], str(row["budget"]), int(row["seed"])


def missing_runs(done: Sequence[dict], strategies, budgets, seeds) -> int:
    """How many runs of the grid `done` does not cover."""
    have = {run_key(row) for row in done}
    return sum((s, str(b), int(seed)) not in have for b in budgets for s in strategies for seed in seeds)


def reusable_rows(run: dict | None, setup: RobotSetup, epochs: int | None, preset: str = "robot-mnist") -> list[dict]:
    """The rows of an earlier experiment `run` ({"rows", "params", "setup"}, as stored or as returned)
    that a grid on `setup` may reuse: only when it ran on the same pool, held-out part and fp_test,
    with the same ε, epochs, checkpointing, preset and report subset. Otherwise none: runs of another
    protocol are not comparable on one plot."""
    if not run or not run.get("rows"):
        return []
    params = run.get("params", {})
    same = (params.get("epochs") == epochs and params.get("preset", "robot-mnist") == preset
            and params.get("checkpoint_mode") == setup.checkpoint_mode
            and params.get("report_subset") == setup.report_subset
            and _canonical(run.get("setup", {}), "eps", "pool", "selectable", "heldout", "fp_test")
            == _canonical(setup.summary(), "eps", "pool", "selectable", "heldout", "fp_test"))
    return [dict(row) for row in run["rows"] if "strategy" in row] if same else []


def _canonical(summary: dict, *keys: str) -> str:
    """Part of a set-up summary as comparable text (a stored one came back through JSON)."""
    return json.dumps({k: summary.get(k) for k in keys}, sort_keys=True, default=str)
