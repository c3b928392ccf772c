"""Surprise adequacy (Kim et al. 2019) — LSA, DSA, MDSA — and surprise coverage
(docs/methods/classic-criteria.md#surprise-adequacy).

The activation trace AT(x) is the neuron values of the chosen layer(s), concatenated. Training ATs
are grouped by the model's **predicted** class (`by="label"`: by ground truth); a test input is
compared with the group of its predicted class. The criteria keep the training ATs (they are the
model: DSA needs every one of them), optionally a seeded sample of `max_train` of them.

Surprise coverage (SC): `buckets` equal buckets on [0, `upper`]; an SA in bucket
min(⌊SA·B/U⌋, B−1) covers it; SA > U is not counted unless `overflow` adds bucket B (denominator
B + 1); SC = non-empty buckets / B. Or, with `width`, the NLC variant: the number of distinct
⌊SA/w⌋ (a count). Defaults (DeepImportance protocol): B = 1000, U = 2000 for LSA, 2 for DSA; MDSA
has no such default and uses the width variant, w = 10, unless `upper` is given.

`semantics="dnn-tip"` reproduces dnn-tip 0.1.1: its half-open buckets from `linspace` (its overflow
bucket replaces the last regular one, so the denominator stays B), LSA as −log of the density (which
underflows to +inf far from the data) with per-class `max_features` (default 300) instead of the
variance filter, and MDSA as the *squared* Mahalanobis distance (scikit-learn's `mahalanobis`).
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from workbench.core.coverage.kde import GaussianKDE, SingularDensity
from workbench.core.coverage.protocol import (
    CoverageValue,
    Criterion,
    as_int64,
    as_layers,
    batch_size_of,
    neuron_values,
    option_count,
)
from workbench.core.errors import WorkbenchError
from workbench.core.sampling import seeded_sample


class SurpriseCriterion(Criterion):
    """The shared machinery: training ATs per class, SA per test input, SC buckets per class."""

    default_upper: float | None = None
    default_width: float | None = None
    bookkeeping = ("record_inputs",)

    def __init__(self, layers=None, by: str = "prediction", buckets: int = 1000, upper: float | None = None,
                 width: float | None = None, overflow: bool = False, per_class: bool = False,
                 conv_neuron: str = "channel-mean", semantics: str = "spec", max_train: int | None = None,
                 seed: int = 0, record_inputs: bool = True):
        super().__init__()
        if by not in ("prediction", "label"):
            raise WorkbenchError(f"Unknown grouping {by!r}.", "Group training activations by 'prediction' or 'label'.")
        if semantics not in ("spec", "dnn-tip"):
            raise WorkbenchError(f"Unknown semantics {semantics!r}.", "Use 'spec' or 'dnn-tip'.")
        if upper is not None and width is not None:
            raise WorkbenchError("Both an upper bound and a bucket width were given.",
                                 "Use upper (B buckets on [0, U]) or width (distinct ⌊SA/w⌋), not both.")
        self.layers = [layers] if isinstance(layers, str) else (list(layers) if layers is not None else None)
        self.by = by
        self.buckets = option_count(buckets, "the number of SC buckets", 1000, high=10**7)
        self.upper = upper
        self.width = width
        self.overflow = bool(overflow)
        self.per_class = bool(per_class)
        self.conv_neuron = conv_neuron
        self.semantics = semantics
        self.max_train = max_train
        self.seed = int(seed)
        self.record_inputs = bool(record_inputs)
        self.device = "cpu"  # where distances and densities are computed; not part of the identity
        self.reset()

    def to(self, device) -> "SurpriseCriterion":
        """Compute on `device` (a torch device or its name); a fitted criterion is moved there."""
        self.device = str(device)
        if self.fitted and getattr(self, "train_ats", None) is not None:
            self._prepare()
        return self

    # --- SC configuration --------------------------------------------------------------------------

    @property
    def sc_upper(self) -> float | None:
        if self.upper is not None:
            return float(self.upper)
        return None if self.width is not None or self.default_upper is None else float(self.default_upper)

    @property
    def sc_width(self) -> float | None:
        if self.width is not None:
            return float(self.width)
        return None if self.upper is not None else self.default_width

    @property
    def sc_total(self) -> int | None:
        if self.sc_upper is None:
            return None
        return self.buckets + 1 if self.overflow and self.semantics == "spec" else self.buckets

    def bucket_of(self, sa: np.ndarray) -> np.ndarray:
        """The SC bucket of each SA (−1: uncounted); in the width variant, ⌊SA/w⌋ (with a mask of counted)."""
        sa = np.asarray(sa, dtype=np.float64)
        out = np.full(len(sa), -1, dtype=np.int64)
        finite = np.isfinite(sa)
        if self.sc_upper is None:
            out[finite] = np.floor(sa[finite] / self.sc_width).astype(np.int64)
            return out
        U, B = self.sc_upper, self.buckets
        if self.semantics == "dnn-tip":
            edges = (np.concatenate([np.linspace(0, U, B, dtype=np.float64), [np.inf]]) if self.overflow
                     else np.linspace(0, U, B + 1, dtype=np.float64))
            index = np.searchsorted(edges, sa, side="right") - 1  # edges[i] ≤ SA < edges[i+1]
            ok = (index >= 0) & (index < B) & ~np.isnan(sa)
            out[ok] = index[ok]
            return out
        inside = finite & (sa >= 0) & (sa <= U)
        out[inside] = np.minimum(np.floor(sa[inside] * B / U), B - 1).astype(np.int64)
        if self.overflow:
            out[(sa > U) & ~np.isnan(sa)] = B
        return out

    # --- fitting -----------------------------------------------------------------------------------

    def _ats(self, layers: dict[str, np.ndarray]) -> np.ndarray:
        parts = [neuron_values(raw, self.conv_neuron) for raw in layers.values()]
        ats = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
        if ats.dtype.kind == "f" and not np.isfinite(ats).all():
            raise WorkbenchError("The activation traces hold NaN or infinite values.", "Check the model and inputs.")
        if hasattr(self, "train_ats") and self.train_ats is not None and ats.shape[1] != self.train_ats.shape[1]:
            raise WorkbenchError(f"The activation traces have {ats.shape[1]} values, the training ones "
                                 f"{self.train_ats.shape[1]}.", "Pass activations of the fitted layers.")
        return ats

    def _groups(self, labels, predictions) -> np.ndarray:
        key = predictions if self.by == "prediction" else labels
        if key is None:
            what = "predictions" if self.by == "prediction" else "labels"
            raise WorkbenchError(f"{self.title} needs the inputs' {what}.", "Pass them with the activations.")
        return key

    def _start_fit(self):
        self._parts, self._group_parts, self.train_ats, self.train_groups = [], [], None, None

    def _partial_fit(self, layers, labels, predictions):
        self._parts.append(self._ats(layers))
        self._group_parts.append(self._groups(labels, predictions))

    def _merge_fit(self, other):
        self._parts.extend(other._parts)
        self._group_parts.extend(other._group_parts)

    def _finish_fit(self):
        if not self._parts:
            raise WorkbenchError(f"{self.title} got no training activations.", "Fit it on the training split.")
        ats, groups = np.concatenate(self._parts), np.concatenate(self._group_parts)
        self._parts = self._group_parts = []
        if self.max_train is not None and int(self.max_train) < len(ats):  # seeded subsample
            keep = seeded_sample(len(ats), int(self.max_train), self.seed)
            ats, groups = ats[keep], groups[keep]
        self.train_ats, self.train_groups = ats, groups.astype(np.int64)
        self.num_classes = int(groups.max()) + 1 if len(groups) else 0
        self._prepare()

    def _prepare(self):
        """Build what scoring needs from `train_ats` / `train_groups` (also after loading a state)."""

    def _members(self, c: int) -> np.ndarray:
        return np.flatnonzero(self.train_groups == c)

    # --- scoring -----------------------------------------------------------------------------------

    def score(self, acts, labels=None, predictions=None) -> np.ndarray:
        """(B,) the surprise adequacy of each input (NaN where its class has no training ATs)."""
        self._require_fit()
        layers = as_layers(acts, self._layer_names())
        batch_size_of(layers, labels, predictions)
        return self._score(self._ats(layers), self._groups(as_int64(labels), as_int64(predictions)))

    def _score(self, ats: np.ndarray, groups: np.ndarray, record: bool = False) -> np.ndarray:
        out = np.full(len(ats), np.nan, dtype=np.float64)
        for c in np.unique(groups):
            rows = np.flatnonzero(groups == c)
            value = self._score_class(ats[rows], int(c))
            if value is None:
                if record:
                    self._unscored[int(c)] = self._unscored.get(int(c), 0) + len(rows)
            else:
                out[rows] = value
        return out

    @abstractmethod
    def _score_class(self, ats: np.ndarray, c: int) -> np.ndarray | None:
        """Surprise of class c's inputs, or None when the class cannot be scored (e.g. a singular density)."""

    def _profile(self, layers, labels, predictions) -> np.ndarray:
        """(B,) each input's SC bucket (−1: uncounted; the width variant gives ⌊SA/w⌋)."""
        return self.bucket_of(self._score(self._ats(layers), self._groups(labels, predictions)))

    def _update(self, layers, labels, predictions):
        sa = self._score(self._ats(layers), self._groups(labels, predictions), record=True)
        counted = np.isfinite(sa) if self.sc_upper is None else None
        buckets = self.bucket_of(sa)
        route = np.zeros(len(sa), dtype=np.int64)
        if self.per_class:
            if labels is None:
                raise WorkbenchError("Per-class surprise coverage needs the test inputs' labels.", "Pass the labels.")
            route = labels
            self._seen_classes.update(int(c) for c in np.unique(route))
        if self.sc_upper is None:
            for c in np.unique(route[counted]):
                seen = self._width_ids.get(int(c), np.zeros(0, np.int64))
                self._width_ids[int(c)] = np.union1d(seen, buckets[counted & (route == c)])
        else:
            hit = buckets >= 0
            if len(route) and route.max() >= len(self._bucket_counts):
                grown = np.zeros((int(route.max()) + 1, self._bucket_counts.shape[1]), dtype=np.int64)
                grown[:len(self._bucket_counts)] = self._bucket_counts
                self._bucket_counts = grown
            np.add.at(self._bucket_counts, (route[hit], buckets[hit]), 1)
        scored = ~np.isnan(sa)  # unscored inputs (NaN) are reported per class, not as out of range
        if self.sc_upper is not None:
            self._below += int((scored & (sa < 0)).sum())
            self._above += int((scored & (buckets < 0) & (sa > 0)).sum())
        else:
            self._above += int((scored & ~counted).sum())
        if self.record_inputs:
            self._sa.append(sa)

    def _reset_cover(self):
        self._bucket_counts = np.zeros((1, self.sc_total or 0), dtype=np.int64)
        self._width_ids: dict[int, np.ndarray] = {}
        self._sa: list[np.ndarray] = []
        self._below = self._above = 0
        self._unscored: dict[int, int] = {}
        self._seen_classes: set[int] = set()

    # --- reporting ---------------------------------------------------------------------------------

    def _class_value(self, row: int) -> CoverageValue:
        if self.sc_upper is None:
            return CoverageValue.of(len(self._width_ids.get(row, ())), None)
        counts = self._bucket_counts[row] if row < len(self._bucket_counts) else np.zeros(1)
        return CoverageValue.of(int(np.count_nonzero(counts)), self.sc_total)

    def per_class_coverage(self) -> dict[int, CoverageValue]:
        """SC of each ground-truth class that had test inputs (per-class mode)."""
        return {c: self._class_value(c) for c in sorted(self._seen_classes)}

    def coverage(self) -> CoverageValue:
        if not self.per_class:
            return self._class_value(0)
        values = list(self.per_class_coverage().values())
        covered = sum(v.covered for v in values)
        if self.sc_upper is None:
            return CoverageValue(None, covered, None)
        return CoverageValue(float(np.mean([v.fraction for v in values])) if values else 0.0, covered,
                             sum(v.total for v in values))

    def matrix(self) -> np.ndarray:
        """(rows, B) inputs per bucket — one row, or one per class; the width variant: (1, ids) the ids."""
        if self.sc_upper is None:
            ids = [np.zeros(0, np.int64), *self._width_ids.values()]
            return np.unique(np.concatenate(ids)).reshape(1, -1)
        return self._bucket_counts

    @property
    def values(self) -> np.ndarray:
        """(inputs seen,) the SA of each test input, in order (needs `record_inputs`)."""
        if len(self._sa) > 1:
            self._sa = [np.concatenate(self._sa)]
        return self._sa[0] if self._sa else np.zeros(0)

    @property
    def warnings(self) -> list[str]:
        notes = list(self._warnings)
        if self._below:
            notes.append(f"{self._below} test input(s) had a negative SA (below the buckets' [0, {self.sc_upper:g}]) "
                         "and cover no bucket")
        if self._above:
            where = f"above {self.sc_upper:g}" if self.sc_upper is not None else "that is not finite"
            notes.append(f"{self._above} test input(s) had an SA {where} and cover no bucket")
        grouped = "predicted as" if self.by == "prediction" else "of"
        for c, n in sorted(self._unscored.items()):
            why = ("its density is singular" if c in getattr(self, "singular_classes", {})
                   else "no training activations of that class")
            notes.append(f"{n} test input(s) {grouped} class {c}: {why}, SA undefined (NaN)")
        return notes

    # --- state -------------------------------------------------------------------------------------

    def _fit_state(self):
        return {"num_classes": self.num_classes}, {"train_ats": self.train_ats, "train_groups": self.train_groups}

    def _load_fit_state(self, meta, arrays):
        self.train_ats = np.asarray(arrays["train_ats"])
        self.train_groups = np.asarray(arrays["train_groups"], dtype=np.int64)
        self.num_classes = int(meta["num_classes"])
        self._prepare()

    def _cover_state(self):
        meta = {"below": self._below, "above": self._above, "unscored": {str(k): v for k, v in self._unscored.items()},
                "seen_classes": sorted(self._seen_classes)}
        arrays = {"bucket_counts": self._bucket_counts}
        arrays.update({f"width_ids.{c}": ids for c, ids in self._width_ids.items()})
        if self.record_inputs:
            arrays["sa"] = self.values
        return meta, arrays

    def _merge_cover_state(self, meta, arrays):
        counts = np.asarray(arrays["bucket_counts"], dtype=np.int64)
        rows = max(len(self._bucket_counts), len(counts))
        merged = np.zeros((rows, self._bucket_counts.shape[1]), dtype=np.int64)
        merged[:len(self._bucket_counts)] += self._bucket_counts
        merged[:len(counts)] += counts
        self._bucket_counts = merged
        for key, ids in arrays.items():
            if key.startswith("width_ids."):
                c = int(key.split(".", 1)[1])
                self._width_ids[c] = np.union1d(self._width_ids.get(c, np.zeros(0, np.int64)),
                                                np.asarray(ids, np.int64))
        if self.record_inputs and "sa" in arrays:
            self._sa.append(np.asarray(arrays["sa"], dtype=np.float64))
        self._below += int(meta.get("below", 0))
        self._above += int(meta.get("above", 0))
        for c, n in meta.get("unscored", {}).items():
            self._unscored[int(c)] = self._unscored.get(int(c), 0) + int(n)
        self._seen_classes |= {int(c) for c in meta.get("seen_classes", [])}

    def _load_cover_state(self, meta, arrays):
        self._bucket_counts = np.asarray(arrays["bucket_counts"], dtype=np.int64)
        self._width_ids = {int(k.split(".", 1)[1]): np.asarray(v, np.int64) for k, v in arrays.items()
                           if k.startswith("width_ids.")}
        self._sa = [np.asarray(arrays["sa"], dtype=np.float64)] if "sa" in arrays else []
        self._below, self._above = int(meta.get("below", 0)), int(meta.get("above", 0))
        self._unscored = {int(k): int(v) for k, v in meta.get("unscored", {}).items()}
        self._seen_classes = {int(c) for c in meta.get("seen_classes", [])}


