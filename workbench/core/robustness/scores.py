"""First-order loss (FOL) and softmax uncertainty scores.

Method: docs/methods/fol-and-selection.md (FOSC: Wang et al., ICML 2019; RobOT: Wang et al., ICSE 2021).
Gradient kinds, kept apart by name because they are different quantities:

- `fol_linf` — FOSC L∞ form, `ε·‖g‖₁ − ⟨x' − x0, g⟩` (#fol-linf); the default for selection.
- `fosc_l2` — FOSC L2 form, `ε·‖g‖₂ − ⟨x' − x0, g⟩`.
- `grad_l2` — the RobOT fuzzer's "FOL", the plain gradient norm `‖g‖₂` (#grad-l2). It is reported as
  "grad-L2 (RobOT fuzzer FOL)", never as "FOL-L2".

`g = ∇_x J(x', y)` is computed for a whole batch with one backward pass of the summed loss (the
sum trick, #per-sample-gradients), which is exact only in eval mode; `input_gradients` refuses a
model in train mode.
"""

from __future__ import annotations

import numpy as np

from workbench.core.data.dataset import step_batch
from workbench.core.errors import WorkbenchError

LOSS_MODES = ("logits", "keras_compat")
KERAS_EPSILON = 1e-7  # Keras' clip of probabilities in categorical cross-entropy (docs/methods/fol-and-selection.md#loss-modes)

GRAD_L2_LABEL = "grad-L2 (RobOT fuzzer FOL)"

#: For each uncertainty score, whether "most uncertain first" is a descending sort
#: (docs/methods/fol-and-selection.md#uncertainty-scores).
MOST_UNCERTAIN_DESCENDING = {"deepgini": True, "margin": False, "least_confidence": True, "entropy": True}


def torch_module(model):
    """The `torch.nn.Module` of a `LoadedModel`, or the module itself."""
    return getattr(model, "module", model)


def check_eval(module) -> None:
    """The sum trick and the attacks need eval mode: BatchNorm in train mode couples samples."""
    if module.training:
        raise WorkbenchError("The model is in training mode; per-input gradients need eval mode.",
                             "Call model.eval() first (dropout off, BatchNorm frozen).")


def check_loss_mode(loss_mode: str) -> None:
    if loss_mode not in LOSS_MODES:
        raise WorkbenchError(f"Unknown loss mode {loss_mode!r}.", f"Use one of: {', '.join(LOSS_MODES)}.")


def check_finite_logits(logits) -> None:
    import torch

    if not bool(torch.isfinite(logits).all()):
        raise WorkbenchError("The model produced NaN or infinite outputs.",
                             "Check the model's weights and that inputs are images in [0, 1].")


def per_input_loss(logits, y, loss_mode: str = "logits"):
    """J(x, y) per input: cross-entropy of the logits, or Keras' CE on clipped probabilities.

    In `keras_compat` mode `J = −log clip(p_y, 1e-7, 1 − 1e-7)`; saturated inputs get a zero gradient.
    """
    import torch
    import torch.nn.functional as F

    check_loss_mode(loss_mode)
    if loss_mode == "logits":
        return F.cross_entropy(logits, y, reduction="none")
    p = torch.softmax(logits, dim=1).gather(1, y[:, None])[:, 0]
    return -torch.log(torch.clamp(p, KERAS_EPSILON, 1.0 - KERAS_EPSILON))


def input_gradients(model, x, y, loss_mode: str = "logits"):
    """(∇_x J(x_i, y_i) for every row i, logits) with one backward pass of Σ_i J (the sum trick)."""
    import torch

    module = torch_module(model)
    check_eval(module)
    x = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        logits = module(x)
        check_finite_logits(logits)
        loss = per_input_loss(logits, y, loss_mode).sum()
        (grad,) = torch.autograd.grad(loss, x)
    return grad.detach(), logits.detach()


def _flat(t):
    return t.reshape(t.shape[0], -1)


def fol_linf(grad, x_adv, x0, eps: float):
    """FOSC L∞: `ε·‖g‖₁ − ⟨x' − x0, g⟩` per input; ≥ 0 whenever ‖x' − x0‖∞ ≤ ε."""
    g = _flat(grad)
    return eps * g.abs().sum(1) - (_flat(x_adv - x0) * g).sum(1)


def fosc_l2(grad, x_adv, x0, eps: float):
    """FOSC L2: `ε·‖g‖₂ − ⟨x' − x0, g⟩` per input."""
    g = _flat(grad)
    return eps * g.norm(dim=1) - (_flat(x_adv - x0) * g).sum(1)


def grad_l2(grad):
    """The RobOT fuzzer's gradient norm `‖∇_x J‖₂` per input, not a FOSC value."""
    return _flat(grad).norm(dim=1)


# --- uncertainty scores, from softmax probabilities --------------------------------------------------

def deepgini(probs: np.ndarray) -> np.ndarray:
    """ξ = 1 − Σ p²; most uncertain first = descending."""
    return 1.0 - np.sum(np.square(probs), axis=1)


