"""Comparing test sets: every figure of every set side by side, what each adds, and which gaps hold up.

`compare_testsets` fits the criteria once (IDC on the chosen layer and m, and the classic criteria;
fits are stored and reused), profiles every set (`profiles`, stored and reused), and computes from
the profiles alone:

- per set (stored with its profile, so a set summarised once is read back in any comparison): size,
  class balance, accuracy and misbehaviours of the model, each criterion's coverage
  ("28.9 % — 74 / 256"), mean and median FOL∞, mean DeepGini, mean and median novelty, and — where the
  set is labelled or judged by the proxies — its validity rate (and, from human labels, its
  label-preservation rate) over the inputs judged, and the coverage of its valid inputs only (validity-aware coverage: a generator cannot buy coverage with invalid images);
- per figure a seeded bootstrap interval (`resampling`);
- per pair of sets and figure the difference with a 95 % interval: the bootstrap differences for
  means and for coverages of sets of one size; for coverages of sets of different sizes the
  size-matched one (the larger set drawn down to the smaller's size, since coverage grows with the
  number of inputs). A difference is *supported* when its interval excludes 0 on the difference's
  side, and *reversed* when it excludes 0 on the other side (at equal size the order flips);
- what each set adds: the items only it covers, per criterion, the exact overlaps of all the sets
  (an UpSet plot's bars) and the inputs that reach what no other chosen set reaches;
- coverage growth curves and class distributions for the plots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import hashlib
import json

import numpy as np
from scipy import sparse

from workbench.core.comparison import items as cov
from workbench.core.comparison import resampling as rs
from workbench.core.comparison.profiles import (COMPARABLE, FOL_EPS, NOVELTY_SAMPLE, SetProfile, profile_testset,
                                                 validity_mask)
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext

CRITERIA_TITLES = {"idc": "IDC", "nc": "NC", "kmnc": "KMNC", "nbc": "NBC", "snac": "SNAC", "tknc": "TKNC"}
#: the mean-like figures of a set: (key, title, values of a profile)
MEANS = (("accuracy", "accuracy", lambda p: p.correct.astype(np.float64)),
         ("fol_mean", "mean FOL∞", lambda p: p.fol),
         ("gini_mean", "mean DeepGini", lambda p: p.gini),
         ("novelty_mean", "mean novelty", lambda p: p.novelty))
MEDIANS = (("fol_median", "median FOL∞", lambda p: p.fol),
           ("novelty_median", "median novelty", lambda p: p.novelty))


@dataclass
class Figure:
    """One number of one set with its bootstrap interval (and the counts behind a coverage)."""

    value: float | None
    low: float | None = None
    high: float | None = None
    covered: int | None = None
    total: int | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in {"value": self.value, "low": self.low, "high": self.high, "covered": self.covered,
                                  "total": self.total}.items() if v is not None}


@dataclass
class SetSummary:
    name: str
    source: str
    size: int
    class_counts: list[int]
    misbehaviours: int
    figures: dict[str, Figure]
    validity: str = ""  # "human", "proxy" or ""
    valid_inputs: int | None = None
    growth: dict[str, np.ndarray] = field(default_factory=dict)
    unique_inputs: dict[str, np.ndarray] = field(default_factory=dict)  # criterion → input rows only it reaches
    profile_artifact: str = ""
    profile_reused: bool = False
    figures_reused: bool = False  # the figures and their resamples were read back, not resampled again


@dataclass
class Comparison:
    """What `compare_testsets` hands back (see the module docstring)."""

    sets: list[SetSummary]
    criteria: list[str]
    settings: dict
    differences: list[dict]
    overlaps: dict[str, dict]
    figure_titles: dict[str, str]
    class_names: list[str]
    profiles: dict[str, SetProfile] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    testsets: dict = field(default_factory=dict)  # name → the TestSet compared (for its images), not saved
    chosen: list = field(default_factory=list)  # the names as they were asked for, in order

    def names(self) -> list[str]:
        return [s.name for s in self.sets]

    def to_dict(self) -> dict:
        return {"settings": self.settings, "criteria": self.criteria, "class_names": self.class_names,
                "figures": self.figure_titles, "notes": self.notes,
                "sets": [{"name": s.name, "source": s.source, "size": s.size, "class_counts": s.class_counts,
                          "misbehaviours": s.misbehaviours, "validity": s.validity, "valid_inputs": s.valid_inputs,
                          "figures": {k: f.as_dict() for k, f in s.figures.items()},
                          "growth": {k: g.tolist() for k, g in s.growth.items()},
                          "unique_inputs": {k: v.tolist() for k, v in s.unique_inputs.items()},
                          "profile_artifact": s.profile_artifact, "profile_reused": s.profile_reused}
                         for s in self.sets],
                "differences": self.differences,
                "overlaps": {k: {"only": v["only"], "membership": [{"sets": list(m), "items": c}
                                                                   for m, c in v["membership"].items()]}
                             for k, v in self.overlaps.items()}}


def _coverage_figure(items, draws: rs.Draws, rows=None) -> tuple[Figure, np.ndarray]:
    total = items.shape[1]
    if rows is not None:  # the inputs outside `rows` cover nothing; the draws stay those of the whole set
        keep = np.zeros(items.shape[0], dtype=bool)
        keep[rows] = True
        part = sparse.diags(keep.astype(np.float32)) @ items.astype(np.float32)
        part = sparse.csr_matrix(part > 0)
    else:
        part = items
    covered = cov.coverage_count(part)
    resampled = rs.resampled_coverage(part, draws) / total if total else np.zeros(draws.counts.shape[0])
    bounds = rs.interval(resampled)
    return Figure(covered / total if total else 0.0, *(bounds or (None, None)), covered, total), resampled


def _mean_figure(values, draws: rs.Draws, rows=None) -> tuple[Figure, np.ndarray]:
    values = np.asarray(values, dtype=np.float64)
    chosen = values if rows is None else values[rows]
    finite = chosen[np.isfinite(chosen)]
    resampled = rs.resampled_mean(values, draws, rows)
    bounds = rs.interval(resampled)
    return Figure(float(finite.mean()) if len(finite) else None, *(bounds or (None, None))), resampled


def _median_figure(values, draws: rs.Draws) -> tuple[Figure, np.ndarray]:
    resampled = rs.resampled_median(values, draws)
    bounds = rs.interval(resampled)
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    return Figure(float(np.median(finite)) if len(finite) else None, *(bounds or (None, None))), resampled


def summarise(profile: SetProfile, validity, num_classes: int, resamples: int,
              seed) -> tuple[SetSummary, dict[str, np.ndarray], rs.Draws]:
    """A set's figures with their bootstrap intervals; also the resampled values (for differences).
    `validity` is the set's `profiles.Validity` (or None): the validity rate is taken over the inputs it
    has judged, the valid-only coverages over the inputs it finds valid."""
    draws = rs.bootstrap_draws(len(profile), resamples, seed)
    figures, resampled = {}, {}
    valid = None if validity is None else validity.valid
    for key, items in profile.items.items():
        figures[key], resampled[key] = _coverage_figure(items, draws)
        if valid is not None:
            rows = np.flatnonzero(valid)
            figures[f"{key}_valid"], resampled[f"{key}_valid"] = _coverage_figure(items, draws, rows)
    for key, _, values in MEANS:
        figures[key], resampled[key] = _mean_figure(values(profile), draws)
    for key, _, values in MEDIANS:
        figures[key], resampled[key] = _median_figure(values(profile), draws)
    if validity is not None:
        judged = np.flatnonzero(validity.judged)
        figures["validity"], resampled["validity"] = _mean_figure(valid.astype(np.float64), draws, judged)
        if validity.preserving is not None:
            figures["preservation"], resampled["preservation"] = _mean_figure(
                validity.preserving.astype(np.float64), draws, judged)
    counts = np.bincount(profile.labels, minlength=num_classes)[:num_classes].tolist()
    summary = SetSummary(profile.name, profile.source, len(profile), [int(c) for c in counts],
                         int((~profile.correct).sum()), figures, "" if validity is None else validity.source,
                         None if valid is None else int(valid.sum()),
                         {key: cov.growth(items) for key, items in profile.items.items()},
                         profile_artifact=profile.artifact, profile_reused=profile.reused)
    return summary, resampled, draws


SUMMARY_KIND = "comparison-figures"


def _validity_digest(validity) -> str:
    if validity is None:
        return ""
    h = hashlib.sha256(validity.source.encode())
    for mask in (validity.valid, validity.judged, validity.preserving):
        h.update(b"-" if mask is None else np.packbits(mask).tobytes())
    return h.hexdigest()


def summary_of(project, profile: SetProfile, validity, num_classes: int, resamples: int,
               seed: int) -> tuple[SetSummary, dict[str, np.ndarray]]:
    """A set's figures and resampled values, read back from the project when this profile, judgement,
    number of resamples and seed were summarised before, else computed (`summarise`) and stored.

    Each set draws its own stream, seeded by the seed and the set's stable identity (not its place in
    the comparison), so sets whose rows line up are not paired and a set keeps its intervals in any
    company."""
    identity = str(profile.provenance.get("identity", profile.name))
    stream = [int(seed), int(hashlib.sha256(identity.encode()).hexdigest()[:8], 16)]
    key = hashlib.sha256(json.dumps([profile.key, int(resamples), stream, _validity_digest(validity)]).encode()
                         ).hexdigest()
    if project is not None and profile.key:
        found = project.find_artifact(SUMMARY_KIND, cache_key=key)
        if found is not None:
            try:
                return _read_summary(project, found, profile)
            except (WorkbenchError, KeyError, TypeError, ValueError):
                pass  # a damaged or older record is made again
    summary, values, _ = summarise(profile, validity, num_classes, resamples, stream)
    if project is not None and not project.read_only and profile.key:
        arrays = {**{f"resampled_{k}": v for k, v in values.items()},
                  **{f"growth_{k}": g for k, g in summary.growth.items()}}
        project.save_artifact(SUMMARY_KIND, f"comparison-figures-{profile.name}-{key[:8]}", arrays, cache_key=key,
                              profile=profile.artifact, testset=profile.name, resamples=int(resamples),
                              seed=int(seed), figures={k: f.as_dict() for k, f in summary.figures.items()},
                              class_counts=summary.class_counts, misbehaviours=summary.misbehaviours,
                              validity=summary.validity, valid_inputs=summary.valid_inputs)
    return summary, values


def _read_summary(project, name: str, profile: SetProfile) -> tuple[SetSummary, dict[str, np.ndarray]]:
    artifact = project.load_artifact(name, kind=SUMMARY_KIND)
    how = artifact.provenance
    figures = {k: Figure(f.get("value"), f.get("low"), f.get("high"), f.get("covered"), f.get("total"))
               for k, f in how["figures"].items()}
    values = {k.removeprefix("resampled_"): artifact[k] for k in artifact.names if k.startswith("resampled_")}
    growth = {k.removeprefix("growth_"): artifact[k] for k in artifact.names if k.startswith("growth_")}
    summary = SetSummary(profile.name, profile.source, len(profile), list(how["class_counts"]),
                         int(how["misbehaviours"]), figures, str(how["validity"]), how["valid_inputs"], growth,
                         profile_artifact=profile.artifact, profile_reused=profile.reused, figures_reused=True)
    return summary, values


def _difference(key: str, a: SetSummary, b: SetSummary, resampled: dict, profiles: dict, valid: dict,
                resamples: int, seed: int, drawn: dict) -> dict | None:
    """The difference a − b of figure `key` and its 95 % interval; whether the interval excludes 0.

    For means the interval is that of the bootstrap differences. Coverage grows with the number of
    inputs, so for a coverage of sets of different sizes the interval is the size-matched one: the
    larger set's inputs (its valid ones, for a valid-only coverage) drawn down to the smaller's number,
    its coverage there set against the smaller set's."""
    fa, fb = a.figures.get(key), b.figures.get(key)
    if fa is None or fb is None or fa.value is None or fb.value is None:
        return None
    out = {"figure": key, "a": a.name, "b": b.name, "difference": fa.value - fb.value}
    criterion = key.removesuffix("_valid")
    rows = {s.name: (np.flatnonzero(valid[s.name]) if key.endswith("_valid") else np.arange(s.size)) for s in (a, b)}
    if criterion in profiles[a.name].items and len(rows[a.name]) != len(rows[b.name]):
        big, small = (a, b) if len(rows[a.name]) > len(rows[b.name]) else (b, a)
        size = len(rows[small.name])
        items = profiles[big.name].items[criterion][rows[big.name]]
        key_of_draws = (big.name, key.endswith("_valid"), size)  # the same draws for every criterion
        if key_of_draws not in drawn:
            drawn[key_of_draws] = rs.subsample_draws(items.shape[0], size, resamples, seed)
        draws = drawn[key_of_draws]
        matched = rs.resampled_coverage(items, draws) / items.shape[1]
        lo, hi = rs.interval(matched)
        value = small.figures[key].value
        bounds = (lo - value, hi - value) if big is a else (value - hi, value - lo)
        out["size_matched"] = {"larger": big.name, "size": size, "low": lo, "high": hi,
                               "median": float(np.median(matched)), "smaller_value": value}
    else:
        bounds = rs.interval(resampled[a.name][key] - resampled[b.name][key])
    out["low"], out["high"] = (None, None) if bounds is None else bounds
    side = np.sign(out["difference"])
    excludes = bounds is not None and (bounds[0] > 0 or bounds[1] < 0)
    # a size-matched interval may lie on the other side of 0: the smaller set covers more at equal size
    out["supported"] = bool(excludes and side != 0 and np.sign(bounds[0]) == side)
    out["reversed"] = bool(excludes and side != 0 and np.sign(bounds[0]) == -side)
    return out


