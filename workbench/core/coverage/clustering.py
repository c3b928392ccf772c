"""Clustering one neuron's training values for IDC (docs/methods/idc.md#clustering-neuron-values).

The values are 1-D. After the dense-layer zero filter, fewer than `min_values` values give the single
centroid 0.0; otherwise k-means runs for each k in `k_range` (skipping k larger than the number of
distinct values) with `n_init=10` and a fixed `random_state`, on all values, and the k with the
highest silhouette wins (ties → smaller k). The silhouette is O(n²), so it is computed on one seeded
sample of `silhouette_sample` values, the same sample for every k
(docs/methods/idc.md#silhouette-sampling); a sample holding one label scores −1. No valid k gives
the single centroid mean(values). Centroids are sorted ascending. k-means runs on one thread (see
`cluster_neuron`).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass
class NeuronClusters:
    """How one important neuron was clustered and why."""

    neuron: int
    centroids: np.ndarray                 # ascending, float64
    values: int                           # training values clustered (after the zero filter)
    zeros_dropped: int = 0
    reason: str = "silhouette"            # "silhouette" | "few-values" | "no-valid-k"
    silhouettes: dict[int, float] = field(default_factory=dict)  # k → score, for the k tried

    @property
    def k(self) -> int:
        return int(len(self.centroids))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["centroids"] = self.centroids.tolist()
        d["silhouettes"] = {str(k): v for k, v in self.silhouettes.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "NeuronClusters":
        d = dict(d)
        d["centroids"] = np.asarray(d["centroids"], dtype=np.float64)
        d["silhouettes"] = {int(k): float(v) for k, v in d.get("silhouettes", {}).items()}
        return cls(**d)


def cluster_neuron(values: np.ndarray, neuron: int = 0, *, k_range=(2, 3, 4), zero_filter: bool = False,
                   min_values: int = 10, silhouette_sample: int | None = 2000, seed: int = 0,
                   n_init: int = 10, rounding: int | None = None, check=None) -> NeuronClusters:
    """Centroids of one neuron's values by the rules above; `rounding` (decimals) merges duplicates.
    `check()` is called before each k-means fit (it raises when the job was cancelled)."""
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    values = np.asarray(values, dtype=np.float64).reshape(-1)
    dropped = 0
    if zero_filter:
        keep = values != 0.0
        dropped = int(len(values) - keep.sum())
        values = values[keep]
    if len(values) < min_values:
        return NeuronClusters(neuron, np.array([0.0]), int(len(values)), dropped, "few-values")
    distinct = len(np.unique(values))
    X = values[:, None]
    sample = _silhouette_sample(len(values), silhouette_sample, seed)
    best_score, best_centroids, scores = -np.inf, None, {}
    for k in sorted(int(k) for k in k_range):
        if k < 2 or k > distinct:
            continue
        if check is not None:
            check()
        # One thread: on 1-D data OpenMP's start-up costs more than the work (20–50× slower on two busy
        # cores), and a fixed thread count makes the fit bit-for-bit the same on every machine.
        with warnings.catch_warnings(), threadpool_limits(1):
            warnings.simplefilter("ignore", ConvergenceWarning)
            km = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(X)
        score = _silhouette(values if sample is None else values[sample],
                            km.labels_ if sample is None else km.labels_[sample])
        scores[k] = score
        if score > best_score:  # strict: a tie keeps the smaller k
            best_score, best_centroids = score, np.sort(km.cluster_centers_.reshape(-1))
    if best_centroids is None:
        return NeuronClusters(neuron, np.array([float(values.mean())]), int(len(values)), dropped, "no-valid-k")
    if rounding is not None:  # DeepImportance-compatible: round, then merge equal centroids
        best_centroids = np.unique(np.round(best_centroids, int(rounding)))
    return NeuronClusters(neuron, best_centroids, int(len(values)), dropped, "silhouette", scores)


def _silhouette_sample(n: int, size: int | None, seed: int) -> np.ndarray | None:
    """The indices scikit-learn's `silhouette_score(sample_size=size, random_state=seed)` would draw."""
    if size is None or n <= size:
        return None
    return np.random.RandomState(seed).permutation(n)[:size]


def _silhouette(values: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import silhouette_score

    if len(np.unique(labels)) < 2 or len(np.unique(labels)) >= len(labels):
        return -1.0  # one label (or one point per label) in the sample: no structure to score
    return float(silhouette_score(values[:, None], labels))


def nearest_centroid(values: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Index of the nearest centroid by |v − c|; ties → the lower index
    (docs/methods/idc.md#mapping-inputs-to-combinations)."""
    d = np.abs(np.asarray(values, dtype=np.float64)[:, None] - centroids[None, :])
    return d.argmin(axis=1)
