"""Combinations of per-neuron cluster indices as mixed-radix integer codes, and their counts.

A combination is the tuple of centroid *indices* (never rounded centroid values, which can merge
centroids the denominator still counts), stored as one int64 code with the first (most important)
neuron most significant (docs/methods/idc.md#mapping-inputs-to-combinations).
The counter keeps how many inputs fell in each code: a dense array when |INCC| is small, sorted
unique codes with counts otherwise, so memory follows the covered combinations, not the inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.core.errors import WorkbenchError

DENSE_LIMIT = 1 << 20  # up to this many combinations a dense count array (8 MiB) is the cheapest
MAX_CODES = 1 << 62


class MixedRadix:
    """Encodes index tuples (i_0 … i_{m-1}), 0 ≤ i_j < radices[j], as integers; i_0 most significant."""

    def __init__(self, radices):
        self.radices = np.asarray(radices, dtype=np.int64).reshape(-1)
        size = 1
        for r in self.radices.tolist():
            size *= int(r)
        if size > MAX_CODES:
            raise WorkbenchError(f"The {len(self.radices)} important neurons give {size:.3g} cluster combinations, "
                                 "too many to index.", "Choose a smaller m.")
        self.size = size
        strides = np.ones(len(self.radices), dtype=np.int64)
        for j in range(len(self.radices) - 2, -1, -1):
            strides[j] = strides[j + 1] * self.radices[j + 1]
        self.strides = strides

    def encode(self, indices: np.ndarray) -> np.ndarray:
        """(B, m) indices → (B,) int64 codes."""
        return np.asarray(indices, dtype=np.int64) @ self.strides if len(self.radices) else \
            np.zeros(len(indices), dtype=np.int64)

    def decode(self, codes) -> np.ndarray:
        """(n,) codes → (n, m) indices."""
        codes = np.asarray(codes, dtype=np.int64).reshape(-1)
        return (codes[:, None] // self.strides[None, :]) % self.radices[None, :]


class CodeCounter:
    """How many inputs fell in each code of `range(size)`; adding codes never removes any."""

    def __init__(self, size: int):
        self.size = int(size)
        self.dense = self.size <= DENSE_LIMIT
        self._counts = np.zeros(self.size, dtype=np.int64) if self.dense else None
        self._codes = np.zeros(0, dtype=np.int64)     # sparse form: sorted unique codes …
        self._code_counts = np.zeros(0, dtype=np.int64)  # … and their counts

    def add(self, codes: np.ndarray) -> None:
        """Add one input in each of `codes`."""
        codes = np.asarray(codes, dtype=np.int64).reshape(-1)
        if self.dense:  # a bincount beats a scattered add when most codes are hit
            self._counts += np.bincount(codes, minlength=self.size)
        elif len(codes):
            self.add_counts(*np.unique(codes, return_counts=True))

    def add_counts(self, codes: np.ndarray, counts: np.ndarray) -> None:
        """Add `counts[i]` inputs in code `codes[i]` (another counter's `items()`)."""
        codes = np.asarray(codes, dtype=np.int64).reshape(-1)
        counts = np.asarray(counts, dtype=np.int64).reshape(-1)
        if not len(codes):
            return
        if self.dense:
            np.add.at(self._counts, codes, counts)
            return
        merged = np.concatenate([self._codes, codes])
        weights = np.concatenate([self._code_counts, counts])
        self._codes, inverse = np.unique(merged, return_inverse=True)
        self._code_counts = np.bincount(inverse, weights=weights).astype(np.int64)

    @property
    def distinct(self) -> int:
        return int(np.count_nonzero(self._counts)) if self.dense else int(len(self._codes))

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(codes, counts) of the covered combinations, codes ascending."""
        if self.dense:
            codes = np.flatnonzero(self._counts)
            return codes.astype(np.int64), self._counts[codes]
        return self._codes.copy(), self._code_counts.copy()

    def count(self, code: int) -> int:
        if self.dense:
            return int(self._counts[code])
        i = np.searchsorted(self._codes, code)
        return int(self._code_counts[i]) if i < len(self._codes) and self._codes[i] == code else 0

    def state(self) -> dict[str, np.ndarray]:
        codes, counts = self.items()
        return {"codes": codes, "counts": counts}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self.__init__(self.size)
        codes = np.asarray(state["codes"], dtype=np.int64)
        counts = np.asarray(state["counts"], dtype=np.int64)
        if self.dense:
            self._counts[codes] = counts
        else:
            self._codes, self._code_counts = codes, counts


@dataclass
class Layout:
    """The 2-D view of a combination space: rows enumerate the index tuples of the first neurons,
    columns those of the rest; `counts[r, c]` inputs fell in combination `code(r, c)`."""

    row_neurons: np.ndarray      # neuron ids (layer indices) spanning the rows
    col_neurons: np.ndarray
    row_radix: MixedRadix
    col_radix: MixedRadix
    counts: np.ndarray           # (rows, cols) int64

    @property
    def shape(self) -> tuple[int, int]:
        return self.counts.shape

    def code(self, row: int, col: int) -> int:
        return int(row) * self.col_radix.size + int(col)

    def cell(self, code: int) -> tuple[int, int]:
        return divmod(int(code), self.col_radix.size)

    def row_indices(self) -> np.ndarray:
        """(rows, len(row_neurons)) centroid indices of each row."""
        return self.row_radix.decode(np.arange(self.row_radix.size))

    def col_indices(self) -> np.ndarray:
        return self.col_radix.decode(np.arange(self.col_radix.size))


def layout(neurons: np.ndarray, radix: MixedRadix, counter: CodeCounter, split: int | None = None,
           max_cells: int = 1 << 24) -> Layout:
    """Rows = combinations of the first `split` neurons (default m // 2), columns = the others'."""
    m = len(radix.radices)
    split = m // 2 if split is None else int(split)
    rows, cols = MixedRadix(radix.radices[:split]), MixedRadix(radix.radices[split:])
    if rows.size * cols.size > max_cells:
        raise WorkbenchError(f"The combination matrix would have {rows.size * cols.size:,} cells.",
                             "Choose a smaller m to view the matrix; coverage itself is still reported.")
    counts = np.zeros(rows.size * cols.size, dtype=np.int64)
    codes, n = counter.items()
    counts[codes] = n
    return Layout(np.asarray(neurons[:split]), np.asarray(neurons[split:]), rows, cols,
                  counts.reshape(rows.size, cols.size))
