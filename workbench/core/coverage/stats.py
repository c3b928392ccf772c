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
        """Add a batch of inputs' values, (B, neurons)."""
        v = np.asarray(values, dtype=np.float64)
        if not len(v):
            return
        mean = v.mean(axis=0)
        self._combine(len(v), v.min(axis=0), v.max(axis=0), mean, ((v - mean) ** 2).sum(axis=0))

    def merge(self, other: "NeuronStats") -> None:
        """Add the statistics of other inputs, as if their values were a batch."""
        if other.n:
            self._combine(other.n, other.min, other.max, other.mean, other._m2)

    def _combine(self, n: int, low: np.ndarray, high: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> None:
        """Chan et al.'s pairwise update with the statistics of `n` more inputs."""
        if self.n == 0:
            self.n, self.min, self.max, self.mean, self._m2 = n, low.copy(), high.copy(), mean.copy(), m2.copy()
            return
        if len(mean) != len(self.mean):
            raise ValueError(f"{len(mean)} neurons after {len(self.mean)}")
        np.minimum(self.min, low, out=self.min)
        np.maximum(self.max, high, out=self.max)
        total = self.n + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self._m2 = self._m2 + m2 + delta ** 2 * (self.n * n / total)
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
