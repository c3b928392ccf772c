"""Importance-Driven Coverage (Gerasimou et al., DeepImportance, ICSE 2020; docs/methods/idc.md).

One IDC model: the m important neurons D_m of a layer (most relevant first, from `importance/neuron_importance.py`),
each neuron's centroids C_n from its values on the correctly classified training inputs
(`clustering.py`), and the set of covered combinations. A test input covers the combination of each
neuron's nearest centroid; IDC = covered combinations / |INCC|, |INCC| = Π k_n. Updates only add
combinations, so IDC never decreases. Per-class mode is this criterion wrapped in `PerClass`, one
model per class from that class's important neurons (docs/methods/idc.md#per-class-mode).

Unlike the DeepImportance code release (docs/methods/idc.md#differences-from-the-original-release),
clusters and coverage read the same layer and neuron definition; k-means is seeded and the
silhouette sampled; combinations are kept as centroid indices; every option is part of the identity.
"""

from __future__ import annotations

import numpy as np

from workbench.core.coverage.clustering import NeuronClusters, cluster_neuron, nearest_centroid
from workbench.core.coverage.combinations import CodeCounter, Layout, MixedRadix, layout
from workbench.core.coverage.protocol import CoverageValue, Criterion, neuron_values
from workbench.core.errors import WorkbenchError

DEFAULT_M = 6


