"""Robustness reports: clean, static-AE and adaptive robust accuracy, mean FOL.

Method: docs/methods/fuzzing-and-retraining.md#robustness-reports.

- **Static AE accuracy** is accuracy on `fp_test`, the frozen set of successful FGSM/PGD
  adversarials of the test split against the *original* model: RobOT's "empirical robustness".
  It starts at 0 % and measures how well fixed adversarials stop working.
- **Adaptive robust accuracy** re-attacks the evaluated model with PGD-10 on a seeded subset of
  the clean test split; a clean error counts as not robust. It is the number that says whether the
  model became robust, not only whether it learnt the old adversarials.
- **Mean FOL** (FOL∞) of those same PGD examples, all of them, successes or not, so rounds of the
  convergence loop stay comparable.
"""

from __future__ import annotations

import numpy as np

from workbench.core.data.dataset import step_batch
from workbench.core.errors import WorkbenchError
from workbench.core.robustness.attacks import PGD_STEPS, check_eps, pgd, random_start
from workbench.core.robustness.scores import (
    check_finite_logits,
    fol_linf,
    input_gradients,
    torch_module,
)
from workbench.core.sampling import seeded_sample

REPORT_SUBSET = 1000  # the fixed seeded subset of test inputs re-attacked every round


def report_subset(n_test: int, size: int = REPORT_SUBSET, seed: int = 0) -> np.ndarray:
    """The seeded subset of test indices (ascending) that every report of a run attacks."""
    if size >= n_test:
        return np.arange(n_test)
    return seeded_sample(n_test, size, seed)


def predictions(ctx, model, images: np.ndarray, batch_size: int = 1000) -> np.ndarray:
    """argmax predictions of `model` on an image array, batch by batch on `ctx.device`."""
    import torch

    module = torch_module(model)
    module.to(ctx.device).eval()
    out = np.empty(len(images), dtype=np.int64)
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            x = torch.from_numpy(np.ascontiguousarray(images[start:start + batch_size], dtype=np.float32))
            logits = module(x.to(ctx.device))
            check_finite_logits(logits)
            out[start:start + len(x)] = logits.argmax(1).cpu().numpy()
    return out


def adaptive_attack(ctx, model, split, eps: float, indices: np.ndarray, seed: int = 0,
                    batch_size: int = 256) -> dict:
    """PGD-10 against `model` on `indices` of `split`: robust accuracy and FOL∞ of every example."""
    import torch

    module = torch_module(model)
    module.to(ctx.device).eval()
    generator = torch.Generator(device=ctx.device).manual_seed(int(seed))
    robust, clean_ok, fol = [], [], []
    for _, xb, yb in split.batches(step_batch(batch_size, PGD_STEPS + 4), indices):
        ctx.check()
        xb, yb = xb.to(ctx.device), yb.to(ctx.device)
        adv = pgd(module, xb, yb, eps, start=random_start(xb, eps, generator))
        grad, logits = input_gradients(module, adv, yb)
        with torch.no_grad():
            clean_logits = module(xb)
        check_finite_logits(clean_logits)
        ok = clean_logits.argmax(1) == yb
        clean_ok.append(ok.cpu().numpy())
        robust.append((ok & (logits.argmax(1) == yb)).cpu().numpy())
        fol.append(fol_linf(grad, adv, xb, eps).cpu().numpy())
    robust, fol = np.concatenate(robust), np.concatenate(fol).astype(np.float64)
    return {"adaptive_robust_accuracy": float(robust.mean()), "adaptive_inputs": int(len(robust)),
            "fol_mean": float(fol.mean()), "fol_median": float(np.median(fol))}


def robustness_report(ctx, model, test_split, eps: float, fp_test=None, subset: int = REPORT_SUBSET,
                      seed: int = 0, batch_size: int = 256) -> dict:
    """Every report metric for one model: accuracies as fractions in [0, 1], FOL∞ mean and median.

    `fp_test` is a `CandidatePool` frozen against the original model; without it the static AE
    accuracy is omitted. The adaptive attack and the FOL curve share one seeded subset of `subset`
    test inputs, so one PGD run feeds both.
    """
    eps = check_eps(eps)
    if len(test_split) == 0:
        raise WorkbenchError("The test split is empty; there is nothing to report on.",
                             "Choose a dataset with a test split.")
    labels = test_split.labels
    ctx.progress(0, 3, "clean accuracy")
    clean_pred = predictions(ctx, model, test_split.numpy())
    report = {"clean_accuracy": float((clean_pred == labels).mean()), "eps": eps}
    ctx.progress(1, 3, "static AE accuracy")
    if fp_test is not None and len(fp_test):
        correct = predictions(ctx, model, fp_test.images) == fp_test.labels
        report["static_ae_accuracy"] = float(correct.mean())
        report["static_ae_by_attack"] = {name: float(correct[fp_test.attack == name].mean())
                                         for name in sorted(set(fp_test.attack.tolist()))}
        report["static_ae_inputs"] = int(len(fp_test))
    ctx.progress(2, 3, "adaptive PGD")
    indices = report_subset(len(test_split), subset, seed)
    report.update(adaptive_attack(ctx, model, test_split, eps, indices, seed, batch_size))
    report["report_subset_seed"] = int(seed)
    ctx.progress(3, 3, "report done")
    return report
