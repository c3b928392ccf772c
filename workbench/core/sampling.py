"""Seeded samples of positions: the one draw behind every "seeded subset of k of n inputs"."""

from __future__ import annotations

import numpy as np


def seeded_sample(n: int, k: int | None, seed, *, sort: bool = True, always: bool = False) -> np.ndarray | None:
    """`k` distinct positions of 0…n−1: `np.random.default_rng(seed).choice(n, k, replace=False)`,
    in ascending order when `sort`, else in the order drawn.

    With `k` None or at least `n` there is nothing to sample and the answer is None (take all n),
    unless `always`: then the draw is made as asked (with `k = n`, a seeded order of all n).
    """
    if not always and (k is None or k >= n):
        return None
    chosen = np.random.default_rng(seed).choice(n, k, replace=False)
    return np.sort(chosen) if sort else chosen