class IDC(Criterion):
    """IDC of one layer.

    `neurons`: the important neurons, most important first (or set later with `use_importance`);
    `m` defaults to their number, else 6. `zero_filter=None` turns the filter on for dense layers
    with `point="post"` (docs/methods/idc.md#clustering-neuron-values). `record_inputs` keeps each
    test input's combination code (8 bytes per input) so `inputs_in(code)` can say which inputs fall
    in a combination.
    """

    name, title = "idc", "Importance-Driven Coverage"
    bookkeeping = ("record_inputs",)

    def __init__(self, layer: str | None = None, neurons=None, m: int | None = None, point: str = "post",
                 conv_neuron: str = "channel-mean", zero_filter: bool | None = None, min_values: int = 10,
                 k_range=(2, 3, 4), n_init: int = 10, silhouette_sample: int | None = 2000, seed: int = 0,
                 rounding: int | None = None, record_inputs: bool = True):
        super().__init__()
        self.layer = layer
        self.neurons = None if neurons is None else np.asarray(neurons, dtype=np.int64).reshape(-1)
        if self.neurons is not None and m is not None and int(m) != len(self.neurons):
            raise WorkbenchError(f"m = {m} but {len(self.neurons)} important neurons were given.",
                                 "Give m important neurons, or leave m out.")
        if m is not None and (isinstance(m, bool) or int(m) < 1):
            raise WorkbenchError(f"m must be a whole number of at least 1; got {m!r}.", "Use m = 6, 8, 10 or 12.")
        self.m = int(m) if m is not None else None
        self.point = point
        self.conv_neuron = conv_neuron
        self.zero_filter = zero_filter
        self.min_values = int(min_values)
        self.k_range = tuple(int(k) for k in k_range)
        self.n_init = int(n_init)
        self.silhouette_sample = None if silhouette_sample is None else int(silhouette_sample)
        self.seed = int(seed)
        self.rounding = rounding
        self.record_inputs = bool(record_inputs)
        self.clusters: list[NeuronClusters] = []
        self.relevance: np.ndarray | None = None  # the important neurons' total relevance, when from importance
        self.reset()

    @property
    def effective_m(self) -> int:
        return len(self.neurons) if self.neurons is not None else (self.m or DEFAULT_M)

    def use_importance(self, importance, cls: int | None = None) -> "IDC":
        """Take the top-m neurons of an `ImportanceResult` (of class `cls` in per-class mode).
        A class without correctly classified inputs gives an empty model, reported as such."""
        m = self.effective_m
        self.neurons = np.asarray(importance.top(m, cls), dtype=np.int64)
        totals = importance.totals if cls is None else importance.per_class[cls]
        self.relevance = np.asarray(totals, dtype=np.float64)[self.neurons]
        self.m = m
        if self.layer is None:
            self.layer = importance.layer
        return self

    # --- fitting ---------------------------------------------------------------------------------

    def _start_fit(self):
        if self.neurons is None:
            raise WorkbenchError("IDC needs its important neurons before fitting.",
                                 "Compute neuron importance for the layer and call use_importance(result).")
        self.clusters, self._values, self._zero_filter, self._width = [], [], None, None
        self._given_clusters = None

    def _layer_values(self, layers: dict[str, np.ndarray]) -> tuple[np.ndarray, bool]:
        raw = next(iter(layers.values())) if self.layer is None else layers[self.layer]
        values = neuron_values(raw, self.conv_neuron)
        if self._width is None:
            self._width = int(values.shape[1])
        elif values.shape[1] != self._width:
            raise WorkbenchError(f"The activations have {values.shape[1]} neurons, the fitted layer {self._width}.",
                                 "Pass activations of the layer IDC was fitted on.")
        if len(self.neurons) and int(self.neurons.max()) >= values.shape[1]:
            where = f" of layer {self.layer!r}" if self.layer else ""
            if self.effective_m > values.shape[1]:
                raise WorkbenchError(f"m = {self.effective_m} is larger than the {values.shape[1]} neurons{where}.",
                                     f"Choose m between 1 and {values.shape[1]}, or a layer with more neurons.")
            raise WorkbenchError(f"Important neuron {int(self.neurons.max())} does not exist: the layer{where} has "
                                 f"{values.shape[1]} neurons.", "Compute importance for this layer again.")
        chosen = values[:, self.neurons]
        if chosen.dtype.kind == "f" and not np.isfinite(chosen).all():
            raise WorkbenchError(f"Layer {self.layer or ''!r} has NaN or infinite activations.",
                                 "Check the model and the input scaling.")
        return chosen, raw.ndim == 2

    def _partial_fit(self, layers, labels, predictions):
        chosen, dense = self._layer_values(layers)
        if self._zero_filter is None:
            self._zero_filter = (dense and self.point == "post") if self.zero_filter is None else bool(self.zero_filter)
        if labels is not None and predictions is not None:  # the correctly classified inputs only
            chosen = chosen[labels == predictions]
        self._values.append(np.asarray(chosen))

    def _merge_fit(self, other):
        self._values.extend(other._values)
        if self._zero_filter is None:
            self._zero_filter = other._zero_filter
        if self._width is None:
            self._width = other._width

    def clustering_inputs(self) -> tuple[np.ndarray, dict]:
        """What `finish_fit` clusters, gathered so far: (inputs, m) values of the important neurons and the
        options of `cluster_neuron`. Each neuron is clustered on its own, so a fit in shards clusters them
        as shards and hands the results over with `use_clusters`."""
        m = len(self.neurons)
        values = np.concatenate(self._values) if self._values else np.zeros((0, m))
        self._values = [values]
        return values, {"k_range": self.k_range, "zero_filter": bool(self._zero_filter),
                        "min_values": self.min_values, "silhouette_sample": self.silhouette_sample,
                        "seed": self.seed, "n_init": self.n_init, "rounding": self.rounding}

    def use_clusters(self, clusters: list) -> None:
        """Each important neuron's `NeuronClusters`, computed from `clustering_inputs` elsewhere: the next
        `finish_fit` takes them instead of clustering here."""
        if len(clusters) != len(self.neurons):
            raise WorkbenchError(f"{len(clusters)} neurons' clusters were given for {len(self.neurons)} neurons.",
                                 "Cluster every important neuron.")
        self._given_clusters = list(clusters)

    def _finish_fit(self):
        values, options = self.clustering_inputs()
        self._values = []
        self.train_inputs = int(len(values))
        given, self._given_clusters = self._given_clusters, None
        self.clusters = given if given is not None else [
            cluster_neuron(values[:, j], int(n), check=self._check, **options) for j, n in enumerate(self.neurons)]
        self._zero_filter_used = options["zero_filter"]
        self._build()
        self._report()

    def _build(self):
        self.radix = MixedRadix([c.k for c in self.clusters])
        self._centroids = [c.centroids for c in self.clusters]

    def _report(self):
        if not len(self.neurons):
            self._warnings.append("No important neurons (a class without correctly classified training inputs): "
                                  "IDC is undefined here.")
            return
        if self.train_inputs == 0:
            self._warnings.append("No correctly classified training inputs: every neuron has the single centroid 0.0.")
        for c in self.clusters:
            if c.reason == "few-values":
                self._warnings.append(f"neuron {c.neuron}: only {c.values} training value(s) left "
                                      f"(< {self.min_values}) → the single centroid 0.0; it cannot tell inputs apart")
            elif c.reason == "no-valid-k":
                self._warnings.append(f"neuron {c.neuron}: constant on the training inputs → one cluster at "
                                      f"{c.centroids[0]:.4g}; it cannot tell inputs apart")

    # --- the fitted model -------------------------------------------------------------------------

    @property
    def centroids(self) -> list[np.ndarray]:
        """Per important neuron, its centroids ascending."""
        return list(self._centroids)

    @property
    def cluster_counts(self) -> np.ndarray:
        return self.radix.radices.copy()

    @property
    def incc_size(self) -> int:
        """|INCC| = Π k_n (0 for an empty model)."""
        return self.radix.size if len(self.neurons) else 0

    @property
    def empty(self) -> bool:
        return self.neurons is None or not len(self.neurons)

    def k_histogram(self) -> dict[int, int]:
        """How many neurons got each number of clusters (silhouette picks k = 2 for most,
        docs/methods/idc.md#expected-behaviour)."""
        ks, n = np.unique([c.k for c in self.clusters], return_counts=True)
        return {int(k): int(c) for k, c in zip(ks, n)}

    # --- measuring ---------------------------------------------------------------------------------

    def _codes(self, layers) -> np.ndarray:
        chosen, _ = self._layer_values(layers)
        if self.empty:
            return np.full(len(chosen), -1, dtype=np.int64)
        index = np.stack([nearest_centroid(chosen[:, j], c) for j, c in enumerate(self._centroids)], axis=1)
        return self.radix.encode(index)

    def _profile(self, layers, labels, predictions) -> np.ndarray:
        """(B,) the combination code each input covers (−1 for an empty model)."""
        return self._codes(layers)

    def _update(self, layers, labels, predictions):
        codes = self._codes(layers)
        if not self.empty:
            self.counter.add(codes)
        if self.record_inputs:
            self._input_codes.append(codes)

    def _reset_cover(self):
        self.counter = CodeCounter(self.radix.size if self.fitted and not self.empty else 0)
        self._input_codes: list[np.ndarray] = []

    def coverage(self) -> CoverageValue:
        if self.empty:
            return CoverageValue(None, 0, 0)
        return CoverageValue.of(self.counter.distinct, self.incc_size)

    def covered(self) -> tuple[np.ndarray, np.ndarray]:
        """(codes, counts): the covered combinations, codes ascending, and how many inputs fell in each."""
        return self.counter.items()

    def combinations(self, codes) -> np.ndarray:
        """(n, m) centroid indices of each code."""
        return self.radix.decode(codes)

    def centroid_values(self, codes) -> np.ndarray:
        """(n, m) the centroid values a combination stands for."""
        index = self.combinations(codes)
        return np.stack([self._centroids[j][index[:, j]] for j in range(len(self._centroids))], axis=1) \
            if len(self._centroids) else np.zeros((len(index), 0))

    @property
    def input_codes(self) -> np.ndarray:
        """(inputs seen,) the combination code of each test input, in order (needs `record_inputs`)."""
        if not self.record_inputs:
            raise WorkbenchError("This IDC did not record which inputs fall in each combination.",
                                 "Measure again with record_inputs=True.")
        if len(self._input_codes) > 1:
            self._input_codes = [np.concatenate(self._input_codes)]
        return self._input_codes[0] if self._input_codes else np.zeros(0, dtype=np.int64)

    def inputs_in(self, code: int) -> np.ndarray:
        """Indices (in update order) of the test inputs that fall in combination `code`."""
        return np.flatnonzero(self.input_codes == int(code))

    def layout(self, split: int | None = None) -> Layout:
        """The 2-D matrix of combinations: rows = the first m // 2 neurons' index tuples, columns = the rest."""
        self._require_fit()
        return layout(self.neurons, self.radix, self.counter, split)

    def matrix(self) -> np.ndarray:
        """`layout().counts`: inputs per combination, rows × columns."""
        return self.layout().counts

    # --- state -------------------------------------------------------------------------------------

    def _fit_state(self):
        meta = {"clusters": [c.to_dict() for c in self.clusters], "train_inputs": self.train_inputs,
                "zero_filter_used": self._zero_filter_used, "width": self._width}
        arrays = {"neurons": self.neurons}
        if self.relevance is not None:
            arrays["relevance"] = self.relevance
        return meta, arrays

    def _load_fit_state(self, meta, arrays):
        self.clusters = [NeuronClusters.from_dict(c) for c in meta["clusters"]]
        self.train_inputs = int(meta["train_inputs"])
        self._zero_filter_used = bool(meta["zero_filter_used"])
        self._zero_filter = self._zero_filter_used
        self._width = meta.get("width")
        self.relevance = np.asarray(arrays["relevance"], dtype=np.float64) if "relevance" in arrays else None
        self._build()

    def _cover_state(self):
        codes, counts = self.counter.items()
        arrays = {"codes": codes, "counts": counts}
        if self.record_inputs:
            arrays["input_codes"] = self.input_codes
        return {}, arrays

    def _merge_cover_state(self, meta, arrays):
        if not self.empty:
            self.counter.add_counts(arrays["codes"], arrays["counts"])
        if self.record_inputs and "input_codes" in arrays:
            self._input_codes.append(np.asarray(arrays["input_codes"], dtype=np.int64))

    def _load_cover_state(self, meta, arrays):
        if not self.empty:
            self.counter.load({"codes": arrays["codes"], "counts": arrays["counts"]})
        if self.record_inputs and "input_codes" in arrays:
            self._input_codes = [np.asarray(arrays["input_codes"], dtype=np.int64)]
