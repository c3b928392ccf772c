"""The robustness convergence loop, after QuoTe's `robot.py`.

Method: docs/methods/fuzzing-and-retraining.md#convergence-loop.

Round after round: report on the current model, stop once static AE accuracy exceeds the
requirement, otherwise attack the training set again *against the current model*, take all the
successes (or a strategy's pick), and fine-tune the current model cumulatively for a few epochs.
The mean FOL∞ of PGD examples on a fixed test subset is the convergence curve: it falls as the
loss surface around the data flattens. An optional plateau stop ends the loop when that curve
stops moving (off by default, as in the original).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.robustness.attacks import check_eps
from workbench.core.robustness.pool import CandidatePool, build_pool
from workbench.core.robustness.reports import REPORT_SUBSET, robustness_report
from workbench.core.robustness.retraining import fine_tune
from workbench.core.robustness.selection import select
from workbench.core.sampling import seeded_sample

PLATEAU_CHANGE = 0.05  # relative change of mean FOL …
PLATEAU_ROUNDS = 2  # … over this many rounds counts as a plateau


@dataclass
class ConvergenceResult:
    rounds: list[dict]
    model: object
    met: bool
    stop_reason: str
    params: dict = field(default_factory=dict)


def plateaued(fol_means: list[float], change: float = PLATEAU_CHANGE, rounds: int = PLATEAU_ROUNDS) -> bool:
    """True when the mean FOL changed by less than `change` (relative) over each of the last `rounds` rounds."""
    if len(fol_means) <= rounds:
        return False
    recent = fol_means[-(rounds + 1):]
    return all(abs(b - a) <= change * max(abs(a), 1e-12) for a, b in zip(recent, recent[1:]))


def convergence_loop(ctx, model, dataset, eps: float, fp_test: CandidatePool, rounds: int = 20,
                     requirement: float = 0.8, epochs: int = 5, strategy: str | None = None, budget=None,
                     seed: int = 0, plateau_stop: bool = False, pool_inputs: int | None = None,
                     report_subset: int = REPORT_SUBSET) -> ConvergenceResult:
    """Rounds of attack → fine-tune until static AE accuracy > `requirement`; one partial row per round.

    `fp_test` is frozen against the *original* model. `strategy` with `budget` picks from each
    round's pool instead of taking every success; `pool_inputs` attacks a seeded subset of the
    training set per round (all of it by default).
    """
    eps = check_eps(eps)
    if rounds < 1:
        raise WorkbenchError(f"rounds must be at least 1 (got {rounds}).", "Run one round or more.")
    if not 0.0 <= requirement <= 1.0:
        raise WorkbenchError(f"The requirement {requirement} is not an accuracy in [0, 1].", "Use e.g. 0.8.")
    if (strategy is None) != (budget is None):
        raise WorkbenchError("A strategy needs a budget, and a budget a strategy.",
                             "Give both, or neither to use every successful adversarial.")
    train, test = dataset.split("train"), dataset.split("test")
    current, rows, fol_means = model, [], []
    stop_reason, stages = None, rounds * 3 + 1
    for r in range(rounds + 1):
        started = time.monotonic()
        report = robustness_report(ctx.stage(3 * r, stages, f"round {r}: report"), current, test, eps, fp_test,
                                   report_subset, seed)
        row = {"round": r, **report}
        fol_means.append(report["fol_mean"])
        if report.get("static_ae_accuracy", 0.0) > requirement:
            stop_reason = "requirement met"
        elif plateau_stop and plateaued(fol_means):
            stop_reason = "FOL plateau"
        elif r == rounds:
            stop_reason = "rounds used up"
        else:
            indices = None
            if pool_inputs is not None and pool_inputs < len(train):
                indices = seeded_sample(len(train), pool_inputs, seed + r)
            pool = build_pool(ctx.stage(3 * r + 1, stages, f"round {r}: attacks"), current, train, eps,
                              seed=seed + r, indices=indices, what=f"the training set, round {r}")
            picked = pool
            if strategy is not None:
                chosen = select(strategy, {**pool.scores, "probs": pool.probs}, budget, seed=seed + r)
                picked = pool.subset(chosen.indices)
            tuned = fine_tune(ctx.stage(3 * r + 2, stages, f"round {r}: fine-tuning"), current, train,
                              picked.images, picked.labels, seed=seed + r, checkpoint_mode="last", epochs=epochs)
            current = tuned.model
            row.update(pool_size=len(pool), selected=len(picked),
                       selected_fol_mean=float(np.mean(picked.scores["fol_linf"])))
        row["seconds"] = time.monotonic() - started
        rows.append(row)
        ctx.partial(row)
        if stop_reason:
            break
    met = rows[-1].get("static_ae_accuracy", 0.0) > requirement
    params = {"eps": eps, "rounds": rounds, "requirement": requirement, "epochs": epochs, "strategy": strategy,
              "budget": None if budget is None else str(budget), "seed": seed, "plateau_stop": plateau_stop,
              "pool_inputs": pool_inputs, "report_subset": report_subset, "batch_size": 64}
    return ConvergenceResult(rows, current, met, stop_reason, params)
