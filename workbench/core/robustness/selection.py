"""Test selection from a candidate pool: BE-ST, KM-ST, DeepGini top-n, random (spec/robustness.md §4).

Every strategy takes a score vector over the pool and a budget (an absolute count, or a string
such as "5%" of the pool), drops NaN scores (counted in the result), and returns the chosen pool
indices with the parameters that produced them. A budget larger than the usable pool, or an empty
pool, is refused with a `WorkbenchError` rather than silently shrunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError

KMST_DEFAULT_SECTIONS = 4  # the Testing4AI rewrite's k (§4); QuoTe used 100


@dataclass
class Selection:
    """Chosen pool indices (unique), the strategy and its parameters, and how many NaN scores were dropped."""

    indices: np.ndarray
    strategy: str
    params: dict = field(default_factory=dict)
    excluded_nan: int = 0


def resolve_budget(budget, pool_size: int) -> int:
    """An absolute budget from an int, or from a percentage string "p%" of `pool_size` (rounded down)."""
    if isinstance(budget, str) and budget.strip().endswith("%"):
        try:
            percent = float(budget.strip()[:-1])
        except ValueError as exc:
            raise WorkbenchError(f"The budget {budget!r} is not a percentage.", "Write it like 5%.") from exc
        count = math.floor(percent / 100.0 * pool_size + 1e-9)
    else:
        try:
            count = int(budget)
        except (TypeError, ValueError) as exc:
            raise WorkbenchError(f"The budget {budget!r} is not a count.",
                                 "Give a whole number or a percentage like 5%.") from exc
        if count != budget:
            raise WorkbenchError(f"The budget {budget!r} is not a whole number.",
                                 "Give a count or a percentage like 5%.")
    if count < 1:
        raise WorkbenchError(f"The budget {budget!r} selects no test from a pool of {pool_size}.",
                             "Give a budget of at least one test.")
    return count


def _prepare(scores, budget, name: str):
    """(valid pool indices in ascending order, their scores, absolute budget, NaN count)."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if scores.size == 0:
        raise WorkbenchError(f"{name}: the candidate pool is empty.",
                             "Generate candidates first (attack the training set or run the fuzzer).")
    valid = np.flatnonzero(~np.isnan(scores))
    nan_count = scores.size - valid.size
    if valid.size == 0:
        raise WorkbenchError(f"{name}: every score in the pool is NaN.", "Recompute the scores; check the model.")
    n = resolve_budget(budget, valid.size)
    if n > valid.size:
        raise WorkbenchError(f"{name}: the budget {n} is larger than the pool of {valid.size} candidates"
                             + (f" ({nan_count} NaN scores dropped)." if nan_count else "."),
                             "Lower the budget or generate more candidates.")
    return valid, scores[valid], n, nan_count


def be_st(fol, budget, compat: bool = False) -> Selection:
    """BE-ST: the ⌊n/2⌋ lowest and ⌈n/2⌉ highest FOL (stable ascending sort, ties to the lower index).

    `compat=True` reproduces the RobOT code's n//2 from each end (n − 1 items for odd n, §4).
    """
    valid, values, n, nan_count = _prepare(fol, budget, "BE-ST")
    order = valid[np.argsort(values, kind="stable")]
    low = n // 2
    high = n // 2 if compat else n - low
    chosen = np.concatenate([order[:low], order[order.size - high:]]) if high else order[:low]
    return Selection(chosen.astype(np.int64), "be-st", {"budget": n, "compat": compat}, nan_count)


def kmst_sections(values: np.ndarray, k: int, lo: float | None = None) -> tuple[np.ndarray, float, float]:
    """Section number of each value over [lo, hi] cut into k equal widths, the last closed at hi (§4).

    `lo` defaults to `min(0, min values)`, `hi` is `max values`; if hi = lo everything is section 0.
    """
    hi = float(values.max())
    lo = min(0.0, float(values.min())) if lo is None else float(lo)
    if lo > float(values.min()):
        raise WorkbenchError(f"KM-ST: the range start {lo} is above the smallest score {values.min()}.",
                             "Leave lo at its default min(0, min FOL).")
    if hi == lo:
        return np.zeros(values.size, dtype=np.int64), lo, hi
    edges = lo + np.arange(k + 1) * ((hi - lo) / k)
    sections = np.searchsorted(edges, values, side="right") - 1
    return np.clip(sections, 0, k - 1).astype(np.int64), lo, hi


