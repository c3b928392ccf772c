"""Covered items per input, as one sparse matrix per criterion: what comparing test sets is computed from.

A criterion's `profile` says which items each input covers in the criterion's own shape — IDC a
combination code per input, NC / TKNC / SNAC a row of covered neurons, KMNC a section per neuron,
NBC a lower and an upper corner per neuron. `item_matrix` turns each into an inputs × items boolean
CSR matrix with the criterion's item numbering (a KMNC item is neuron·k + section, an NBC item
neuron·2 + corner), so coverage, growth curves, overlaps between sets, the inputs that reach what no
other set reaches and resampled coverage are all the same few sparse operations, whatever the
criterion.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse


def item_matrix(profile: np.ndarray, total: int, items_per_neuron: int = 1) -> sparse.csr_matrix:
    """(inputs, total) bool: input i covers item j; see the module docstring for the profile shapes."""
    profile = np.asarray(profile)
    n = len(profile)
    if profile.ndim == 1:  # one item per input (IDC's code, a surprise bucket), −1 for none
        rows = np.flatnonzero(profile >= 0)
        cols = profile[rows].astype(np.int64)
    elif profile.dtype == bool:  # rows of covered items, per neuron and (NBC) per corner
        flat = profile.reshape(n, int(np.prod(profile.shape[1:])))  # not -1: that fails for an empty set
        rows, cols = np.nonzero(flat)
    else:  # a section per neuron, −1 for none
        rows, neurons = np.nonzero(profile >= 0)
        cols = neurons.astype(np.int64) * items_per_neuron + profile[rows, neurons].astype(np.int64)
    keep = cols < total  # a profile's bucket beyond the counted ones (an SC upper bound) is not an item
    rows, cols = rows[keep], cols[keep]
    data = np.ones(len(rows), dtype=bool)
    return sparse.csr_matrix((data, (rows, cols)), shape=(n, total), dtype=bool)


def covered_items(items: sparse.csr_matrix, rows=None) -> np.ndarray:
    """The items covered by the inputs `rows` (all when None), as sorted item indices."""
    part = items if rows is None else items[np.asarray(rows, dtype=np.int64)]
    hit = np.zeros(part.shape[1], dtype=bool)  # a mask, not a sort: linear in the nonzeros
    hit[part.indices] = True
    return np.flatnonzero(hit)


def coverage_count(items: sparse.csr_matrix, rows=None) -> int:
    return int(len(covered_items(items, rows)))


def growth(items: sparse.csr_matrix, points: int = 50) -> np.ndarray:
    """(points, 2): inputs taken in the set's order, items covered by them. An item counts from the first
    input that covers it, so the whole curve comes from one pass over the nonzeros."""
    n = items.shape[0]
    if n == 0:
        return np.zeros((0, 2))
    coo = items.tocoo()
    first = np.full(items.shape[1], n, dtype=np.int64)
    np.minimum.at(first, coo.col, coo.row)
    first = np.sort(first[first < n])
    taken = np.unique(np.geomspace(1, n, min(points, n)).round().astype(np.int64))  # even on a log axis
    return np.stack([taken, np.searchsorted(first, taken, side="left")], axis=1).astype(np.float64)


def reaching(items: sparse.csr_matrix, targets: np.ndarray) -> np.ndarray:
    """The inputs (row indices) that cover at least one of the item indices `targets`."""
    if len(targets) == 0 or items.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    mask = np.zeros(items.shape[1], dtype=bool)
    mask[targets] = True
    hits = np.asarray(items[:, mask].sum(axis=1)).ravel()
    return np.flatnonzero(hits > 0)


def membership(covered: dict[str, np.ndarray], total: int) -> dict[tuple[str, ...], int]:
    """For sets of covered items: how many items each exact combination of sets covers (an UpSet
    plot's bars): (A,) only A, (A, B) A and B and no other, …"""
    names = list(covered)
    if not names:
        return {}
    bits = np.zeros(total, dtype=np.int64)
    for k, name in enumerate(names):
        bits[covered[name]] |= 1 << k
    patterns, counts = np.unique(bits[bits > 0], return_counts=True)
    out = {}
    for pattern, count in sorted(zip(patterns.tolist(), counts.tolist()), key=lambda t: -t[1]):
        out[tuple(name for k, name in enumerate(names) if pattern >> k & 1)] = int(count)
    return out
