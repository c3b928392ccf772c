"""What measuring coverage still takes: the criteria each set has no stored result for, and about how
long measuring them takes on this machine as it is now.

A view opens without starting minutes of work by itself: it measures what `coverage_work` says is
quick and offers the rest behind a button that says how long it takes. The time comes from a trial,
not from a constant: the missing criteria are fitted and measured on a seeded sample of the
training split and of the first set that misses them (`TRIAL_BATCHES` batches of the size the job
itself reads), under whatever else the machine is doing at that moment, and each part of the trial's
clock is scaled to the full sizes:

- the training pass, per input, by the training inputs, once per group of criteria (the first set
  stores the fit, the next ones read it);
- the fit's finish (IDC's k-means, the densities), by the training inputs over the sample's;
- the test pass, per input, by each set's inputs — for LSA and DSA also by the training traces each
  test input is compared with, which grow with the training split;
- the relevance pass IDC needs, per input, by the training inputs, when no importance is stored;
- what the trial spent outside the passes (building the criteria, the first batch's warm-up), once
  per set.

The first batch of each pass warms up and is left out of the per-input rates, so they are the rates of
a steady pass. The batches are as large as the job's because a pass's cost per input depends on them
(a pass in batches of 150 took several times as long per input as one in batches of 500).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from workbench.core.coverage.measure import BATCH_SIZE, measure_coverage, measure_groups
from workbench.core.data.dataset import Dataset
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.sampling import seeded_sample

TRIAL_BATCHES = 3  # batches each trial pass reads: the first warms up, the others are timed
FIXED_FINISH_S = 0.2  # a finish this short is not worth a second look: it is scaled as it is
#: Criteria whose cost per test input grows with the training split (a density over, or the nearest of,
#: every training trace).
COMPARES_WITH_TRAINING = ("lsa", "dsa")


@dataclass
class CoverageWork:
    """Per set, in the order asked, the criteria with no stored result; and about how many seconds
    measuring all of them takes here (0 when nothing is missing)."""

    missing: list[tuple[str, ...]]
    seconds: float
    parts: dict[str, float] = field(default_factory=dict)  # what the seconds are made of, by step

    @property
    def complete(self) -> bool:
        return not any(self.missing)


class PassClock:
    """The progress reports of a trial, timed: how long each pass took per input once warm."""

    def __init__(self):
        self.started = time.perf_counter()
        self.events: list[tuple[float, str, int]] = []

    def tick(self, done: int, total: int, message: str) -> None:
        self.events.append((time.perf_counter(), message, done))

    def total(self) -> float:
        return time.perf_counter() - self.started

    def pass_seconds(self, message: str) -> tuple[float, float]:
        """(seconds per input after the first batch, seconds the whole pass took) of the pass whose
        reports say `message`; (0, 0) when it did not run."""
        marks = [(t, done) for t, text, done in self.events if text == message]
        if len(marks) < 2:
            return 0.0, 0.0
        whole = marks[-1][0] - marks[0][0]
        warm = marks[1:] if len(marks) > 2 else marks  # from the end of the first batch on
        inputs = warm[-1][1] - warm[0][1]
        return ((warm[-1][0] - warm[0][0]) / inputs if inputs > 0 else 0.0), whole

    def span_seconds(self, first: str, last: str) -> float:
        """Seconds from the first report whose message starts with `first` to the last that says `last`."""
        starts = [t for t, text, _ in self.events if text.startswith(first)]
        ends = [t for t, text, _ in self.events if text == last]
        return ends[-1] - starts[0] if starts and ends else 0.0


def coverage_work(ctx: JobContext, model, dataset: Dataset, sets: list[tuple], layer: str,
                  groups: list[tuple[str, ...]], m: int, importance=None, project=None,
                  relevance_batch: int = 256) -> CoverageWork:
    """What measuring `groups` of criteria on each of `sets` ((test split, indices or None), as
    `measure_groups` takes them) still needs, and how long that takes here, now. `importance` is IDC's,
    when known; otherwise a stored one is read, and without one the relevance pass (in batches of
    `relevance_batch`, as the caller will compute it) is part of the work."""
    from workbench.core.importance.neuron_importance import compute_importance

    fit_split = dataset.fit_split
    if importance is None and any("idc" in group for group in groups) and project is not None:
        try:
            # any stored relevance of the layer will do: IDC ranks neurons by the totals over all classes
            importance = compute_importance(ctx.quiet(), model, dataset, layer, project=project, split=fit_split,
                                            stored_only=True)
        except WorkbenchError:
            importance = None  # the measuring job reports why
    missing, tests = [], []
    steps = len(sets) + len(groups) + 1  # the stored results of each set, the relevance trial, each group's
    for step, (split, indices) in enumerate(sets):
        ctx.progress(step, steps, "reading what the project stored")
        stored = measure_groups(ctx.quiet(), model, dataset, split, indices, layer, groups, m, importance, project,
                                stored_only=True)
        missing.append(tuple(name for group in groups for name in group if name not in stored.results))
        test = stored.test if stored.test is not None else dataset.split(split)
        tests.append((test, indices))
    if not any(missing):
        return CoverageWork(missing, 0.0)

    fit = dataset.split(fit_split)
    # a small split is timed on half of it at most: a trial as long as the work would be no saving
    batch = max(BATCH_SIZE, relevance_batch)
    rows = seeded_sample(len(fit), min(TRIAL_BATCHES * batch, max(batch, len(fit) // 2), len(fit)), 0, always=True)
    trial = Dataset(dataset.name, list(dataset.class_names), {fit_split: fit.subset(rows)}, dataset.card)
    scale = len(fit) / len(rows)
    parts: dict[str, float] = {}

    def add(part: str, seconds: float) -> None:
        parts[part] = parts.get(part, 0.0) + seconds

    ctx.progress(len(sets), steps, "timing a trial on a sample")
    if importance is None and any("idc" in names for names in missing):
        clock = PassClock()
        try:
            importance = compute_importance(ctx.reporting_to(clock.tick), model, trial, layer, per_class=True,
                                            batch_size=relevance_batch, split=fit_split)
        except WorkbenchError:
            pass  # IDC fails at once in the real job too
        else:
            per_input, whole = clock.pass_seconds("importance")
            add("relevance", per_input * len(fit) + max(clock.total() - whole, 0.0))
    for step, group in enumerate(groups, start=len(sets) + 1):
        ctx.progress(step, steps, "timing a trial on a sample")
        wanted = tuple(name for name in group if any(name in names for names in missing))
        if not wanted:
            continue
        first_set = next(i for i, names in enumerate(missing) if any(name in names for name in wanted))
        test, indices = tests[first_set]
        sample = _sample(test, indices)
        given = importance if "idc" in wanted else None
        small = None
        if len(fit) > 2 * len(rows):  # one batch first: it also takes the first-use costs (imports, warm-up)
            small = Dataset(dataset.name, list(dataset.class_names), {fit_split: fit.subset(rows[:BATCH_SIZE])},
                            dataset.card)
            _trial(ctx, model, small, layer, wanted, test, sample[:1], m, given)
        clock = _trial(ctx, model, trial, layer, wanted, test, sample, m, given)
        if clock is None:
            continue  # fails at once in the real job too
        fit_input, fit_whole = clock.pass_seconds("coverage: training activations")
        finish = clock.span_seconds("coverage: fitting", "coverage: fitted")
        test_input, test_whole = clock.pass_seconds("coverage: test inputs")
        outside = max(clock.total() - fit_whole - finish - test_whole, 0.0)
        add("training pass", fit_input * len(fit))
        if small is not None and finish > FIXED_FINISH_S:
            # The finish is a fixed cost (k-means' start, a silhouette on a capped sample) plus a part that
            # grows with the inputs: a fit on one batch, timed warm, tells the two apart.
            again = _trial(ctx, model, small, layer, wanted, test, sample[:1], m, given)
            first = 0.0 if again is None else again.span_seconds("coverage: fitting", "coverage: fitted")
            finish += max(finish - first, 0.0) / (len(rows) - BATCH_SIZE) * (len(fit) - len(rows))
        add("fitting", finish)
        for names, (test, indices) in zip(missing, tests):
            measured = [name for name in wanted if name in names]
            if measured:
                grows = scale if any(name in COMPARES_WITH_TRAINING for name in measured) else 1.0
                add("test pass", test_input * grows * (len(test) if indices is None else len(indices)))
                add("set-up", outside)
    ctx.progress(steps, steps, "timed")
    return CoverageWork(missing, sum(parts.values()), parts)


def _trial(ctx: JobContext, model, trial: Dataset, layer: str, criteria: tuple[str, ...], test, indices, m: int,
           importance) -> PassClock | None:
    """Fit `criteria` on `trial`'s training inputs and measure `indices` of `test`, timed; None when the
    criteria cannot be measured at all."""
    clock = PassClock()
    try:
        measure_coverage(ctx.reporting_to(clock.tick), model, trial, layer, criteria, train_split=trial.fit_split,
                         test_split=test, test_indices=indices, m=m, importance=importance, batch_size=BATCH_SIZE)
    except WorkbenchError:
        return None
    return clock


def _sample(test, indices) -> np.ndarray:
    """A seeded sample of the set's inputs (of `indices` when it is a subset of `test`)."""
    count = len(test) if indices is None else len(indices)
    chosen = seeded_sample(count, min(TRIAL_BATCHES * BATCH_SIZE, count), 0, always=True)
    return chosen if indices is None else np.asarray(indices)[chosen]