def compare_testsets(ctx: JobContext, project, names: list[str], model, dataset, layer: str | None = None,
                     m: int = 6, criteria=COMPARABLE, resamples: int = rs.RESAMPLES, seed: int = 0,
                     eps: float = FOL_EPS, novelty_sample: int = NOVELTY_SAMPLE, importance=None) -> Comparison:
    """Compare the test sets `names` (any kind `testsets.resolve` takes) for `model`; module docstring."""
    from workbench.core.coverage.measure import measure_coverage
    from workbench.core.labeling.labelled_sets import resolve

    if len(names) < 2:
        raise WorkbenchError("A comparison needs two or more test sets.", "Name them, e.g. --testsets A,B.")
    unknown = [c for c in criteria if c not in COMPARABLE]
    if unknown:
        raise WorkbenchError(f"Cannot compare by {', '.join(unknown)}.", f"Compare by {', '.join(COMPARABLE)}.")
    if resamples < 10:
        raise WorkbenchError(f"{resamples} resamples cannot give an interval.", "Use 1,000 (or at least 100).")
    testsets = [resolve(project, name, dataset, model=model, ctx=ctx) for name in names]
    resolved = [t.name for t in testsets]
    if len(set(resolved)) != len(resolved):  # e.g. a dataset and its test split are one set
        twice = sorted({n for n in resolved if resolved.count(n) > 1})
        raise WorkbenchError(f"A test set is named twice: {', '.join(twice)}.", "Name each set once.")
    notes = [n for t in testsets for n in t.notes]
    empty = [t.name for t in testsets if len(t) == 0]
    if empty:  # e.g. a human-validated subset before any input has a consensus
        notes.append(f"left out, holding no inputs: {', '.join(empty)}")
        testsets = [t for t in testsets if len(t)]
        if len(testsets) < 2:
            raise WorkbenchError(f"{', '.join(empty)} holds no inputs, so fewer than two sets are left to compare.",
                                 "Compare sets that hold inputs (a human-validated subset fills as raters answer).")
    steps = len(testsets) + 1
    ctx.progress(0, steps, "fitting the criteria")
    # the fits, profiles and novelty sample do not depend on the seed: another seed only resamples again
    results = measure_coverage(ctx.quiet(), model, dataset, layer, list(criteria), test_split=testsets[0], m=m,
                               project=project if project is not None and not project.read_only else None,
                               importance=importance)
    profiles, validity = {}, {}
    for k, testset in enumerate(testsets):
        ctx.progress(k + 1, steps, f"profiling {testset.name}")
        profiles[testset.name] = profile_testset(ctx.quiet(), project, model, dataset, testset, results, eps,
                                                 novelty_sample)
        validity[testset.name] = validity_mask(project, testset)
    summaries, resampled = [], {}
    for testset in testsets:
        summary, values = summary_of(project, profiles[testset.name], validity[testset.name], dataset.num_classes,
                                     resamples, seed)
        summaries.append(summary)
        resampled[testset.name] = values
    keys = [k for k in summaries[0].figures if all(k in s.figures for s in summaries)]
    valid_rows = {name: (None if v is None else v.valid) for name, v in validity.items()}
    drawn: dict = {}
    differences = [d for a, b in combinations(summaries, 2) for key in keys
                   if (d := _difference(key, a, b, resampled, profiles, valid_rows, resamples, seed, drawn))
                   is not None]
    overlaps = {}
    for key in profiles[summaries[0].name].items:
        covered = {s.name: cov.covered_items(profiles[s.name].items[key]) for s in summaries}
        total = profiles[summaries[0].name].items[key].shape[1]
        only = {}
        for s in summaries:
            others = np.unique(np.concatenate([covered[o] for o in covered if o != s.name] or [np.zeros(0, int)]))
            mine = np.setdiff1d(covered[s.name], others)
            only[s.name] = int(len(mine))
            s.unique_inputs[key] = cov.reaching(profiles[s.name].items[key], mine)
        overlaps[key] = {"only": only, "membership": cov.membership(covered, total)}
    titles = {**{k: f"{CRITERIA_TITLES.get(k, k)} coverage" for k in results},
              **{f"{k}_valid": f"{CRITERIA_TITLES.get(k, k)} coverage of the valid inputs" for k in results},
              **{k: t for k, t, _ in MEANS}, **{k: t for k, t, _ in MEDIANS}, "validity": "validity rate",
              "preservation": "label-preservation rate (valid, expected class)"}
    layer_name = next((r.provenance.get("identity", {}).get("params", {}).get("layer") for r in results.values()
                       if r.name == "idc"), layer)
    settings = {"model": model.name, "model_fingerprint": model.fingerprint(), "dataset": dataset.name,
                "layer": layer_name, "m": int(m), "criteria": list(results), "resamples": int(resamples),
                "seed": int(seed), "fol_eps": float(eps), "novelty_sample": int(novelty_sample),
                "interval": "percentile bootstrap, 95 %", "fits": {k: r.fit_artifact for k, r in results.items()}}
    return Comparison(summaries, list(results), settings, differences, overlaps, titles,
                      list(dataset.class_names), profiles, notes, {t.name: t for t in testsets}, list(names))

