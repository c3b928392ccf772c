"""Automated validity proxies: scores that stand in for a human's "is this a valid input?", and their
thresholds (docs/methods/validity.md).

They are **proxies**, never a verdict of validity: every name, column and message says so, and the
labelling issue sets them beside the human consensus.

- **SelfOracle-style reconstruction loss** (Stocco et al., 2020; as used by Riccio and Tonella, 2023):
  s(x) = mean over pixels of BCE(x, decode(z)), z = µ(x) by default or averaged over L seeded draws
  from q(z|x). A gamma distribution with location 0 is fitted by maximum likelihood to the scores of
  held-out nominal images, and the threshold τ_c is its quantile c; an input is *invalid (proxy)* when
  s(x) > τ_c or s(x) is NaN. c = 0.9999 is the main setting, the others are for sensitivity.
- **DAIV-style reconstruction probability** (Dola, Dwyer and Soffa, 2021): with a Gaussian decoder
  (µ̂, log σ̂² per pixel), r(x) = −½ Σ_pixels [log(2π σ̂²) + (x − µ̂)² / σ̂²] for one z drawn from
  q(z|x) (or µ). The threshold is the one that best separates nominal images (positives) from a
  reference set of another domain: every midpoint between consecutive distinct pooled scores is
  tried and the highest F1 kept, the lowest such threshold on a tie. *Invalid (proxy)* when r(x) < τ
  or NaN.
- **Label preservation by an oracle classifier** independent of the model under test: *preserved*
  when its top-1 class is the intended one with softmax ≥ τ (0.5), *changed* when another class
  reaches τ, else *uncertain*.
"""

from __future__ import annotations

import math

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext

QUANTILES = (0.68, 0.90, 0.95, 0.99, 0.999, 0.9999, 0.99999)
MAIN_QUANTILE = 0.9999
ORACLE_THRESHOLD = 0.5
VERDICTS = ("preserved", "changed", "uncertain")
BATCH = 1000


def _batches(ctx: JobContext, images, what: str):
    import torch

    x = torch.as_tensor(images, dtype=torch.float32)
    for start in range(0, len(x), BATCH):
        ctx.check()
        ctx.progress(start, len(x), what)
        yield x[start:start + BATCH]
    ctx.progress(len(x), len(x), what)


def _posteriors(ctx: JobContext, vae, images, what: str):
    """Per batch of `images`: (the batch, its flat pixels with NaN and infinities replaced, which rows were
    finite, µ and log σ² of q(z|x)) — what both reconstruction scores start from."""
    import torch

    for x in _batches(ctx, images, what):
        flat = x.reshape(len(x), -1).to(vae.device)
        finite = torch.isfinite(flat).all(dim=1)
        flat = torch.nan_to_num(flat, nan=0.0, posinf=1.0, neginf=0.0).clamp(0, 1)
        mu, logvar = vae.posterior(flat)
        yield x, flat, finite, mu, logvar


def _check_validator(vae, gaussian: bool, what: str) -> None:
    if getattr(vae, "kind", "") != "vae" or bool(getattr(vae, "gaussian", False)) != gaussian:
        need = "a VAE with the Gaussian decoder" if gaussian else "a VAE with the Bernoulli decoder"
        raise WorkbenchError(f"The {what} needs {need}.", "Use the validator set trained by `workbench "
                                                          "train-validators`.")


def posterior_noise(images, shape, seed: int):
    """Standard normal noise `shape` (N, z) for drawing from q(z|x), each row from a stream seeded by the
    run's seed and its own image's pixels: an image's score does not depend on what else is scored with it
    or where it sits, so a set scored in shards or in another order gets the same verdicts."""
    import zlib

    import torch

    flat = np.ascontiguousarray(np.asarray(images, dtype=np.float32).reshape(len(images), -1))
    rows = []
    for i in range(len(flat)):
        stream = torch.Generator().manual_seed((int(seed) * 1_000_003 + zlib.crc32(flat[i].tobytes())) % (2 ** 63))
        rows.append(torch.randn(tuple(shape[1:]), generator=stream))
    return torch.stack(rows) if rows else torch.zeros(tuple(shape))


def reconstruction_loss(ctx: JobContext, vae, images, samples: int = 0, seed: int = 0) -> np.ndarray:
    """SelfOracle-style scores: mean per-pixel binary cross-entropy of each image's reconstruction from
    z = µ(x) (`samples` = 0) or averaged over `samples` seeded draws from q(z|x). Higher is less nominal;
    NaN where the image holds NaN."""
    import torch
    import torch.nn.functional as F

    _check_validator(vae, False, "reconstruction loss")
    out = []
    with torch.inference_mode():
        for x, flat, finite, mu, logvar in _posteriors(ctx, vae, images, "SelfOracle reconstruction loss"):
            noise = posterior_noise(x.numpy(), (len(x), max(samples, 0) * mu.shape[1]), seed).to(mu.device)
            draws = [mu] if samples <= 0 else [
                mu + noise[:, k * mu.shape[1]:(k + 1) * mu.shape[1]] * torch.exp(0.5 * logvar) for k in range(samples)]
            losses = torch.stack([F.binary_cross_entropy_with_logits(vae.likelihood(z), flat, reduction="none")
                                  .mean(dim=1) for z in draws]).mean(dim=0)
            out.append(torch.where(finite, losses, torch.full_like(losses, float("nan"))).cpu().numpy())
    return np.concatenate(out).astype(np.float64) if out else np.zeros(0)