def km_st(fol, budget, k: int = KMST_DEFAULT_SECTIONS, seed: int = 0, lo: float | None = None) -> Selection:
    """KM-ST: quota ⌊n/k⌋ per FOL section, then a top-up without replacement (§4).

    Random draws are pinned: one `numpy.random.default_rng(seed)`; sections in ascending order, each
    with at least q members drawing `rng.choice(members, q, replace=False)` over its members in
    ascending index order (a smaller section gives all its members, no draw); then one
    `rng.choice` over the not-yet-selected candidates, in ascending index order, for the shortfall.
    """
    if int(k) != k or k < 1:
        raise WorkbenchError(f"KM-ST needs a positive whole number of sections (got {k}).", "Use k = 4.")
    k = int(k)
    valid, values, n, nan_count = _prepare(fol, budget, "KM-ST")
    sections, lo, hi = kmst_sections(values, k, lo)
    rng = np.random.default_rng(seed)
    quota = n // k
    picked = []
    if quota:
        for i in range(k):
            members = valid[sections == i]
            if members.size >= quota:
                picked.append(rng.choice(members, size=quota, replace=False))
            else:
                picked.append(members)
    chosen = np.concatenate(picked).astype(np.int64) if picked else np.zeros(0, np.int64)
    shortfall = n - chosen.size
    if shortfall:
        remaining = np.setdiff1d(valid, chosen)  # sorted ascending
        chosen = np.concatenate([chosen, rng.choice(remaining, size=shortfall, replace=False)])
    params = {"budget": n, "k": k, "seed": seed, "lo": lo, "hi": hi, "quota": quota, "topped_up": int(shortfall)}
    return Selection(chosen.astype(np.int64), "km-st", params, nan_count)


def deepgini_top(gini, budget) -> Selection:
    """The n highest DeepGini ξ = 1 − Σp² (most uncertain first; ties to the lower index)."""
    valid, values, n, nan_count = _prepare(gini, budget, "DeepGini")
    chosen = valid[np.argsort(-values, kind="stable")[:n]]
    return Selection(chosen.astype(np.int64), "deepgini", {"budget": n}, nan_count)


def random_select(scores_or_size, budget, seed: int = 0) -> Selection:
    """n candidates uniformly without replacement: `default_rng(seed).choice(valid, n, replace=False)`.

    Takes the pool size, or a score vector whose NaN entries are excluded like the other strategies.
    """
    if np.ndim(scores_or_size) == 0:
        scores = np.zeros(int(scores_or_size))
    else:
        scores = scores_or_size
    valid, _, n, nan_count = _prepare(scores, budget, "Random")
    chosen = np.random.default_rng(seed).choice(valid, size=n, replace=False)
    return Selection(chosen.astype(np.int64), "random", {"budget": n, "seed": seed}, nan_count)


def mcp(probs, budget) -> Selection:
    """MCP (Shen et al., ASE 2020): balanced selection over (top-1, top-2) class-pair buckets (§4).

    Priority inside a bucket is `p_(2)/p_(1)` (closer to the decision boundary first; ties to the
    lower index). While the remaining budget covers every non-empty bucket, each bucket gives its
    head, buckets in ascending (top-1, top-2) order; the rest is filled with the highest-priority
    current heads. Rows with a NaN probability are excluded.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2 or (probs.size and probs.shape[1] < 2):
        raise WorkbenchError(f"MCP needs an N×K probability matrix with K ≥ 2 (got shape {probs.shape}).",
                             "Pass the softmax probabilities of the pool.")
    order = np.argsort(-probs, axis=1, kind="stable") if probs.size else np.zeros((0, 2), np.int64)
    rows = np.arange(len(probs))
    top1 = probs[rows, order[:, 0]] if len(probs) else np.zeros(0)
    top2 = probs[rows, order[:, 1]] if len(probs) else np.zeros(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        priority = np.where(np.isnan(probs).any(axis=1), np.nan, top2 / top1)
    valid, values, n, nan_count = _prepare(priority, budget, "MCP")
    buckets: dict[tuple[int, int], list[int]] = {}
    for i in valid[np.argsort(-values, kind="stable")]:
        buckets.setdefault((int(order[i, 0]), int(order[i, 1])), []).append(int(i))
    queues = {key: buckets[key] for key in sorted(buckets)}
    chosen: list[int] = []
    while len(chosen) < n:
        heads = [(key, q[0]) for key, q in queues.items() if q]
        remaining = n - len(chosen)
        if remaining >= len(heads):
            for key, i in heads:
                chosen.append(i)
                queues[key].pop(0)
        else:
            best = sorted(heads, key=lambda kh: (-priority[kh[1]], kh[1]))[:remaining]
            chosen.extend(i for _, i in best)
    return Selection(np.asarray(chosen, dtype=np.int64), "mcp", {"budget": n, "buckets": len(buckets)}, nan_count)
