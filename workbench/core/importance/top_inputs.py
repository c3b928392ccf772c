"""Per neuron of a layer, the k inputs of a split that rank highest by relevance and by activation.

Importance already streams over the split with every input's relevance per neuron at hand (and,
in the same forward pass, its activation), so it keeps these few rows as it goes; a neuron's
gallery is then a lookup of k inputs instead of another pass over the split
(docs/methods/importance.md#neuron-gallery).

Two rankings, each with the same columns: `index` (the input's position in the split),
`relevance` (R_n(x) from the predicted logit, misclassified inputs included), `activation` (the
neuron's value as the `NeuronDefinition` says) and `prediction`. Largest score first; ties go to
the lower input index — exactly the order a full scan sorted by (−score, index) gives. The state
is (neurons, k) per column, so nothing grows with the number of inputs, and two sets kept over
disjoint inputs merge into the set over both (shards).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.core.errors import WorkbenchError

RANKINGS = ("relevance", "activation")
COLUMNS = ("index", "relevance", "activation", "prediction")
_DTYPES = {"index": np.int64, "relevance": np.float64, "activation": np.float64, "prediction": np.int64}


def array_name(ranking: str, column: str) -> str:
    """The name an importance artifact stores one kept column under."""
    return f"top_by_{ranking}_{column}"


@dataclass
class NeuronTop:
    """One neuron's kept inputs: `columns[ranking][column]` is a (k,) array, best first. `inputs` is how
    many inputs were ranked; `layer` and `split` say where they come from."""

    neuron: int
    layer: str
    split: str
    inputs: int
    columns: dict[str, dict[str, np.ndarray]]

    @property
    def kept(self) -> int:
        return len(self.columns["relevance"]["index"])


class TopInputs:
    """The running top-k inputs of every neuron of a layer, by relevance and by activation."""

    def __init__(self, k: int, neurons: int, layer: str = "", split: str = ""):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise WorkbenchError(f"The number of inputs kept per neuron must be at least 1; got {k!r}.",
                                 "Keep 16, for instance.")
        self.k, self.neurons, self.layer, self.split = int(k), int(neurons), layer, split
        self.inputs = 0  # how many inputs have been offered
        self.columns = {ranking: {column: np.zeros((self.neurons, 0), _DTYPES[column]) for column in COLUMNS}
                        for ranking in RANKINGS}

    def offer(self, positions, relevance, activation, prediction) -> None:
        """Take a batch: `positions` (B,) input indices, `relevance` and `activation` (B, neurons),
        `prediction` (B,)."""
        relevance = np.asarray(relevance, np.float64)
        activation = np.asarray(activation, np.float64)
        if relevance.shape != activation.shape or relevance.shape[1:] != (self.neurons,):
            raise ValueError(f"relevance {relevance.shape} and activation {activation.shape} must be "
                             f"(inputs, {self.neurons})")
        if not (np.isfinite(relevance).all() and np.isfinite(activation).all()):
            raise WorkbenchError(f"Relevance or activations of layer {self.layer!r} are NaN or infinite.",
                                 "Check the model's weights and inputs for extreme values.")
        size = len(relevance)
        batch = {"index": np.asarray(positions, np.int64), "prediction": np.asarray(prediction, np.int64),
                 "relevance": np.ascontiguousarray(relevance.T),  # (neurons, B), like the kept columns
                 "activation": np.ascontiguousarray(activation.T)}
        batch = {name: np.broadcast_to(values, (self.neurons, size)) for name, values in batch.items()}
        self._keep(batch)
        self.inputs += size

    def merge(self, other: "TopInputs") -> "TopInputs":
        """The top-k over the inputs of both (kept over disjoint inputs, as shards are)."""
        if (other.k, other.neurons) != (self.k, self.neurons):
            raise ValueError("only top inputs of the same layer and k merge")
        merged = TopInputs(self.k, self.neurons, self.layer, self.split)
        merged.columns = {ranking: dict(columns) for ranking, columns in self.columns.items()}
        merged.inputs = self.inputs + other.inputs
        for ranking in RANKINGS:
            merged._keep(other.columns[ranking], only=ranking)
        return merged

    def _keep(self, candidates: dict[str, np.ndarray], only: str | None = None) -> None:
        """Replace each ranking's kept rows by the best k of them and `candidates` ((neurons, B) columns).

        Only a candidate at least as large as a neuron's k-th kept score can enter its list, so once
        the lists are full only the neurons such a candidate reaches are sorted again, with just those
        few candidates: after the first batches, most of a batch reaches none."""
        size = candidates["index"].shape[1]
        if size == 0:
            return
        for ranking in RANKINGS if only is None else (only,):
            kept = self.columns[ranking]
            k0 = kept["index"].shape[1]
            new_scores = candidates[ranking]
            if k0 >= self.k:
                # A tie with the k-th kept enters only with a lower index (a dead unit ties everywhere at 0).
                threshold = kept[ranking][:, -1:]
                enters = (new_scores > threshold) | ((new_scores == threshold) &
                                                     (candidates["index"] < kept["index"][:, -1:]))
            else:  # still filling: each neuron's k-th largest of the kept and the new together
                m = k0 + size
                kk = min(self.k, m)
                threshold = np.partition(np.concatenate([kept[ranking], new_scores], axis=1), m - kk,
                                         axis=1)[:, m - kk:m - kk + 1]
                enters = new_scores >= threshold
            rows, cols = np.divmod(np.flatnonzero(enters), size)
            if len(rows) == 0:
                continue
            touched = np.arange(self.neurons) if k0 < self.k else np.unique(rows)  # filling: every list grows
            owner = np.concatenate([np.repeat(np.arange(len(touched)), k0), np.searchsorted(touched, rows)])
            values = {name: np.concatenate([kept[name][touched].ravel(), candidates[name][rows, cols]])
                      for name in COLUMNS}
            order = np.lexsort((values["index"], -values[ranking], owner))
            kk = min(self.k, k0 + size)
            first = np.searchsorted(owner[order], np.arange(len(touched)))
            chosen = order[first[:, None] + np.arange(kk)]  # every touched neuron has at least kk candidates
            if kk == k0:
                updated = {name: kept[name].copy() for name in COLUMNS}  # kept arrays may be shared (merge)
                for name in COLUMNS:
                    updated[name][touched] = values[name][chosen]
                self.columns[ranking] = updated
            else:
                self.columns[ranking] = {name: values[name][chosen] for name in COLUMNS}

    def neuron(self, neuron: int) -> NeuronTop:
        """One neuron's rows, small enough to hand to a gallery job."""
        if not 0 <= int(neuron) < self.neurons:
            raise WorkbenchError(f"Layer {self.layer!r} has neurons 0–{self.neurons - 1}; there is no neuron "
                                 f"{neuron!r}.", "Choose a neuron of the layer.")
        n = int(neuron)
        return NeuronTop(n, self.layer, self.split, self.inputs,
                         {ranking: {name: values[n].copy() for name, values in columns.items()}
                          for ranking, columns in self.columns.items()})

    def arrays(self) -> dict[str, np.ndarray]:
        """What an artifact stores: one (neurons, k) array per ranking and column."""
        return {array_name(ranking, name): values for ranking, columns in self.columns.items()
                for name, values in columns.items()}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], k: int, inputs: int, layer: str = "",
                    split: str = "") -> "TopInputs":
        """Rebuild from `arrays()`; arrays of the wrong shape or type raise a `ValueError`."""
        first = arrays[array_name("relevance", "index")]
        top = cls(k, first.shape[0], layer, split)
        for ranking in RANKINGS:
            for name in COLUMNS:
                values = np.asarray(arrays[array_name(ranking, name)])
                if values.shape != first.shape or values.shape[1] > top.k:
                    raise ValueError(f"kept {ranking} {name} has shape {values.shape}, not {first.shape}")
                if (values.dtype.kind in "iu") != (_DTYPES[name] is np.int64) or values.dtype.kind not in "iuf":
                    raise ValueError(f"kept {ranking} {name} holds {values.dtype}")
                top.columns[ranking][name] = values.astype(_DTYPES[name], copy=False)
            if (top.columns[ranking]["index"] < 0).any():
                raise ValueError("a kept input index is negative")
        top.inputs = int(inputs)
        return top
