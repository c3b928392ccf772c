"""An example coverage-criterion plugin: half-maximum neuron coverage.

A neuron counts as covered when some test input drives it above half of the largest value it
reached on the training data: a scale-free cousin of NC, whose fixed threshold means different
things on layers with different ranges. Use it as `--criteria half-max` (CLI) or from the
Coverage view's criteria menu.
"""

from __future__ import annotations

import numpy as np

from workbench.core.coverage.protocol import Criterion, CoverageValue


def _flat(layers: dict) -> np.ndarray:
    return np.concatenate([a.reshape(len(a), -1) for a in layers.values()], axis=1)


class HalfMaxCoverage(Criterion):
    name, title = "half-max", "Half-maximum neuron coverage"

    def __init__(self, layers=None):
        super().__init__()
        self.layers = layers
        self.reset()

    def _start_fit(self):
        self.train_max = None

    def _partial_fit(self, layers, labels, predictions):
        batch_max = _flat(layers).max(0)
        self.train_max = batch_max if self.train_max is None else np.maximum(self.train_max, batch_max)

    def _profile(self, layers, labels, predictions) -> np.ndarray:
        """(inputs, neurons) bool: which neurons each input drives above half their training maximum.

        A neuron never positive on training data has no meaningful half-maximum: never covered.
        """
        return (_flat(layers) > self.train_max / 2) & (self.train_max > 0)

    def _update(self, layers, labels, predictions):
        self.hit |= self._profile(layers, labels, predictions).any(0)

    def _reset_cover(self):
        size = 0 if getattr(self, "train_max", None) is None else len(self.train_max)
        self.hit = np.zeros(size, dtype=bool)

    def coverage(self):
        return CoverageValue.of(int(self.hit.sum()), len(self.hit))

    def matrix(self) -> np.ndarray:
        """(1, neurons): 1 where a neuron is covered."""
        return self.hit[None].astype(np.int64)

    # What `state_dict()` saves, so a project can store and reuse the fit and the coverage.
    def _fit_state(self):
        return {}, {"train_max": self.train_max}

    def _load_fit_state(self, meta, arrays):
        self.train_max = np.asarray(arrays["train_max"], dtype=np.float64)

    def _cover_state(self):
        return {}, {"hit": self.hit}

    def _load_cover_state(self, meta, arrays):
        self.hit = np.asarray(arrays["hit"], dtype=bool)

    # What lets a large set be measured in shards (`--executor ray`): the fits of shards of the training
    # set merge (the larger maximum), and so do the coverages of shards of the test set (either covers).
    def _merge_fit(self, other):
        if other.train_max is not None:
            self.train_max = other.train_max if self.train_max is None else np.maximum(self.train_max,
                                                                                         other.train_max)

    def _merge_cover_state(self, meta, arrays):
        self.hit = self.hit | np.asarray(arrays["hit"], dtype=bool)


def register(registry) -> None:
    registry.add_criterion("half-max", HalfMaxCoverage)