class LSA(SurpriseCriterion):
    """Likelihood-based SA: −log f̂_c(AT(x)), a Gaussian KDE (Scott) on the class's training ATs.

    docs/methods/classic-criteria.md#lsa. With `semantics="spec"` (the default), neurons whose
    variance is below `var_threshold` (1e-5) in any class are dropped first, then
    optionally all but the `max_features` most variable ones. A class whose covariance is singular
    has no density, and its LSA is never a silent 0: with `on_singular="report"` (default) the class
    is listed in `singular_classes` and the warnings, and its test inputs get NaN and cover no
    bucket; with `"error"` (or when every class is singular) fitting raises a WorkbenchError."""

    name, title = "lsa", "Likelihood-based Surprise Adequacy"
    default_upper = 2000.0

    def __init__(self, layers=None, by: str = "prediction", var_threshold: float = 1e-5,
                 max_features: int | float | None = None, buckets: int = 1000, upper: float | None = None,
                 width: float | None = None, overflow: bool = False, per_class: bool = False,
                 conv_neuron: str = "channel-mean", semantics: str = "spec", max_train: int | None = None,
                 seed: int = 0, record_inputs: bool = True, on_singular: str = "report"):
        super().__init__(layers, by, buckets, upper, width, overflow, per_class, conv_neuron, semantics,
                         max_train, seed, record_inputs)
        if on_singular not in ("report", "error"):
            raise WorkbenchError(f"Unknown on_singular {on_singular!r}.", "Use 'report' or 'error'.")
        self.var_threshold = var_threshold
        self.max_features = max_features
        self.on_singular = on_singular

    def _columns(self, ats: np.ndarray, c: int) -> np.ndarray:
        """The AT columns the KDE of class c uses."""
        d = ats.shape[1]
        if self.semantics == "dnn-tip":  # per class: the max_features most variable columns (dnn-tip default 300)
            keep_n = 300 if self.max_features is None else self.max_features
            keep_n = int(min(keep_n * d, d)) if keep_n < 1 else int(min(keep_n, d))
            dropped = np.argsort(np.var(self.train_ats[self._members(c)], axis=0))[:-keep_n] if keep_n else []
            return np.delete(np.arange(d), dropped)
        return self._global_columns

    def _prepare(self):
        ats = self.train_ats
        d = ats.shape[1]
        keep = np.ones(d, dtype=bool)
        if self.semantics == "spec":
            if self.var_threshold:
                for c in range(self.num_classes):
                    rows = self._members(c)
                    if len(rows):
                        keep &= ats[rows].astype(np.float64).var(axis=0) >= self.var_threshold
            if self.max_features is not None:
                n = int(min(self.max_features * d, d)) if self.max_features < 1 else int(min(self.max_features, d))
                var = np.where(keep, ats.astype(np.float64).var(axis=0), -np.inf)
                top = np.argsort(-var, kind="stable")[:n]
                keep &= np.isin(np.arange(d), top)
            if not keep.any():
                raise WorkbenchError(f"Every one of the {d} neurons has a variance below {self.var_threshold:g} in "
                                     "some class, so LSA has nothing to estimate a density on.",
                                     "Choose another layer, or lower var_threshold.")
            self._global_columns = np.flatnonzero(keep)
        self._kde: dict[int, GaussianKDE] = {}
        self._kde_columns: dict[int, np.ndarray] = {}
        self.singular_classes: dict[int, str] = {}
        hint = ("Drop more neurons (max_features), choose another layer, or fit on more training inputs of "
                "the class; LSA is not defined for it.")
        for c in range(self.num_classes):
            rows = self._members(c)
            if not len(rows):
                continue
            columns = self._columns(ats, c)
            try:
                self._kde[c] = GaussianKDE(ats[rows][:, columns], device=self.device)
            except SingularDensity as exc:
                if self.on_singular == "error":
                    raise WorkbenchError(f"LSA: the density of class {c}'s training activation traces is singular "
                                         f"({exc}).", hint) from exc
                self.singular_classes[c] = str(exc)
                continue
            self._kde_columns[c] = columns
        if not self._kde:
            raise WorkbenchError("LSA: the density of every class's training activation traces is singular "
                                 f"({next(iter(self.singular_classes.values()), 'no training inputs')}).", hint)
        self._warnings = [w for w in self._warnings if not w.startswith("LSA: class")] + [
            f"LSA: class {c} has a singular density ({why}); its test inputs get no LSA (NaN) and cover no bucket"
            for c, why in self.singular_classes.items()]
        if self.semantics == "spec":
            self.kept_neurons = self._global_columns

    def _score_class(self, ats, c):
        if c not in self._kde:
            return None
        log_density = self._kde[c].logpdf(ats[:, self._kde_columns[c]])
        if self.semantics == "dnn-tip":
            with np.errstate(divide="ignore", over="ignore"):
                return -np.log(np.exp(log_density))  # dnn-tip's −log(density): +inf where the density underflows
        return -log_density