def margin(probs: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 probability; most uncertain first = ascending."""
    top2 = np.sort(probs, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def least_confidence(probs: np.ndarray) -> np.ndarray:
    """1 − max p; most uncertain first = descending."""
    return 1.0 - probs.max(axis=1)


def entropy(probs: np.ndarray) -> np.ndarray:
    """−Σ p ln p with 0 ln 0 = 0; most uncertain first = descending."""
    p = np.asarray(probs, dtype=np.float64)
    logs = np.log(np.where(p > 0, p, 1.0))
    return -np.sum(p * logs, axis=1)


UNCERTAINTY_SCORES = {"deepgini": deepgini, "margin": margin, "least_confidence": least_confidence,
                      "entropy": entropy}


def most_uncertain_order(values: np.ndarray, score: str) -> np.ndarray:
    """Indices ordered most uncertain first for `score`; stable, ties go to the lower index."""
    if score not in MOST_UNCERTAIN_DESCENDING:
        raise WorkbenchError(f"Unknown uncertainty score {score!r}.",
                             f"Use one of: {', '.join(MOST_UNCERTAIN_DESCENDING)}.")
    values = np.asarray(values, dtype=np.float64)
    key = -values if MOST_UNCERTAIN_DESCENDING[score] else values
    return np.argsort(key, kind="stable")


def summary_statistics(values) -> dict:
    """Summary of a score vector over its finite values: n, nonfinite, mean, sd, min, q05, q25, median, q75,
    q95, max (None for each when no value is finite)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    finite = v[np.isfinite(v)]
    keys = ("mean", "sd", "min", "q05", "q25", "median", "q75", "q95", "max")
    if not finite.size:
        return {"n": 0, "nonfinite": int(v.size), **{k: None for k in keys}}
    q = np.quantile(finite, [0.05, 0.25, 0.5, 0.75, 0.95])
    return {"n": int(finite.size), "nonfinite": int(v.size - finite.size), "mean": float(finite.mean()),
            "sd": float(finite.std()), "min": float(finite.min()), "q05": float(q[0]), "q25": float(q[1]),
            "median": float(q[2]), "q75": float(q[3]), "q95": float(q[4]), "max": float(finite.max())}


def uncertainty_summary(probs: np.ndarray, labels: np.ndarray, index: np.ndarray | None = None,
                        ids: np.ndarray | None = None, top: int = 10, scores=None) -> dict:
    """Each uncertainty score of inputs with softmax outputs `probs` (N×K) and ground truth `labels`:
    its summary statistics and the `top` most uncertain inputs, most uncertain first (ties to the lower
    row), each with its `index` (default its row), id, label, prediction and value
    (docs/methods/fol-and-selection.md#uncertainty-scores).

    Returns {"inputs", "accuracy", "scores": {name: {"most_uncertain_first": "descending"|"ascending",
    "stats": …, "most_uncertain": [{"index", "id", "label", "prediction", "value"}, …]}}}.
    """
    probs = np.asarray(probs, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    if probs.ndim != 2 or len(probs) != len(labels):
        raise WorkbenchError(f"Softmax outputs of shape {probs.shape} do not fit {len(labels)} labels.",
                             "Give one row of class probabilities per labelled input.")
    if not len(probs):
        raise WorkbenchError("There are no inputs to score.", "Choose a test set with inputs.")
    index = np.arange(len(probs)) if index is None else np.asarray(index, dtype=np.int64)
    if len(index) != len(probs) or (ids is not None and len(ids) != len(probs)):
        raise WorkbenchError("The input indices or ids do not fit the softmax outputs.", "Give one per input.")
    names = list(UNCERTAINTY_SCORES) if scores is None else [str(s) for s in scores]
    if top < 0:
        raise WorkbenchError(f"The number of most uncertain inputs must not be negative; got {top}.",
                             "Ask for 0 or more.")
    predicted = probs.argmax(axis=1)
    out = {"inputs": len(probs), "accuracy": float(np.mean(predicted == labels)), "scores": {}}
    for name in names:
        if name not in UNCERTAINTY_SCORES:
            raise WorkbenchError(f"Unknown uncertainty score {name!r}.",
                                 f"Use one of: {', '.join(UNCERTAINTY_SCORES)}.")
        values = UNCERTAINTY_SCORES[name](probs)
        picked = most_uncertain_order(values, name)[:top]
        out["scores"][name] = {
            "most_uncertain_first": "descending" if MOST_UNCERTAIN_DESCENDING[name] else "ascending",
            "stats": summary_statistics(values),
            "most_uncertain": [{"index": int(index[i]), "id": None if ids is None else str(ids[i]),
                                "label": int(labels[i]), "prediction": int(predicted[i]),
                                "value": float(values[i])} for i in picked.tolist()]}
    return out


def softmax_probabilities(ctx, model, data, indices=None, batch_size: int = 256) -> np.ndarray:
    """(N, K) float64 softmax of the model's outputs on `data` (a split or test set) at `indices` (default
    every input), batch by batch without gradients on `ctx.device`; NaN or infinite outputs are refused,
    naming the first input that gave them and whether its pixels were at fault."""
    import torch

    from workbench.core.models.training import check_scores

    module = torch_module(model)
    module.to(ctx.device).eval()
    total = len(data) if indices is None else len(indices)
    if total == 0:
        raise WorkbenchError("There are no inputs to score.", "Choose a test set with inputs.")
    what = getattr(data, "name", "the test set")
    parts = []
    ctx.progress(0, total, "softmax")
    with torch.no_grad():
        for start, x, _ in data.batches(step_batch(batch_size), indices):
            ctx.check()
            logits = module(x.to(ctx.device))
            check_scores(model, logits, len(x))
            bad = ~torch.isfinite(logits).all(dim=1)
            if bool(bad.any()):
                row = int(bad.nonzero()[0])
                first = start + row if indices is None else int(indices[start + row])
                if not bool(torch.isfinite(x[row]).all()):
                    raise WorkbenchError(f"{what} image {first} has NaN or infinite pixels.",
                                         "Clean or re-export the test set; images must lie in [0, 1].")
                raise WorkbenchError(f"The model returned NaN or infinite scores (first at {what} image {first}).",
                                     "Check the model's weights and that inputs are images in [0, 1].")
            parts.append(torch.softmax(logits.double(), dim=1).cpu().numpy())
            ctx.progress(min(start + len(x), total), total, "softmax")
    return np.concatenate(parts)


# --- the batched job ---------------------------------------------------------------------------------

def score_inputs(ctx, model, x_adv, labels, x0=None, eps: float | None = None, loss_mode: str = "logits",
                 batch_size: int = 256) -> dict:
    """FOL kinds and uncertainty scores for every input, batch by batch on `ctx.device`.

    `x_adv` (N×C×H×W in [0,1]) are the inputs to score, `labels` their ground truth, `x0` the clean
    inputs and `eps` the attack budget; FOL∞ and FOSC-L2 are computed only when both are given.
    Returns numpy arrays per score plus `params` recording loss mode and ε.
    """
    import torch

    check_loss_mode(loss_mode)
    if (x0 is None) != (eps is None):
        raise WorkbenchError("FOL needs both the clean inputs x0 and the budget eps.",
                             "Give both, or neither to get only grad-L2 and the uncertainty scores.")
    x_adv = torch.as_tensor(np.asarray(x_adv, dtype=np.float32))
    labels = torch.as_tensor(np.asarray(labels, dtype=np.int64))
    if x0 is not None:
        x0 = torch.as_tensor(np.asarray(x0, dtype=np.float32))
        if x0.shape != x_adv.shape:
            raise WorkbenchError(f"x0 has shape {tuple(x0.shape)} but the inputs have {tuple(x_adv.shape)}.",
                                 "Give one clean input per scored input.")
    if eps is not None and not (np.isfinite(eps) and eps > 0):
        raise WorkbenchError(f"The attack budget eps={eps} is not a positive number.",
                             "Give the eps that produced the inputs, e.g. 0.3 for MNIST.")
    if len(x_adv) == 0:
        raise WorkbenchError("There are no inputs to score.", "Generate or select some inputs first.")
    if len(labels) != len(x_adv):
        raise WorkbenchError(f"There are {len(x_adv)} inputs but {len(labels)} labels.",
                             "Give one label per input.")
    module = torch_module(model)
    device = ctx.device
    module.to(device)
    keys = ["grad_l2", "probs"] + (["fol_linf", "fosc_l2"] if x0 is not None else [])
    parts = {k: [] for k in keys}
    total = len(x_adv)
    ctx.progress(0, total, "scores")
    batch_size = step_batch(batch_size, 3)  # a forward and an input gradient per input
    for start in range(0, total, batch_size):
        xb = x_adv[start:start + batch_size].to(device)
        yb = labels[start:start + batch_size].to(device)
        grad, logits = input_gradients(module, xb, yb, loss_mode)
        parts["grad_l2"].append(grad_l2(grad).cpu().numpy())
        parts["probs"].append(torch.softmax(logits.double(), dim=1).cpu().numpy())
        if x0 is not None:
            x0b = x0[start:start + batch_size].to(device)
            parts["fol_linf"].append(fol_linf(grad, xb, x0b, eps).cpu().numpy())
            parts["fosc_l2"].append(fosc_l2(grad, xb, x0b, eps).cpu().numpy())
        ctx.progress(min(start + batch_size, total), total, "scores")
    out = {k: (np.concatenate(v) if v else np.zeros((0,), np.float32)) for k, v in parts.items()}
    probs = out.pop("probs")
    out["probs_matrix"] = probs  # N×K softmax, for MCP
    if probs.ndim == 2:
        for name, fn in UNCERTAINTY_SCORES.items():
            out[name] = fn(probs)
    out["params"] = {"loss_mode": loss_mode, "eps": eps, "grad_l2_label": GRAD_L2_LABEL,
                     "batch_size": batch_size, "device": str(device)}
    return out
