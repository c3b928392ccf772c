"""The k largest values of each row as a boolean mask, with a defined tie rule
(docs/methods/classic-criteria.md#tknc-and-tknp).

`ties="lower-index"` (the workbench's rule): among equal values at the k-th place the lower indices win.
`ties="argsort"` reproduces `numpy.argsort(row)[-k:]`, dnn-tip's choice, exactly: only rows whose
k-th value is tied (where the choice matters) are argsorted, in the caller's dtype; the others take
the unambiguous set. Both are O(B·n) apart from those rows, instead of a full sort of every row.
"""

from __future__ import annotations

import numpy as np


def top_k_mask(values: np.ndarray, k: int, ties: str = "lower-index") -> np.ndarray:
    v = np.asarray(values)
    b, n = v.shape
    kk = min(int(k), n)
    if kk <= 0:
        return np.zeros((b, n), dtype=bool)
    if kk == n:
        return np.ones((b, n), dtype=bool)
    kth = np.partition(v, n - kk, axis=1)[:, n - kk][:, None]  # the k-th largest value per row
    above = v > kth
    equal = v == kth
    need = kk - above.sum(axis=1, keepdims=True)  # how many of the tied values to take
    if ties == "lower-index":
        return above | (equal & (np.cumsum(equal, axis=1) <= need))
    if ties != "argsort":
        raise ValueError(f"unknown tie rule {ties!r}")
    mask = above | equal
    ambiguous = np.flatnonzero(equal.sum(axis=1) != need[:, 0])
    if len(ambiguous):
        rows = v[ambiguous]
        chosen = np.zeros(rows.shape, dtype=bool)
        np.put_along_axis(chosen, np.argsort(rows, axis=1)[:, -kk:], True, axis=1)
        mask[ambiguous] = chosen
    return mask