class DSA(SurpriseCriterion):
    """Distance-based SA: ‖AT(x) − AT(x_a)‖ / ‖AT(x_a) − AT(x_b)‖, x_a the nearest training AT of
    x's class, x_b the training AT of another class nearest to x_a. Distances are exact (nearest
    candidates found by a matrix product, then recomputed as plain differences); the distance from
    each x_a to the other classes is computed once and cached."""

    name, title = "dsa", "Distance-based Surprise Adequacy"
    default_upper = 2.0

    def _prepare(self):
        import torch

        self._train = torch.from_numpy(np.asarray(self.train_ats, dtype=np.float64)).to(self.device)
        self._train_sq = (self._train * self._train).sum(1)
        self._b_cache = np.full(len(self.train_ats), np.nan)

    def _nearest(self, x, pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each row of x (torch, float64): (index into `pool`, exact distance) of its nearest pool AT;
        ties → the lowest index."""
        import torch

        pool = torch.from_numpy(pool).to(x.device)
        y, y_sq = self._train[pool], self._train_sq[pool]
        sq = (x * x).sum(1)[:, None] + y_sq[None, :] - 2.0 * (x @ y.T)
        best = sq.min(dim=1, keepdim=True).values
        # every candidate within rounding of the best is rechecked with exact differences
        slack = 1e-9 * ((x * x).sum(1)[:, None] + y_sq.max()) + 1e-300
        rows, cols = torch.nonzero(sq <= best + slack, as_tuple=True)
        exact = torch.linalg.vector_norm(x[rows] - y[cols], dim=1).cpu().numpy()
        rows, cols = rows.cpu().numpy(), cols.cpu().numpy()
        order = np.lexsort((cols, exact, rows))  # per row: smallest distance, then lowest index
        first = np.ones(len(order), dtype=bool)
        first[1:] = rows[order][1:] != rows[order][:-1]
        pick = order[first]
        index, dist = np.empty(len(x), np.int64), np.empty(len(x))
        index[rows[pick]], dist[rows[pick]] = cols[pick], exact[pick]
        return index, dist

    def _score_class(self, ats, c):
        import torch

        same = self._members(c)
        others = np.flatnonzero(self.train_groups != c)
        if not len(same) or not len(others):
            return None
        out = np.empty(len(ats))
        for start in range(0, len(ats), 256):  # bounded memory: 256 × |class| distances at a time
            x = torch.from_numpy(np.asarray(ats[start:start + 256], dtype=np.float64)).to(self.device)
            a_local, dist_a = self._nearest(x, same)
            a = same[a_local]
            missing = np.unique(a[np.isnan(self._b_cache[a])])
            if len(missing):
                _, dist_b = self._nearest(self._train[missing], others)
                self._b_cache[missing] = dist_b
            out[start:start + len(x)] = dist_a / self._b_cache[a]
        return out


class MDSA(SurpriseCriterion):
    """Mahalanobis-distance SA: √((AT − μ_c)ᵀ Σ_c⁺ (AT − μ_c)), the class's mean and the pseudo-inverse
    of its covariance (ddof = 0, as scikit-learn's EmpiricalCovariance). dnn-tip returns the square."""

    name, title = "mdsa", "Mahalanobis-distance Surprise Adequacy"
    default_width = 10.0

    def _prepare(self):
        from scipy.linalg import pinvh

        self._mean, self._precision = {}, {}
        for c in range(self.num_classes):
            rows = self._members(c)
            if not len(rows):
                continue
            ats = np.asarray(self.train_ats[rows], dtype=np.float64)
            self._mean[c] = ats.mean(axis=0)
            self._precision[c] = pinvh(np.atleast_2d(np.cov(ats, rowvar=False, bias=True)), check_finite=False)

    def _score_class(self, ats, c):
        if c not in self._mean:
            return None
        centred = np.asarray(ats, dtype=np.float64) - self._mean[c]
        squared = np.einsum("ij,jk,ik->i", centred, self._precision[c], centred)
        return squared if self.semantics == "dnn-tip" else np.sqrt(np.maximum(squared, 0.0))
