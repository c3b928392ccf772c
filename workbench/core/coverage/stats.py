"""Per-neuron training statistics gathered batch by batch: count, min, max, mean and std, in float64.

Ranges and standard deviations come from all training images, in float64
(docs/methods/classic-criteria.md#training-statistics). Batches are merged with Chan et al.'s
parallel update of the mean and the sum of squared deviations, so the result does not depend on the
batch size beyond rounding and nothing grows with the inputs.
`std` is the population standard deviation (ddof = 0), as `numpy.std` gives by default.
"""

from __future__ import annotations

import numpy as np


class NeuronStats:
    def __init__(self):
        self.n = 0
        self.min = self.max = self.mean = self._m2 = None

    def add(self, values: np.ndarray) -> None:
        v = np.asarray(values, dtype=np.float64)
        if not len(v):
            return
        b = len(v)
        b_mean = v.mean(axis=0)
        b_m2 = ((v - b_mean) ** 2).sum(axis=0)
        if self.n == 0:
            self.min, self.max, self.mean, self._m2 = v.min(axis=0), v.max(axis=0), b_mean, b_m2
        else:
            if v.shape[1] != len(self.mean):
                raise ValueError(f"{v.shape[1]} neurons after {len(self.mean)}")
            np.minimum(self.min, v.min(axis=0), out=self.min)
            np.maximum(self.max, v.max(axis=0), out=self.max)
            total = self.n + b
            delta = b_mean - self.mean
            self.mean = self.mean + delta * (b / total)
            self._m2 = self._m2 + b_m2 + delta ** 2 * (self.n * b / total)
        self.n += b

    def merge(self, other: "NeuronStats") -> None:
        """Add the statistics of other inputs (Chan et al.'s pairwise update, as for a batch)."""
        if other.n == 0:
            return
        if self.n == 0:
            self.n, self.min, self.max = other.n, other.min.copy(), other.max.copy()
            self.mean, self._m2 = other.mean.copy(), other._m2.copy()
            return
        total = self.n + other.n
        delta = other.mean - self.mean
        np.minimum(self.min, other.min, out=self.min)
        np.maximum(self.max, other.max, out=self.max)
        self.mean = self.mean + delta * (other.n / total)
        self._m2 = self._m2 + other._m2 + delta ** 2 * (self.n * other.n / total)
        self.n = total

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self._m2 / self.n)

    def state(self) -> dict[str, np.ndarray]:
        return {"n": np.array(self.n), "min": self.min, "max": self.max, "mean": self.mean, "m2": self._m2}

    def load(self, state: dict) -> None:
        self.n = int(state["n"])
        self.min, self.max, self.mean, self._m2 = (np.asarray(state[k], dtype=np.float64)
                                                   for k in ("min", "max", "mean", "m2"))