def reconstruction_probability(ctx: JobContext, vae, images, use_mean: bool = False, seed: int = 0) -> np.ndarray:
    """DAIV-style scores: the Gaussian decoder's log-likelihood of each image, summed over pixels, for one
    draw from q(z|x) (`posterior_noise`; or µ with `use_mean`). Lower is less nominal; NaN where the image holds NaN."""
    import torch

    from workbench.core.generation.vae import LOG_2PI

    _check_validator(vae, True, "reconstruction probability")
    out = []
    with torch.inference_mode():
        for x, flat, finite, mu, logvar in _posteriors(ctx, vae, images, "DAIV reconstruction probability"):
            z = mu if use_mean else mu + posterior_noise(x.numpy(), mu.shape, seed).to(mu.device) * torch.exp(
                0.5 * logvar)
            mean, pixel_logvar = vae.likelihood(z)
            r = -0.5 * torch.sum(LOG_2PI + pixel_logvar + (flat - mean).pow(2) / pixel_logvar.exp(), dim=1)
            out.append(torch.where(finite, r, torch.full_like(r, float("nan"))).cpu().numpy())
    return np.concatenate(out).astype(np.float64) if out else np.zeros(0)


def gamma_thresholds(scores, quantiles=QUANTILES) -> dict:
    """A gamma distribution with location 0 fitted by maximum likelihood to nominal `scores`, and its
    quantiles: {"shape", "scale", "n", "thresholds": {"0.9999": τ, …}}."""
    from scipy import stats

    scores = np.asarray(scores, dtype=np.float64)
    scores = scores[np.isfinite(scores)]
    if len(scores) < 2 or np.ptp(scores) == 0:
        raise WorkbenchError(f"A gamma fit needs at least two different nominal scores (got {len(scores)}).",
                             "Fit the threshold on more held-out nominal images.")
    if scores.min() <= 0:
        raise WorkbenchError("Reconstruction losses must be positive for the gamma fit.",
                             "Check the validator: a loss of zero or less means its scores are not losses.")
    shape, _, scale = stats.gamma.fit(scores, floc=0)
    return {"shape": float(shape), "scale": float(scale), "n": int(len(scores)),
            "thresholds": {f"{q:g}": float(stats.gamma.ppf(q, shape, loc=0, scale=scale)) for q in quantiles}}


def f1_threshold(positive, negative) -> dict:
    """The threshold on scores that best separates `positive` (nominal, scored high) from `negative`
    (another domain): of every midpoint between consecutive distinct pooled scores, the one whose rule
    "score ≥ τ is nominal" has the highest F1 for the positives, the lowest such τ on a tie.
    {"threshold", "f1", "precision", "recall", "n_positive", "n_negative"}."""
    pos = np.asarray(positive, dtype=np.float64)
    neg = np.asarray(negative, dtype=np.float64)
    pos, neg = pos[np.isfinite(pos)], neg[np.isfinite(neg)]
    if not len(pos) or not len(neg):
        raise WorkbenchError("The F1 threshold needs nominal scores and scores of another domain.",
                             "Score both sets before fitting the threshold.")
    values = np.unique(np.concatenate([pos, neg]))
    if len(values) < 2:
        raise WorkbenchError("Every score is the same, so no threshold separates the two sets.",
                             "Check the validator.")
    candidates = (values[:-1] + values[1:]) / 2
    pos_sorted, neg_sorted = np.sort(pos), np.sort(neg)
    # positives and negatives at or above each candidate (searchsorted: no loop over candidates)
    tp = len(pos) - np.searchsorted(pos_sorted, candidates, side="left")
    fp = len(neg) - np.searchsorted(neg_sorted, candidates, side="left")
    precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 0.0)
    recall = tp / len(pos)
    # F1 = 2tp / (2tp + fp + fn): one division of whole numbers, so equal F1s are equal floats and a tie is seen
    f1 = np.where(tp > 0, 2 * tp / np.maximum(2 * tp + fp + (len(pos) - tp), 1), 0.0)
    best = int(np.flatnonzero(f1 == f1.max())[0])  # candidates ascend: the first is the lowest
    return {"threshold": float(candidates[best]), "f1": float(f1[best]), "precision": float(precision[best]),
            "recall": float(recall[best]), "n_positive": int(len(pos)), "n_negative": int(len(neg))}


def oracle_verdicts(probabilities, expected, threshold: float = ORACLE_THRESHOLD) -> np.ndarray:
    """"preserved", "changed" or "uncertain" per row of softmax `probabilities` for `expected` labels."""
    p = np.asarray(probabilities, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.int64)
    top, confidence = p.argmax(axis=1), p.max(axis=1)
    sure = confidence >= threshold
    out = np.full(len(p), "uncertain", dtype=object)
    out[sure & (top == expected)] = "preserved"
    out[sure & (top != expected)] = "changed"
    return out.astype(str)


def invalid_by_loss(scores, threshold: float) -> np.ndarray:
    """SelfOracle rule: invalid (proxy) where the loss exceeds τ or is NaN."""
    s = np.asarray(scores, dtype=np.float64)
    return ~(s <= threshold)


def invalid_by_probability(scores, threshold: float) -> np.ndarray:
    """DAIV rule: invalid (proxy) where the reconstruction probability is below τ or NaN."""
    s = np.asarray(scores, dtype=np.float64)
    return ~(s >= threshold)


def quantile_key(q: float) -> str:
    if not (0 < q < 1) or math.isnan(q):
        raise WorkbenchError(f"A gamma quantile lies strictly between 0 and 1 (got {q}).",
                             f"Use one of {', '.join(f'{x:g}' for x in QUANTILES)}.")
    return f"{q:g}"
