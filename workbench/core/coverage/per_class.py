"""Per-class mode for any criterion: one criterion per class, inputs routed by class.

Methods: docs/methods/idc.md#per-class-mode and docs/methods/classic-criteria.md#per-class-mode.

Training inputs go to the criterion of their **ground-truth** class (IDC then keeps the correctly
classified ones; the classic criteria take their ranges from all of the class's training images).
Test inputs are routed by ground truth too (`route="prediction"` routes them by the model's
prediction instead; perturbed inputs keep their source label). Coverage is reported per class and
as the mean of the per-class fractions, the paper's protocol; classes whose criterion has no
denominator (an IDC class without correctly classified training inputs) are left out of the mean
and named in the warnings.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from workbench.core.coverage.protocol import CoverageValue, Criterion, prefixed
from workbench.core.errors import WorkbenchError


class PerClass(Criterion):
    """`make(c)` builds the criterion of class c, for c in range(classes)."""

    def __init__(self, make: Callable[[int], Criterion], classes: int, route: str = "label"):
        if route not in ("label", "prediction"):
            raise WorkbenchError(f"Unknown routing {route!r}.", "Route test inputs by 'label' or 'prediction'.")
        self.members = [make(c) for c in range(int(classes))]
        if not self.members:
            raise WorkbenchError("Per-class mode needs at least one class.", "Check the dataset's class names.")
        first = self.members[0]
        self.name, self.title, self.needs_fit = first.name, first.title, first.needs_fit
        super().__init__()
        self.classes = int(classes)
        self.route = route
        self.reset()

    def model(self, cls: int) -> Criterion:
        """The criterion of class `cls` (its layout, matrix, clusters …)."""
        if not 0 <= int(cls) < self.classes:
            raise WorkbenchError(f"There is no class {cls}; there are {self.classes}.",
                                 f"Choose a class in 0–{self.classes - 1}.")
        return self.members[int(cls)]

    def get_params(self) -> dict:
        return {"per_class": True, "route": self.route, "classes": [m.identity["params"] for m in self.members]}

    def bind(self, **context) -> "PerClass":
        super().bind(**context)
        for m in self.members:
            m.bind(**context)
        return self

    # --- routing -----------------------------------------------------------------------------------

    def _split(self, layers, labels, predictions, by: str):
        key = labels if by == "label" else predictions
        if key is None:
            raise WorkbenchError(f"Per-class mode needs the inputs' {'labels' if by == 'label' else 'predictions'}.",
                                 "Pass them with the activations.")
        if len(key) and (key.min() < 0 or key.max() >= self.classes):
            raise WorkbenchError(f"Class {int(key.max()) if key.max() >= self.classes else int(key.min())} is outside "
                                 f"the {self.classes} classes of this criterion.",
                                 "Use a test set with the model's classes.")
        for c in np.unique(key):
            rows = np.flatnonzero(key == c)
            yield int(c), rows, {k: v[rows] for k, v in layers.items()}, \
                None if labels is None else labels[rows], None if predictions is None else predictions[rows]

    def _start_fit(self):
        for m in self.members:
            m.start_fit()

    def _partial_fit(self, layers, labels, predictions):
        for c, _, sub, lab, pred in self._split(layers, labels, predictions, "label"):
            self.members[c].partial_fit(sub, lab, pred)

    def _finish_fit(self):
        for m in self.members:
            m.finish_fit(check=self._check)

    def _update(self, layers, labels, predictions):
        key = labels if self.route == "label" else predictions
        for c, _, sub, lab, pred in self._split(layers, labels, predictions, self.route):
            self.members[c].update(sub, lab, pred)
        self._routes.append(np.asarray(key, dtype=np.int16))

    def _profile(self, layers, labels, predictions):
        """Each input's profile from its class's criterion, in input order."""
        out = None
        for c, rows, sub, lab, pred in self._split(layers, labels, predictions, self.route):
            part = self.members[c].profile(sub, lab, pred)
            if out is None:
                out = np.zeros((len(next(iter(layers.values()))),) + part.shape[1:], dtype=part.dtype)
            out[rows] = part
        return out

    def _reset_cover(self):
        for m in self.members:
            m.reset()
        self._routes = []

    # --- reporting -------------------------------------------------------------------------------

    def per_class_coverage(self) -> dict[int, CoverageValue]:
        return {c: m.coverage() for c, m in enumerate(self.members)}

    def coverage(self) -> CoverageValue:
        values = [v for v in self.per_class_coverage().values() if v.total != 0]
        covered = sum(v.covered for v in values)
        if any(v.total is None for v in values):  # counts without a denominator (TKNP): their sum
            return CoverageValue(None, covered, None)
        fractions = [v.fraction for v in values]
        return CoverageValue(float(np.mean(fractions)) if fractions else None, covered,
                             sum(v.total for v in values))

    def layer_coverage(self) -> dict[str, CoverageValue] | None:
        """Each layer's coverage combined over the classes as `coverage()` combines them: summed counts and
        the mean of the per-class fractions; None when the classes' criterion has no per-layer coverage."""
        members = [m.layer_coverage() for m in self.members]
        if any(per_layer is None for per_layer in members):
            return None
        out = {}
        for name in dict.fromkeys(name for per_layer in members for name in per_layer):
            values = [per_layer[name] for per_layer in members if name in per_layer and per_layer[name].total]
            out[name] = CoverageValue(float(np.mean([v.fraction for v in values])) if values else None,
                                      sum(v.covered for v in values), sum(v.total for v in values))
        return out

    def matrix(self) -> np.ndarray:
        """(classes, 1) per-class coverage fractions (NaN where undefined); `model(c).matrix()` has the detail."""
        return np.array([[np.nan if v.fraction is None else v.fraction]
                         for v in self.per_class_coverage().values()], dtype=np.float64)

    @property
    def routes(self) -> np.ndarray:
        """(inputs seen,) the class each test input was routed to."""
        if len(self._routes) > 1:
            self._routes = [np.concatenate(self._routes)]
        return self._routes[0] if self._routes else np.zeros(0, dtype=np.int16)

    def global_indices(self, cls: int) -> np.ndarray:
        """Indices (in update order) of the test inputs routed to class `cls`: entry i is the model's input i."""
        return np.flatnonzero(self.routes == int(cls))

    def inputs_in(self, code: int, cls: int) -> np.ndarray:
        """IDC: the test inputs of class `cls` that fall in its combination `code`, as global indices."""
        return self.global_indices(cls)[self.model(cls).inputs_in(code)]

    @property
    def warnings(self) -> list[str]:
        notes = list(self._warnings)
        for c, m in enumerate(self.members):
            notes += [f"class {c}: {w}" for w in m.warnings]
        return notes

    # --- state -------------------------------------------------------------------------------------

    def _fit_state(self):
        meta, arrays = {"classes": {}}, {}
        for c, m in enumerate(self.members):
            sub_meta, sub_arrays = m._fit_state()
            meta["classes"][str(c)] = {"fit": sub_meta, "warnings": m._warnings}
            arrays.update({f"{c}.{k}": v for k, v in sub_arrays.items()})
        return meta, arrays

    def _load_fit_state(self, meta, arrays):
        for c, m in enumerate(self.members):
            entry = meta["classes"][str(c)]
            m._load_fit_state(entry["fit"], prefixed(arrays, f"{c}."))
            m._warnings = list(entry.get("warnings", []))
            m.fitted = True
            m.reset()

    def _cover_state(self):
        meta, arrays = {"classes": {}}, {"routes": self.routes}
        for c, m in enumerate(self.members):
            sub_meta, sub_arrays = m._cover_state()
            meta["classes"][str(c)] = {**sub_meta, "inputs_seen": m.inputs_seen}
            arrays.update({f"{c}.{k}": v for k, v in sub_arrays.items()})
        return meta, arrays

    def _merge_cover_state(self, meta, arrays):
        for c, m in enumerate(self.members):
            entry = meta["classes"][str(c)]
            m._merge_cover_state(entry, prefixed(arrays, f"{c}."))
            m.inputs_seen += int(entry.get("inputs_seen", 0))
        if "routes" in arrays:
            self._routes.append(np.asarray(arrays["routes"], dtype=np.int16))

    @property
    def mergeable(self) -> bool:
        return all(member.mergeable for member in self.members)

    def _merge_fit(self, other):
        for mine, theirs in zip(self.members, other.members):
            mine.merge_fit(theirs)

    def _load_cover_state(self, meta, arrays):
        for c, m in enumerate(self.members):
            entry = meta["classes"][str(c)]
            m._load_cover_state(entry, prefixed(arrays, f"{c}."))
            m.inputs_seen = int(entry.get("inputs_seen", 0))
        self._routes = [np.asarray(arrays["routes"], dtype=np.int16)] if "routes" in arrays else []
