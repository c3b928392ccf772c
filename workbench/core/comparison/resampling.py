"""Resampled figures of a test set without another pass over the model: bootstrap and size-matched draws.

Every figure is recomputed from what is stored per input — covered items, correctness, FOL,
uncertainty, novelty — for `resamples` seeded draws of the set's inputs:

- **bootstrap**: n inputs drawn with replacement (the percentile interval, 2.5–97.5 %);
- **size-matched**: m < n inputs drawn without replacement, so a larger set is compared with a
  smaller one at the smaller one's size.

Coverage is a union, so a draw covers an item when it draws at least one of the inputs covering it.
That is computed exactly for the items few inputs cover: an item covered by c inputs is missed by a
draw of m of n inputs with probability at most (1 − c/n)^m, and items whose bound is below 10⁻¹²
are counted as covered in every draw (the chance of an error over 1,000 draws of 100,000 items is
below 10⁻⁴). The rest is one sparse product of the rare items with the draws' indicator matrix.

A bootstrap draw of n from n holds about 63 % distinct inputs, so resampled coverage sits below the
observed coverage: the interval shows how much coverage depends on which inputs a set happens to
hold, and for sets of different sizes the size-matched draws are the fair comparison. Means (accuracy,
FOL, uncertainty, novelty, validity) take the usual percentile bootstrap.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import sparse

#: an item whose miss probability is below this is covered in every draw
NEGLIGIBLE = 1e-12
RESAMPLES = 1000


@dataclass
class Draws:
    """`resamples` draws of `size` of `n` inputs: (resamples, n) counts of how often each input is drawn."""

    counts: np.ndarray
    size: int
    replace: bool
    seed: int

    @property
    def n(self) -> int:
        return self.counts.shape[1]

    @cached_property
    def bits(self) -> np.ndarray:
        """(inputs, ⌈resamples/8⌉) uint8: whether each draw holds each input, a bit per draw (made once, for
        every criterion)."""
        return np.packbits(np.ascontiguousarray((self.counts > 0).T), axis=1)

    def as_dict(self) -> dict:
        return {"resamples": int(self.counts.shape[0]), "size": self.size, "replace": self.replace,
                "seed": self.seed}


def bootstrap_draws(n: int, resamples: int = RESAMPLES, seed: int = 0) -> Draws:
    rng = np.random.default_rng(seed)
    if n == 0:
        return Draws(np.zeros((resamples, 0), dtype=np.int32), 0, True, seed)
    picks = rng.integers(0, n, size=(resamples, n)) + (np.arange(resamples, dtype=np.int64) * n)[:, None]
    counts = np.bincount(picks.ravel(), minlength=resamples * n).reshape(resamples, n).astype(np.int32)
    return Draws(counts, n, True, seed)


def subsample_draws(n: int, size: int, resamples: int = RESAMPLES, seed: int = 0) -> Draws:
    """`size` of `n` inputs without replacement, `resamples` times."""
    size = min(int(size), n)
    rng = np.random.default_rng(seed)
    counts = np.zeros((resamples, n), dtype=np.int32)
    if size and n:
        keys = rng.random((resamples, n))
        chosen = np.argpartition(keys, size - 1, axis=1)[:, :size] if size < n else np.tile(np.arange(n),
                                                                                              (resamples, 1))
        np.put_along_axis(counts, chosen, 1, axis=1)
    return Draws(counts, size, False, seed)


def resampled_coverage(items: sparse.csr_matrix, draws: Draws) -> np.ndarray:
    """(resamples,) covered items of each draw (exact up to the module docstring's negligible items)."""
    n, total = items.shape
    if n == 0 or draws.size == 0:
        return np.zeros(draws.counts.shape[0])
    if draws.size * 4 <= n:  # small draws: the union of each draw's few rows is quicker than the product
        return _unions(items, draws)
    per_item = np.asarray(items.sum(axis=0)).ravel()
    hit = per_item > 0
    with np.errstate(divide="ignore"):
        miss_bound = np.exp(draws.size * np.log1p(-np.minimum(per_item, n) / n)) if n else np.ones(total)
    always = hit & (miss_bound < NEGLIGIBLE)
    rare = np.flatnonzero(hit & ~always)
    if len(rare) == 0:
        return np.full(draws.counts.shape[0], float(always.sum()))
    return always.sum() + _rare_covered(items[:, rare].tocsc(), draws)


#: gathered (input, item) pairs per block: bounds the memory of `_rare_covered` (block × resamples / 8 bytes)
BLOCK = 200_000


def _rare_covered(rare: sparse.csc_matrix, draws: Draws) -> np.ndarray:
    """(resamples,) how many of the columns of `rare` each draw covers: per item, the OR of its covering
    inputs' draw bits, then the bits counted per draw — a few vectorised passes over the nonzeros."""
    bits, resamples = draws.bits, draws.counts.shape[0]
    covered = np.zeros(resamples, dtype=np.int64)
    indptr, indices = rare.indptr, rare.indices
    start = 0
    while start < rare.shape[1]:
        stop = int(np.searchsorted(indptr, indptr[start] + BLOCK, side="right")) - 1
        stop = min(max(stop, start + 1), rare.shape[1])
        lo, hi = indptr[start], indptr[stop]
        reduced = np.bitwise_or.reduceat(bits[indices[lo:hi]], indptr[start:stop] - lo, axis=0)
        covered += np.unpackbits(reduced, axis=1, count=resamples).sum(axis=0, dtype=np.int64)
        start = stop
    return covered.astype(np.float64)


def _unions(items: sparse.csr_matrix, draws: Draws) -> np.ndarray:
    """(resamples,) covered items of each draw, as the union of the items of its drawn rows."""
    indptr, indices = items.indptr, items.indices
    out = np.empty(draws.counts.shape[0])
    for r, counts in enumerate(draws.counts):
        rows = np.flatnonzero(counts)
        parts = [indices[indptr[i]:indptr[i + 1]] for i in rows]
        out[r] = len(np.unique(np.concatenate(parts))) if parts else 0
    return out


def resampled_mean(values: np.ndarray, draws: Draws, rows=None) -> np.ndarray:
    """(resamples,) the mean of `values` over each draw (NaN where a draw holds none of `rows`)."""
    values = np.asarray(values, dtype=np.float64)
    weights = draws.counts.astype(np.float64)
    if rows is not None:
        mask = np.zeros(draws.n, dtype=bool)
        mask[rows] = True
        weights = weights * mask
    finite = np.isfinite(values)
    weights = weights * finite
    sums = weights @ np.where(finite, values, 0.0)
    totals = weights.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, sums / totals, np.nan)


def resampled_median(values: np.ndarray, draws: Draws) -> np.ndarray:
    """(resamples,) the median of `values` over each draw (a weighted median of the drawn counts)."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)  # NaN is left out, as the mean leaves it out
    order = np.argsort(values, kind="stable")[:int(finite.sum())]
    ordered = values[order]
    if len(ordered) == 0:
        return np.full(draws.counts.shape[0], np.nan)
    cumulative = np.cumsum(draws.counts[:, order], axis=1)
    half = cumulative[:, -1:] / 2.0
    lo = np.argmax(cumulative >= half, axis=1)
    hi = np.argmax(cumulative > half, axis=1)
    out = (ordered[lo] + ordered[hi]) / 2.0
    return np.where(cumulative[:, -1] > 0, out, np.nan)


def interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if len(finite) == 0:
        return None
    tail = (1 - level) / 2
    return float(np.quantile(finite, tail)), float(np.quantile(finite, 1 - tail))
