"""The shape every coverage criterion has: a small object shaped like a scikit-learn estimator.

A criterion is configured in `__init__` (every parameter kept as an attribute of the same name, as in
scikit-learn), learns what it needs from training activations with `partial_fit` batch by batch and
`finish_fit` once (or `fit` on arrays in one go), then takes test batches with `update`, which never
lowers coverage. `coverage()` gives a `CoverageValue`; `profile()` says which items each input of a
batch covers, without changing the state; `matrix()` is the 2-D array a view shows.

Activations are passed per layer as a mapping `{layer name: raw output}` — (B, C, H, W) for conv
outputs, (B, F) for dense ones — or as one bare array for a one-layer criterion. Each criterion
reduces conv outputs to neuron values itself (`neuron_values`), because some need more than the
channel means (NC's layer-wise scaling, docs/methods/classic-criteria.md#nc).

`state_dict()` is a plain dict of JSON data and named arrays. It records the criterion's identity —
its parameters plus the context it was bound to (model fingerprint, data) — and a hash of it;
`load_state_dict` refuses a state whose hash differs, naming what differs, so a state saved for
another model or layer is never silently reused.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.models.layers import pooled_neurons

STATE_FORMAT = "workbench-criterion-state"
STATE_VERSION = 1


@dataclass(frozen=True)
class CoverageValue:
    """Coverage as covered items of `total`; `fraction` in [0, 1].

    `total` and `fraction` are None for a count without a denominator (TKNP, width-bucket SC). In
    per-class mode `fraction` is the mean of the per-class fractions (the paper's protocol), which
    need not equal covered/total.
    """

    fraction: float | None
    covered: int
    total: int | None

    @classmethod
    def of(cls, covered: int, total: int | None) -> "CoverageValue":
        fraction = (covered / total if total else 0.0) if total is not None else None
        return cls(fraction, int(covered), None if total is None else int(total))

    @property
    def percent(self) -> float | None:
        return None if self.fraction is None else 100.0 * self.fraction

    def to_dict(self) -> dict:
        return {"fraction": self.fraction, "covered": self.covered, "total": self.total}

    def __str__(self) -> str:
        if self.total is None:
            return f"{self.covered}"
        if self.fraction is None:
            return f"undefined ({self.covered}/{self.total})"
        return f"{self.covered}/{self.total} ({self.percent:.2f} %)"


def as_layers(acts, layers: list[str] | None = None) -> dict[str, np.ndarray]:
    """Activations as `{layer: array}`; a bare array stands for the criterion's only layer."""
    if isinstance(acts, Mapping):
        out = {str(k): _numpy(v) for k, v in acts.items()}
        if layers is not None:
            missing = [name for name in layers if name not in out]
            if missing:
                raise WorkbenchError(f"Activations of layer(s) {', '.join(missing)} are missing.",
                                     f"Pass activations for {', '.join(layers)}; got {', '.join(out) or 'none'}.")
            out = {name: out[name] for name in layers}
        return out
    if layers is not None and len(layers) > 1:
        raise WorkbenchError(f"One activation array was given for {len(layers)} layers.",
                             "Pass a dict {layer name: activations}.")
    return {layers[0] if layers else "": _numpy(acts)}


def _numpy(a) -> np.ndarray:
    if hasattr(a, "detach"):  # a torch tensor
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    if a.ndim < 2:
        raise WorkbenchError(f"Activations must have a batch dimension and at least one neuron; got shape {a.shape}.",
                             "Pass arrays shaped (inputs, neurons) or (inputs, channels, height, width).")
    return a


def neuron_values(raw: np.ndarray, conv_neuron: str = "channel-mean") -> np.ndarray:
    """(B, neurons) from a raw layer output: a conv channel's spatial mean (in float64), or every element.

    For conv outputs a neuron is a channel and its value the spatial mean
    (docs/methods/classic-criteria.md#neurons-layers-and-presets); with
    `conv_neuron="element"` every (c, h, w) is a neuron (dnn-tip flattens conv tensors this way).
    Dense outputs are returned as they are.
    """
    return pooled_neurons(raw, conv_neuron)


def batch_size_of(layers: dict[str, np.ndarray], labels=None, predictions=None) -> int:
    sizes = {len(a) for a in layers.values()}
    if len(sizes) != 1:
        raise WorkbenchError(f"The layers' activations hold different numbers of inputs: {sorted(sizes)}.",
                             "Pass activations of the same inputs for every layer.")
    n = sizes.pop()
    for what, arr in (("labels", labels), ("predictions", predictions)):
        if arr is not None and len(arr) != n:
            raise WorkbenchError(f"{len(arr)} {what} were given for {n} inputs.", f"Pass one of the {what} per input.")
    return n


def identity_hash(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Criterion(ABC):
    """Base class of coverage criteria. Subclasses set `name`, take their parameters in `__init__`
    (calling `super().__init__()` first, and `self.reset()` last) and implement the `_` hooks below."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    needs_fit: ClassVar[bool] = True
    # parameters that change what is kept for views, not what is measured: left out of the identity
    bookkeeping: ClassVar[tuple[str, ...]] = ()

    def __init__(self):
        self.context: dict[str, Any] = {}
        self.fitted = not self.needs_fit
        self.inputs_seen = 0
        self._warnings: list[str] = []

    # --- parameters and identity ---------------------------------------------------------------

    def get_params(self) -> dict:
        """The `__init__` parameters with their current values (scikit-learn convention)."""
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {p: _plain(getattr(self, p)) for p in names}

    def bind(self, **context) -> "Criterion":
        """Record what the criterion's state belongs to (model fingerprint, dataset, …); part of its identity."""
        self.context.update({k: _plain(v) for k, v in context.items()})
        return self

    @property
    def identity(self) -> dict:
        params = {k: v for k, v in self.get_params().items() if k not in self.bookkeeping}
        return {"criterion": self.name, "params": params, "context": dict(self.context)}

    @property
    def identity_hash(self) -> str:
        return identity_hash(self.identity)

    # --- fitting ---------------------------------------------------------------------------------

    def fit(self, acts, labels=None, predictions=None) -> "Criterion":
        """Fit on all training activations at once (`partial_fit` + `finish_fit`)."""
        self.start_fit()
        self.partial_fit(acts, labels, predictions)
        return self.finish_fit()

    def start_fit(self) -> "Criterion":
        """Forget any earlier fit and coverage."""
        self.fitted = not self.needs_fit
        self._warnings = []
        self._start_fit()
        self.reset()
        return self

    def partial_fit(self, acts, labels=None, predictions=None) -> "Criterion":
        """Take one batch of training activations (with their labels and the model's predictions)."""
        if self.needs_fit:
            layers = as_layers(acts, self._layer_names())
            batch_size_of(layers, labels, predictions)
            self._partial_fit(layers, as_int64(labels), as_int64(predictions))
        return self

    def finish_fit(self, check: Callable[[], None] | None = None) -> "Criterion":
        """Turn what `partial_fit` gathered into the fitted model; coverage starts empty.

        `check` (a job's `ctx.check`) is called between the long steps of a fit (IDC's k-means per
        neuron and k), so a cancelled job stops within a step, not after the whole fit."""
        self._check = check or _no_check
        try:
            if self.needs_fit:
                self._finish_fit()
        finally:
            self._check = _no_check  # a job's check is not kept: the fitted criterion goes into results
        self.fitted = True
        self.reset()
        return self

    # --- measuring -------------------------------------------------------------------------------

    def update(self, acts, labels=None, predictions=None) -> "Criterion":
        """Add a batch of test inputs; coverage never decreases."""
        self._require_fit()
        layers = as_layers(acts, self._layer_names())
        n = batch_size_of(layers, labels, predictions)
        self._update(layers, as_int64(labels), as_int64(predictions))
        self.inputs_seen += n
        return self

    def profile(self, acts, labels=None, predictions=None) -> np.ndarray:
        """Which items each input of the batch covers (first axis: input); the state is unchanged."""
        self._require_fit()
        layers = as_layers(acts, self._layer_names())
        batch_size_of(layers, labels, predictions)
        return self._profile(layers, as_int64(labels), as_int64(predictions))

    def reset(self) -> "Criterion":
        """Forget the covered items, keep the fit."""
        self.inputs_seen = 0
        self._reset_cover()
        return self

    @abstractmethod
    def coverage(self) -> CoverageValue:
        """Covered and total items so far."""

    def layer_coverage(self) -> dict[str, CoverageValue] | None:
        """Covered and total items of each layer, in layer order, for a criterion whose items each belong
        to one layer (their sums are `coverage()`'s counts); None for one whose items span the layers."""
        return None

    def matrix(self) -> np.ndarray:
        """A 2-D array for views (its meaning is documented per criterion); optional for plugins."""
        raise self._unsupported("give a matrix for the views", "matrix()")

    @property
    def warnings(self) -> list[str]:
        """Things the user should know about this result (never-coverable neurons, skipped values)."""
        return list(self._warnings)

    def _require_fit(self):
        if not self.fitted:
            raise WorkbenchError(f"{self.title or self.name} is not fitted yet.",
                                 "Fit it on training activations first (fit, or partial_fit then finish_fit).")

    # --- state -----------------------------------------------------------------------------------

    def state_dict(self, include_cover: bool = True) -> dict:
        """A plain dict: identity, JSON `meta` and named `arrays` ("fit.*" and "cover.*")."""
        meta: dict = {"fitted": self.fitted, "warnings": list(self._warnings)}
        arrays: dict[str, np.ndarray] = {}
        if self.fitted and self.needs_fit:
            fit_meta, fit_arrays = self._fit_state()
            meta["fit"] = fit_meta
            arrays.update({f"fit.{k}": v for k, v in fit_arrays.items()})
        if include_cover and self.fitted:
            cover_meta, cover_arrays = self._cover_state()
            meta["cover"] = {**cover_meta, "inputs_seen": self.inputs_seen}
            arrays.update({f"cover.{k}": v for k, v in cover_arrays.items()})
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "criterion": self.name,
                "identity": self.identity, "identity_hash": self.identity_hash, "meta": meta, "arrays": arrays}

    def load_state_dict(self, state: dict) -> "Criterion":
        """Restore a saved state; refused (WorkbenchError) when it was made for another identity."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise WorkbenchError("This is not a saved coverage-criterion state.", "Choose a criterion state file.")
        if int(state.get("version", 0)) > STATE_VERSION:
            raise WorkbenchError("This criterion state was saved by a newer workbench.", "Update the workbench.")
        if state.get("criterion") != self.name:
            raise WorkbenchError(f"The saved state is of criterion {state.get('criterion')!r}, not {self.name!r}.",
                                 f"Load it into a {state.get('criterion')} criterion.")
        if state.get("identity_hash") != self.identity_hash:
            differences = _differences(state.get("identity", {}), self.identity)
            raise WorkbenchError(
                f"The saved {self.name} state was made for a different setup ({differences}).",
                "Its recorded hash does not match this model, layer and options; measure coverage again for them.")
        meta, arrays = state["meta"], state["arrays"]
        self._warnings = list(meta.get("warnings", []))
        if self.needs_fit and meta.get("fitted"):
            self._load_fit_state(meta["fit"], prefixed(arrays, "fit."))
        self.fitted = bool(meta.get("fitted"))
        self.reset()
        if "cover" in meta:
            self._load_cover_state(meta["cover"], prefixed(arrays, "cover."))
            self.inputs_seen = int(meta["cover"].get("inputs_seen", 0))
        return self

    # --- merging the shards of a set ------------------------------------------------------------

    @property
    def mergeable(self) -> bool:
        """Whether the states of shards of a set merge into the state of the whole set (`merge_cover`,
        and `merge_fit` for a criterion that is fitted): what running on a cluster needs."""
        cls = type(self)
        return cls._merge_cover_state is not Criterion._merge_cover_state and \
            (not self.needs_fit or cls._merge_fit is not Criterion._merge_fit)

    def cover_state(self) -> dict:
        """What this criterion covered, as `state_dict` saves it ({"meta", "arrays"}, no fit): what a
        shard sends back."""
        self._require_fit()
        meta, arrays = self._cover_state()
        return {"meta": {**meta, "inputs_seen": self.inputs_seen}, "arrays": dict(arrays)}

    def merge_cover(self, state: dict) -> "Criterion":
        """Add a `cover_state` of this criterion (fitted alike) measured on the inputs after the ones it
        has seen: afterwards the state is the one a single pass over both, in order, leaves (covered
        items united, counts summed, per-input records appended)."""
        self._require_fit()
        self._merge_cover_state(state["meta"], state["arrays"])
        self.inputs_seen += int(state["meta"].get("inputs_seen", 0))
        return self

    def merge_fit(self, other: "Criterion") -> "Criterion":
        """Add the training activations `other` (this criterion, between `start_fit` and `finish_fit`)
        gathered from the inputs after the ones this one gathered, before `finish_fit`."""
        if other.name != self.name or other.get_params() != self.get_params():
            raise WorkbenchError(f"A {other.name} fit cannot be merged into a {self.name} fit with other options.",
                                 "Merge shards of one criterion.")
        if self.needs_fit:
            self._merge_fit(other)
        return self

    # --- hooks for subclasses -------------------------------------------------------------------

    def _layer_names(self) -> list[str] | None:
        layers = getattr(self, "layers", None)
        if layers is None and getattr(self, "layer", None) is not None:
            return [self.layer]
        return list(layers) if layers is not None else None

    def _start_fit(self): ...

    def _partial_fit(self, layers: dict[str, np.ndarray], labels, predictions): ...

    def _finish_fit(self): ...

    @abstractmethod
    def _update(self, layers: dict[str, np.ndarray], labels, predictions):
        """Mark what a batch covers."""

    def _profile(self, layers: dict[str, np.ndarray], labels, predictions) -> np.ndarray:
        """Which items each input of a batch covers, without changing the state; optional for plugins."""
        raise self._unsupported("say which items each input covers", "_profile()")

    @abstractmethod
    def _reset_cover(self):
        """Forget the covered items."""

    def _fit_state(self) -> tuple[dict, dict]:
        return {}, {}

    def _load_fit_state(self, meta: dict, arrays: dict): ...

    def _cover_state(self) -> tuple[dict, dict]:
        """(JSON metadata, arrays) of the covered items, for `state_dict`; optional for plugins."""
        raise self._unsupported("save what it covered", "_cover_state() and _load_cover_state()")

    def _load_cover_state(self, meta: dict, arrays: dict):
        """Restore what `_cover_state` returned."""
        raise self._unsupported("restore what it covered", "_cover_state() and _load_cover_state()")

    def _merge_cover_state(self, meta: dict, arrays: dict):
        """Add a shard's `_cover_state` (see `merge_cover`); optional for plugins."""
        raise self._unsupported("merge the coverage of shards", "_merge_cover_state()")

    def _merge_fit(self, other: "Criterion"):
        """Add what `other`'s `partial_fit` gathered (see `merge_fit`); optional for plugins."""
        raise self._unsupported("merge the fits of shards", "_merge_fit()")

    def _unsupported(self, what: str, methods: str) -> WorkbenchError:
        """The error for an optional capability this criterion lacks (a minimal plugin need not have it)."""
        return WorkbenchError(f"Criterion {getattr(self, 'name', type(self).__name__)!r} cannot {what}.",
                              f"The criterion's author can add {methods}; the other criteria can.")


def _no_check() -> None:
    """A fit nobody can cancel."""


MAX_SECTIONS = 100_000  # sections, buckets or top-k per neuron: more would allocate without bound


def option_count(value, what: str, default: int, high: int = MAX_SECTIONS) -> int:
    """A criterion's whole-number option in [1, high]: 2.5, text or 10¹² are refused, naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or \
            not float(value).is_integer():
        raise WorkbenchError(f"{what} must be a whole number; got {value!r}.", f"Use {what} = {default}.")
    if not 1 <= value <= high:
        raise WorkbenchError(f"{what} = {value:g} is outside 1–{high:,}.", f"Use {what} = {default}.")
    return int(value)


def option_number(value, what: str, default: float) -> float:
    """A criterion's real-valued option: a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or \
            not np.isfinite(value):
        raise WorkbenchError(f"{what} must be a finite number; got {value!r}.", f"Use {what} = {default}.")
    return float(value)


def as_int64(a):
    """Labels or predictions (a tensor, an array or None) as an int64 array."""
    return None if a is None else np.asarray(a.detach().cpu() if hasattr(a, "detach") else a).astype(np.int64)


def prefixed(arrays: dict, prefix: str) -> dict:
    """The arrays whose keys start with `prefix`, with the prefix taken off."""
    return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}


def _plain(v):
    """Parameters as JSON-able data (tuples → lists, numpy scalars/arrays → Python)."""
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return v


def _differences(saved: dict, current: dict) -> str:
    """A short list of what differs between two identities: 'context.model: a ≠ b, params.m: 6 ≠ 8'."""
    diffs = []
    for part in ("criterion", "params", "context"):
        a, b = saved.get(part), current.get(part)
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                if a.get(key) != b.get(key):
                    diffs.append(f"{key}: saved {_short(a.get(key))}, now {_short(b.get(key))}")
        elif a != b:
            diffs.append(f"{part}: saved {_short(a)}, now {_short(b)}")
    return "; ".join(diffs) or "identity hash differs"


def _short(v) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 40 else text[:37] + "…"
