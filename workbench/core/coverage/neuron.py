"""Classic neuron-level criteria: NC, KMNC, NBC, SNAC, TKNC and TKNP (docs/methods/classic-criteria.md).

All take activations of one or more layers; conv outputs are reduced to channel means by default
(`conv_neuron="element"` makes every element a neuron) and the neurons of all layers are numbered in
layer order. Each keeps a small count array — how many test inputs covered each item — so coverage is
the number of non-zero counts and a view can show how often each item was hit.

`semantics="spec"` (default) follows the corrected definitions of the methods page;
`semantics="dnn-tip"` reproduces dnn-tip 0.1.1 exactly (raw NAC threshold, half-open KMNC sections built from its own
threshold arithmetic, `≥ max` / `≤ min` corners, argsort tie order), for identity tests and for
comparing with papers that used dnn-tip (preset `dnn-tip`;
docs/methods/classic-criteria.md#dnn-tip-semantics).
"""

from __future__ import annotations

import numpy as np

from workbench.core.coverage.protocol import CoverageValue, Criterion, neuron_values, option_count, option_number
from workbench.core.coverage.stats import NeuronStats
from workbench.core.coverage.topk import top_k_mask
from workbench.core.errors import WorkbenchError

SEMANTICS = ("spec", "dnn-tip")


def column_counts(mask: np.ndarray, axis: int = 0) -> np.ndarray:
    """How many True per column of a boolean (B, N) mask; summing its bytes is 3× faster than count_nonzero."""
    return np.add.reduce(mask.view(np.uint8), axis=axis, dtype=np.int32)


class NeuronCriterion(Criterion):
    """What the neuron-level criteria share: layers, the neuron definition and the count arrays."""

    def __init__(self, layers=None, conv_neuron: str = "channel-mean", semantics: str = "spec"):
        super().__init__()
        if semantics not in SEMANTICS:
            raise WorkbenchError(f"Unknown semantics {semantics!r}.", "Use 'spec' or 'dnn-tip'.")
        if conv_neuron not in ("channel-mean", "element"):
            raise WorkbenchError(f"Conv neuron definition {conv_neuron!r} is unknown.",
                                 "Use 'channel-mean' or 'element'.")
        self.layers = [layers] if isinstance(layers, str) else (list(layers) if layers is not None else None)
        self.conv_neuron = conv_neuron
        self.semantics = semantics
        self.layer_sizes: dict[str, int] = {}
        self.reset()

    # --- neurons ----------------------------------------------------------------------------------

    def _values(self, layers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """(B, n) values per layer; the caller's dtype is kept for dnn-tip's argsort tie order."""
        values = {name: neuron_values(raw, self.conv_neuron) for name, raw in layers.items()}
        sizes = {name: int(v.shape[1]) for name, v in values.items()}
        if not self.layer_sizes:
            self.layer_sizes = sizes
        elif sizes != self.layer_sizes:
            raise WorkbenchError(f"The activations have neurons {sizes}, but the criterion was set up for "
                                 f"{self.layer_sizes}.", "Pass activations of the same layers and neuron definition.")
        for name, v in values.items():  # min and max are NaN/±inf exactly when some value is: no boolean copy
            if v.dtype.kind == "f" and v.size and not (np.isfinite(v.min()) and np.isfinite(v.max())):
                raise WorkbenchError(f"Layer {name!r} has NaN or infinite activations.",
                                     "Check the model and the input scaling.")
        return values

    @staticmethod
    def _concat(values: dict[str, np.ndarray], dtype=np.float64) -> np.ndarray:
        """(B, neurons) of all layers; `dtype=None` keeps the values' own type (comparisons with float64
        bounds upcast exactly, so only arithmetic needs float64)."""
        parts = list(values.values())
        if dtype is None:
            return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        return np.concatenate([v.astype(dtype, copy=False) for v in parts], axis=1)

    @property
    def neurons(self) -> int:
        return int(sum(self.layer_sizes.values()))

    def neuron_labels(self) -> list[str]:
        """'layer[i]' for each neuron, in the order of the count arrays."""
        return [f"{name}[{i}]" if name else f"[{i}]" for name, n in self.layer_sizes.items() for i in range(n)]

    # --- state shared by all ------------------------------------------------------------------------

    def _reset_cover(self):
        self._counts = None  # allocated on the first update, once the neuron count is known

    def _counts_for(self, shape) -> np.ndarray:
        if self._counts is None:
            self._counts = np.zeros(shape, dtype=np.int64)
        return self._counts

    def _cover_state(self):
        # layer sizes travel with the coverage too: criteria without a fit learn them on the first update
        return {"layer_sizes": self.layer_sizes}, ({"counts": self._counts} if self._counts is not None else {})

    def _load_cover_state(self, meta, arrays):
        self._counts = arrays.get("counts")
        if meta.get("layer_sizes"):
            self.layer_sizes = {k: int(v) for k, v in meta["layer_sizes"].items()}

    def _merge_cover_state(self, meta, arrays):
        counts = arrays.get("counts")
        if counts is not None:
            counts = np.asarray(counts, dtype=np.int64)
            self._counts = counts.copy() if self._counts is None else self._counts + counts
        if not self.layer_sizes and meta.get("layer_sizes"):
            self.layer_sizes = {k: int(v) for k, v in meta["layer_sizes"].items()}

    def _fit_state(self):
        return {"layer_sizes": self.layer_sizes}, {}

    def _load_fit_state(self, meta, arrays):
        self.layer_sizes = {k: int(v) for k, v in meta["layer_sizes"].items()}

    def matrix(self) -> np.ndarray:
        """Counts of inputs covering each item: (rows, neurons); see each criterion."""
        if self._counts is None:
            return np.zeros((1, self.neurons), dtype=np.int64)
        c = self._counts
        return c.reshape(1, -1) if c.ndim == 1 else c

    # --- per layer ----------------------------------------------------------------------------------

    #: How many items each neuron has (KMNC: its k sections, NBC: its two corners).
    items_per_neuron = 1

    def _covered_items(self) -> np.ndarray | None:
        """(neurons,) how many of each neuron's items are covered; None where items are not per neuron."""
        if self._counts is None:
            return np.zeros(self.neurons, dtype=np.int64)
        return (self._counts.reshape(-1) > 0).astype(np.int64)

    def layer_coverage(self) -> dict[str, CoverageValue] | None:
        """Covered and total items of each layer; they sum to `coverage()`'s counts."""
        covered = self._covered_items()
        if covered is None:
            return None
        out, start = {}, 0
        for name, n in self.layer_sizes.items():
            out[name] = CoverageValue.of(int(covered[start:start + n].sum()), n * self.items_per_neuron)
            start += n
        return out


class NC(NeuronCriterion):
    """Neuron coverage (DeepXplore; docs/methods/classic-criteria.md#nc): a neuron is covered when some input's scaled value
    exceeds `threshold` (0.75). `scaling="layer_elements"` min-max scales each input's whole layer
    tensor and then takes channel means; `"neuron_values"` scales the neuron values across the
    layer's neurons (NLC). An input whose layer is constant covers nothing there. dnn-tip compares
    raw values with the threshold. Matrix: (1, neurons) counts."""

    name, title, needs_fit = "nc", "Neuron Coverage", False

    def __init__(self, threshold: float = 0.75, scaling: str = "layer_elements", layers=None,
                 conv_neuron: str = "channel-mean", semantics: str = "spec"):
        super().__init__(layers, conv_neuron, semantics)
        if scaling not in ("layer_elements", "neuron_values"):
            raise WorkbenchError(f"Unknown NC scaling {scaling!r}.", "Use 'layer_elements' or 'neuron_values'.")
        self.threshold = option_number(threshold, "NC's threshold", 0.75)
        self.scaling = scaling

    def _covered(self, layers) -> tuple[np.ndarray, dict[str, int]]:
        """(B, neurons) bool, and per layer how many inputs were constant there."""
        values = self._values(layers)
        if self.semantics == "dnn-tip":
            return np.concatenate([v > self.threshold for v in values.values()], axis=1), {}
        parts, constant_inputs = [], {}
        for name, raw in layers.items():
            v = values[name].astype(np.float64, copy=False)
            flat = raw.reshape(len(raw), -1) if self.scaling == "layer_elements" else v
            lo = flat.min(axis=1).astype(np.float64)[:, None]
            hi = flat.max(axis=1).astype(np.float64)[:, None]
            span = hi - lo
            constant = span[:, 0] <= 0
            with np.errstate(divide="ignore", invalid="ignore"):
                covered = (v - lo) / span > self.threshold
            covered[constant] = False
            constant_inputs[name] = int(constant.sum())
            parts.append(covered)
        return np.concatenate(parts, axis=1), constant_inputs

    def _profile(self, layers, labels, predictions) -> np.ndarray:
        """(B, neurons) bool: which neurons each input covers."""
        return self._covered(layers)[0]

    def _update(self, layers, labels, predictions):
        covered, constant_inputs = self._covered(layers)
        self._counts_for(covered.shape[1])[:] += column_counts(covered, axis=0)
        for name, n in constant_inputs.items():
            self._constant_inputs[name] = self._constant_inputs.get(name, 0) + n

    def _reset_cover(self):
        super()._reset_cover()
        self._constant_inputs = {}

    def coverage(self) -> CoverageValue:
        covered = 0 if self._counts is None else int(np.count_nonzero(self._counts))
        return CoverageValue.of(covered, self.neurons)

    @property
    def warnings(self) -> list[str]:
        notes = [f"layer {name!r}: {n} input(s) had constant activations there and cover nothing (NC's scaling "
                 "is undefined)" for name, n in self._constant_inputs.items() if n]
        return super().warnings + notes

    def _cover_state(self):
        meta, arrays = super()._cover_state()
        return {**meta, "constant_inputs": self._constant_inputs}, arrays

    def _load_cover_state(self, meta, arrays):
        super()._load_cover_state(meta, arrays)
        self._constant_inputs = {k: int(v) for k, v in meta.get("constant_inputs", {}).items()}

    def _merge_cover_state(self, meta, arrays):
        super()._merge_cover_state(meta, arrays)
        for name, n in meta.get("constant_inputs", {}).items():
            self._constant_inputs[name] = self._constant_inputs.get(name, 0) + int(n)


class _RangeCriterion(NeuronCriterion):
    """A criterion that needs each neuron's training range (and std)."""

    def _start_fit(self):
        self.layer_sizes = {}
        self._stats = NeuronStats()

    def _partial_fit(self, layers, labels, predictions):
        self._stats.add(self._concat(self._values(layers)))

    def _finish_fit(self):
        if self._stats.n == 0:
            raise WorkbenchError(f"{self.title} got no training activations.", "Fit it on the training split.")
        self.low, self.high, self.std = self._stats.min, self._stats.max, self._stats.std
        self.train_inputs = self._stats.n
        self._after_fit()

    def _after_fit(self): ...

    def _merge_fit(self, other):
        self._stats.merge(other._stats)
        self.layer_sizes = self.layer_sizes or dict(other.layer_sizes)

    def _fit_state(self):
        meta, arrays = super()._fit_state()
        return {**meta, "train_inputs": self.train_inputs}, {**arrays, "low": self.low, "high": self.high,
                                                            "std": self.std}

    def _load_fit_state(self, meta, arrays):
        super()._load_fit_state(meta, arrays)
        self.low, self.high, self.std = (np.asarray(arrays[k], dtype=np.float64) for k in ("low", "high", "std"))
        self.train_inputs = int(meta["train_inputs"])
        self._after_fit()


class KMNC(_RangeCriterion):
    """k-multisection neuron coverage (DeepGauge; docs/methods/classic-criteria.md#kmnc), k = 1000.

    Sections are computed in float64 and closed at both ends: `low ≤ v ≤ high` covers section
    min(⌊(v − low)/(high − low)·k⌋, k − 1); values outside the range cover none. A neuron whose
    training range is a single value stays in the denominator and is never covered (reported in
    `never_coverable`). dnn-tip: half-open sections [t_i, t_{i+1}) with t_i = low + ((high − low)/k)·i.
    Matrix: (neurons, k) counts. Profile: (B, neurons) section index, −1 for none.
    """

    name, title = "kmnc", "k-Multisection Neuron Coverage"

    def __init__(self, k: int = 1000, layers=None, conv_neuron: str = "channel-mean", semantics: str = "spec"):
        super().__init__(layers, conv_neuron, semantics)
        self.k = option_count(k, "KMNC's k (sections per neuron)", 1000)

    def _after_fit(self):
        self.never_coverable = np.flatnonzero(~(self.high > self.low))
        self._warnings = [w for w in self._warnings if "can never be covered by KMNC" not in w]
        start = 0
        for name, n in self.layer_sizes.items():  # one line per layer, naming a few of its neurons
            dead = self.never_coverable[(self.never_coverable >= start) & (self.never_coverable < start + n)] - start
            start += n
            if len(dead):
                shown = ", ".join(f"{name}[{i}]" for i in dead[:8]) + (f" and {len(dead) - 8} more" if len(dead) > 8
                                                                        else "")
                self._warnings.append(f"layer {name!r}: {len(dead)} of {n} neurons had one constant value on the "
                                      f"training inputs and can never be covered by KMNC ({shown})")

    def _profile(self, layers, labels, predictions) -> np.ndarray:
        v = self._concat(self._values(layers))
        low, high, k = self.low, self.high, self.k
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.semantics == "spec":
                inside = (v >= low) & (v <= high) & (high > low)
                index = np.floor((v - low) / (high - low) * k)
                index = np.minimum(np.nan_to_num(index, nan=-1.0, posinf=k, neginf=-1.0), k - 1).astype(np.int64)
            else:
                jump = (high - low) / k
                index = np.clip(np.nan_to_num(np.floor((v - low) / jump), nan=0.0, posinf=k, neginf=-1.0),
                                -1, k).astype(np.int64)
                for _ in range(2):  # an estimate off by one through rounding is corrected against dnn-tip's thresholds
                    index -= v < low + jump * index
                    index += v >= low + jump * (index + 1)
                inside = (index >= 0) & (index < k) & (low + jump * index <= v) & (v < low + jump * (index + 1))
        return np.where(inside, index, -1)

    def _update(self, layers, labels, predictions):
        index = self._profile(layers, labels, predictions)
        n = index.shape[1]
        hit = index >= 0
        flat = (np.broadcast_to(np.arange(n) * self.k, index.shape)[hit] + index[hit])
        counts = self._counts_for((n, self.k))
        counts += np.bincount(flat, minlength=n * self.k).reshape(n, self.k)

    def coverage(self) -> CoverageValue:
        covered = 0 if self._counts is None else int(np.count_nonzero(self._counts))
        return CoverageValue.of(covered, self.neurons * self.k)

    @property
    def items_per_neuron(self) -> int:
        return self.k

    def _covered_items(self) -> np.ndarray:
        if self._counts is None:
            return np.zeros(self.neurons, dtype=np.int64)
        return np.count_nonzero(self._counts, axis=1)

    def matrix(self) -> np.ndarray:
        return self._counts if self._counts is not None else np.zeros((self.neurons, self.k), dtype=np.int64)


class _Boundary(_RangeCriterion):
    """Corner regions beyond the training range, with an optional margin of `sigma` stds
    (docs/methods/classic-criteria.md#nbc-and-snac). Default semantics: upper v > high + σ·std, lower v < low − σ·std; dnn-tip: ≥ and ≤."""

    corners = ("lower", "upper")

    def __init__(self, sigma: float = 0.0, layers=None, conv_neuron: str = "channel-mean", semantics: str = "spec"):
        super().__init__(layers, conv_neuron, semantics)
        self.sigma = option_number(sigma, "σ (the boundary's distance in standard deviations)", 0.0)

    def _after_fit(self):
        self.lower_bound = self.low - self.sigma * self.std
        self.upper_bound = self.high + self.sigma * self.std

    def _lower(self, v: np.ndarray) -> np.ndarray:
        return v < self.lower_bound if self.semantics == "spec" else v <= self.lower_bound

    def _upper(self, v: np.ndarray) -> np.ndarray:
        return v > self.upper_bound if self.semantics == "spec" else v >= self.upper_bound

    def _corners(self, layers) -> np.ndarray:
        """(B, neurons, 2) bool: [lower, upper] corner hit."""
        v = self._concat(self._values(layers), dtype=None)
        return np.stack([self._lower(v), self._upper(v)], axis=2)


class NBC(_Boundary):
    """Neuron boundary coverage: (|upper| + |lower|) / 2N. Profile (B, neurons, 2) [lower, upper];
    matrix (2, neurons) counts, rows lower and upper."""

    name, title = "nbc", "Neuron Boundary Coverage"

    def _profile(self, layers, labels, predictions):
        return self._corners(layers)

    def _update(self, layers, labels, predictions):
        v = self._concat(self._values(layers), dtype=None)
        counts = self._counts_for((2, v.shape[1]))
        counts[0] += column_counts(self._lower(v), axis=0)
        counts[1] += column_counts(self._upper(v), axis=0)

    def coverage(self) -> CoverageValue:
        covered = 0 if self._counts is None else int(np.count_nonzero(self._counts))
        return CoverageValue.of(covered, 2 * self.neurons)

    items_per_neuron = 2

    def _covered_items(self) -> np.ndarray:
        if self._counts is None:
            return np.zeros(self.neurons, dtype=np.int64)
        return np.count_nonzero(self._counts, axis=0)

    def matrix(self) -> np.ndarray:
        return self._counts if self._counts is not None else np.zeros((2, self.neurons), dtype=np.int64)


class SNAC(_Boundary):
    """Strong neuron activation coverage: |upper| / N. Profile (B, neurons) bool; matrix (1, neurons)."""

    name, title = "snac", "Strong Neuron Activation Coverage"

    def _profile(self, layers, labels, predictions):
        return self._upper(self._concat(self._values(layers), dtype=None))

    def _update(self, layers, labels, predictions):
        hits = self._profile(layers, labels, predictions)
        self._counts_for(hits.shape[1])[:] += column_counts(hits, axis=0)

    def coverage(self) -> CoverageValue:
        covered = 0 if self._counts is None else int(np.count_nonzero(self._counts))
        return CoverageValue.of(covered, self.neurons)


class TKNC(NeuronCriterion):
    """Top-k neuron coverage (docs/methods/classic-criteria.md#tknc-and-tknp), k = 3: a neuron is
    covered when it is among the k largest of its layer for some input; ties → lower index (dnn-tip:
    its argsort order). Profile (B, neurons) bool; matrix (1, neurons) counts."""

    name, title, needs_fit = "tknc", "Top-k Neuron Coverage", False

    def __init__(self, k: int = 3, layers=None, conv_neuron: str = "channel-mean", semantics: str = "spec"):
        super().__init__(layers, conv_neuron, semantics)
        self.k = option_count(k, "TKNC's k", 3)

    def _profile(self, layers, labels, predictions):
        ties = "argsort" if self.semantics == "dnn-tip" else "lower-index"
        values = self._values(layers)
        return np.concatenate([top_k_mask(v, self.k, ties) for v in values.values()], axis=1)

    def _update(self, layers, labels, predictions):
        mask = self._profile(layers, labels, predictions)
        self._counts_for(mask.shape[1])[:] += column_counts(mask, axis=0)

    def coverage(self) -> CoverageValue:
        covered = 0 if self._counts is None else int(np.count_nonzero(self._counts))
        return CoverageValue.of(covered, self.neurons)


class TKNP(NeuronCriterion):
    """Top-k neuron patterns (docs/methods/classic-criteria.md#tknc-and-tknp): the number of distinct
    patterns, a pattern being the tuple over layers of top-k index *sets* (ties → lower index). A
    count without a denominator. Profile: (B, width) the sorted top-k indices of each layer side by
    side; matrix (1, patterns) counts."""

    name, title, needs_fit = "tknp", "Top-k Neuron Patterns", False

    def __init__(self, k: int = 3, layers=None, conv_neuron: str = "channel-mean"):
        super().__init__(layers, conv_neuron, "spec")
        self.k = option_count(k, "TKNP's k", 3)

    def _profile(self, layers, labels, predictions):
        parts = []
        for v in self._values(layers).values():
            mask = top_k_mask(v, self.k, "lower-index")
            width = min(self.k, v.shape[1])
            parts.append(np.nonzero(mask)[1].reshape(len(v), width))  # row-major: each row's indices ascending
        return np.concatenate(parts, axis=1).astype(np.int32)

    def _update(self, layers, labels, predictions):
        rows = self._profile(layers, labels, predictions)
        if len(rows):
            self._add_patterns(rows, np.ones(len(rows), np.int64))

    def _add_patterns(self, rows: np.ndarray, counts: np.ndarray) -> None:
        merged = rows if self._patterns is None else np.concatenate([self._patterns, rows])
        weights = counts if self._patterns is None else np.concatenate([self._pattern_counts, counts])
        self._patterns, inverse = np.unique(merged, axis=0, return_inverse=True)
        self._pattern_counts = np.bincount(inverse.reshape(-1), weights=weights).astype(np.int64)

    def _merge_cover_state(self, meta, arrays):
        if not self.layer_sizes and meta.get("layer_sizes"):
            self.layer_sizes = {k: int(v) for k, v in meta["layer_sizes"].items()}
        if "patterns" in arrays and len(arrays["patterns"]):
            self._add_patterns(np.asarray(arrays["patterns"], dtype=np.int32),
                               np.asarray(arrays["pattern_counts"], dtype=np.int64))

    def _reset_cover(self):
        super()._reset_cover()
        self._patterns, self._pattern_counts = None, np.zeros(0, np.int64)

    @property
    def patterns(self) -> np.ndarray:
        """(P, width) the distinct patterns seen, and `pattern_counts` how many inputs had each."""
        return self._patterns if self._patterns is not None else np.zeros((0, 0), np.int32)

    @property
    def pattern_counts(self) -> np.ndarray:
        return self._pattern_counts

    def coverage(self) -> CoverageValue:
        return CoverageValue.of(len(self.patterns), None)

    def _covered_items(self) -> None:
        return None  # a pattern spans the layers: no layer has patterns of its own

    def matrix(self) -> np.ndarray:
        return self._pattern_counts.reshape(1, -1)

    def _cover_state(self):
        meta, _ = super()._cover_state()
        if self._patterns is None:
            return meta, {}
        return meta, {"patterns": self._patterns, "pattern_counts": self._pattern_counts}

    def _load_cover_state(self, meta, arrays):
        super()._load_cover_state(meta, {})
        if "patterns" in arrays:
            self._patterns = np.asarray(arrays["patterns"], dtype=np.int32)
            self._pattern_counts = np.asarray(arrays["pattern_counts"], dtype=np.int64)
