"""The Coverage view's measurements: one job per test set, run one after another, results kept.

A `CoverageRequest` says what to measure (model, dataset, IDC layer, m, criteria); each chosen test
set becomes a `SetRun`. Nothing long starts by itself: what the sets still need (the criteria with no
stored result) and how long it takes on this machine now is asked first (`core.coverage.estimate`, a
short trial); work estimated at `AUTO_START_S` or less starts, and longer work is offered (`offer`)
until the user accepts it. The sets are measured in turn, not side by side: the first job fits the
criteria on the training data and stores the fits when it finishes, so the next set's job finds them in
the project and only measures (a read-only project fits again). Before a set can run, what it
needs is fetched through the session, once for every view that asks: the datasets, the stored
evaluation of the model (for the correct/misclassified sets) and the layer's neuron importance (for
IDC). Asking for another request cancels the jobs the old one no longer needs; finished results are
kept, so going back to an earlier layer or m shows them at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import QObject, Signal

from workbench.core.coverage.estimate import CoverageWork, coverage_work
from workbench.core.coverage.measure import SetCoverage, kmnc_sections, measure_groups
from workbench.core.coverage.passes import CoverageProgress
from workbench.core.coverage.registry import criterion_groups
from workbench.core.errors import WorkbenchError
from workbench.gui.session.coverage_choices import TestSetChoice
from workbench.gui.session.jobs import INTERACTIVE, LONG, Job
from workbench.gui.session.keyed_jobs import KeyedJobs
from workbench.gui.session.session import Session

WAITING, RUNNING, DONE, FAILED, CANCELLED = "waiting", "running", "done", "failed", "cancelled"
KEPT_RUNS = 16  # finished sets kept for going back to an earlier request (a few MB each)
KEPT_SECTIONS = 4  # KMNC sections per input: 60,000 inputs × 258 neurons is 31 MB
AUTO_START_S = 30.0  # work estimated to take longer waits for the user's click
RELEVANCE_BATCH = 512  # the session computes a layer's relevance in batches of this many inputs


def remember(cache: dict, key, value, limit: int) -> None:
    """Keep `value` under `key`, forgetting the oldest entries beyond `limit`."""
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > limit:
        cache.pop(next(iter(cache)))


@dataclass(frozen=True)
class CoverageRequest:
    model: str
    fingerprint: str
    dataset: str  # the name or path of the dataset the model was trained on: its training split fits the criteria
    layer: str
    m: int
    criteria: tuple[str, ...]


@dataclass
class Offer:
    """Work that waits for the user: the sets it measures and about how long it takes here (None:
    the estimate failed)."""

    keys: list[str]
    seconds: float | None
    parts: dict[str, float] = field(default_factory=dict)


@dataclass
class SetRun:
    """One test set under one request: its state, the running values, and in the end its results."""

    choice: TestSetChoice
    state: str = WAITING
    waiting_for: str = ""  # what it waits for, in words
    measured: SetCoverage | None = None
    growth: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # criterion → (inputs, fraction)
    progress: tuple[int, int] = (0, 0)
    error: BaseException | None = None  # what stopped the whole set
    details: str = ""
    job: Job | None = None
    test_split: object = None  # the split name, test set or stored set name, and indices the set was measured on
    test_indices: np.ndarray | None = None
    fresh: bool = False  # fit and measure again rather than read what the project stored
    allowed: bool = False  # quick enough to start by itself, or the user asked for it

    def result(self, criterion: str):
        return self.measured.results.get(criterion) if self.measured is not None else None

    def criterion_error(self, criterion: str) -> BaseException | None:
        if self.error is not None:
            return self.error
        return self.measured.errors.get(criterion) if self.measured is not None else None


class CoverageRuns(QObject):
    """`request(request, choices)`; `runs` holds the current `SetRun`s in the chosen order."""

    changed = Signal(str)  # a set's state, values or results changed (its key)
    offer_changed = Signal()  # work was offered, accepted or withdrawn (`offer`), or is being timed
    sections_ready = Signal(str)  # a set's KMNC sections per input arrived (its key)

    def __init__(self, session: Session, parent: QObject | None = None):
        super().__init__(parent)
        self.session = session
        self.current: CoverageRequest | None = None
        self.runs: dict[str, SetRun] = {}
        self._kept: dict[tuple[CoverageRequest, str], SetRun] = {}  # finished runs of every request
        # which KMNC section each input of a set reaches, by (request, set key)
        self.sections = KeyedJobs(session.runner, self, keep=KEPT_SECTIONS)
        self.sections.ended.connect(lambda cache_key: self.sections_ready.emit(cache_key[1]))
        self.importance_error: BaseException | None = None
        self.offer: Offer | None = None
        self.timing: Job | None = None  # the job that asks what the sets still need, and times it
        # A prerequisite arriving (or failing) may let the next set start.
        for signal in (session.dataset_loaded, session.dataset_failed, session.evaluation_ready,
                       session.evaluation_failed, session.importance_ready, session.importance_failed):
            signal.connect(lambda _key: self._advance())

    # --- what to measure ----------------------------------------------------------------------------

    def request(self, request: CoverageRequest, choices: list[TestSetChoice]) -> None:
        """Measure `choices` under `request`; the same request again only fetches what is missing."""
        if request != self.current:
            self.cancel()
            self.current = request
            self.runs = {}
            self._withdraw_offer()
        keep = {}
        for choice in choices:
            run = self.runs.get(choice.key) or self._kept.get((request, choice.key)) or SetRun(choice)
            keep[choice.key] = run
        for key, run in self.runs.items():
            if key not in keep and run.job is not None and run.job.record.active:
                run.job.cancel()
        self.runs = keep
        self._advance()

    def again(self) -> None:
        """Measure every set of the current request again, fitting afresh instead of reading stored results."""
        self._ask_importance_again()
        for key, run in list(self.runs.items()):
            if run.state in (DONE, FAILED, CANCELLED):
                self._kept.pop((self.current, key), None)
                self.sections.forget(lambda k, key=key: k != (self.current, key))
                self.runs[key] = SetRun(run.choice, fresh=True, allowed=True)
        self._withdraw_offer()
        self._advance()

    def retry(self, key: str) -> None:
        run = self.runs.get(key)
        if run is not None and run.state in (FAILED, CANCELLED):
            self._ask_importance_again()
            self.runs[key] = SetRun(run.choice, allowed=True)
            self._advance()

    def _ask_importance_again(self) -> None:
        """A relevance computation that failed or was cancelled is started again (IDC waits for it)."""
        request = self.current
        if request is not None and "idc" in request.criteria:
            key = (request.model, request.dataset, request.layer)
            if key in self.session.importance_errors and request.model in self.session.models:
                self.session.compute_importance(*key)

    def accept_offer(self) -> None:
        """Measure the offered sets (the user's click)."""
        if self.offer is None:
            return
        for key in self.offer.keys:
            if key in self.runs:
                self.runs[key].allowed = True
        self._withdraw_offer()
        self._advance()

    def _withdraw_offer(self) -> None:
        if self.offer is not None:
            self.offer = None
            self.offer_changed.emit()

    def cancel(self) -> None:
        for run in self.runs.values():
            if run.job is not None and run.job.record.active:
                run.job.cancel()
        if self.timing is not None and self.timing.record.active:
            self.timing.cancel()
        self.timing = None
        self.sections.cancel()

    def busy(self) -> bool:
        return self.timing is not None or any(run.state == RUNNING for run in self.runs.values())

    def offered(self, key: str) -> bool:
        return self.offer is not None and key in self.offer.keys

    # --- running the sets in turn ---------------------------------------------------------------------

    def _advance(self) -> None:
        """Start the next set whose inputs are there, unless one is running; ask for what is missing."""
        request = self.current
        if request is None or self.busy():
            for key, run in self.runs.items():
                self.changed.emit(key)
            return
        unasked = []  # sets ready to run that were neither timed nor asked for
        for key, run in self.runs.items():
            if run.state != WAITING or self.offered(key):
                continue
            missing = self._missing(request, run)
            run.waiting_for = missing
            if missing:
                continue
            if run.allowed:
                self._submit(request, run)
                unasked = []
                break
            unasked.append(run)
        if unasked:
            self._time(request, unasked)
        for key in self.runs:
            self.changed.emit(key)

    def _missing(self, request: CoverageRequest, run: SetRun) -> str:
        """What the set still waits for ('' when it can run); asks the session for it. A prerequisite
        that failed fails the set (or, for the importance, only IDC)."""
        choice, session = run.choice, self.session
        if choice.reason:
            self._fail(run, WorkbenchError(choice.reason, "Choose a dataset split."))
            return "nothing: it cannot be measured"
        for spec in dict.fromkeys((request.dataset, choice.dataset)):
            if spec not in session.datasets:
                error = session.dataset_errors.get(spec)
                if error is not None:
                    self._fail(run, error)
                    return "nothing: its dataset could not be loaded"
                session.load_dataset(spec)
                return f"dataset {session.dataset_title(spec)}"
        if choice.needs_predictions:
            key = (request.model, choice.dataset, choice.split)
            if session.evaluation(*key) is None:
                error = session.evaluation_errors.get(key)
                if error is not None:
                    self._fail(run, error)
                    return "nothing: the model could not be evaluated"
                session.evaluate(*key)
                return f"the model's predictions on the {choice.split} split"
        if "idc" in request.criteria and run.allowed:  # the relevance pass is part of the work timed first
            importance_key = (request.model, request.dataset, request.layer)
            self.importance_error = session.importance_errors.get(importance_key)
            if session.importance(*importance_key) is None and self.importance_error is None:
                session.compute_importance(*importance_key)
                return f"the relevance of {request.layer}'s neurons (for IDC)"
        return ""

    def _time(self, request: CoverageRequest, runs: list[SetRun]) -> None:
        """Ask what `runs` still need and how long it takes here; start it when that is short."""
        session = self.session
        sets = [self._inputs(request, run) for run in runs]
        importance = session.importance(request.model, request.dataset, request.layer)
        job = session.runner.submit(
            f"Time the coverage of {', '.join(run.choice.title for run in runs)} in {request.model}",
            coverage_work, session.models[request.model].model, session.datasets[request.dataset], sets,
            request.layer, criterion_groups(request.criteria), request.m, importance, project=session.project,
            relevance_batch=RELEVANCE_BATCH, lane=INTERACTIVE, view="coverage", report_errors=False, portable=True)
        self.timing = job
        for run in runs:
            run.waiting_for = "an estimate of how long measuring takes on this machine"
        self.offer_changed.emit()
        keys = [run.choice.key for run in runs]
        job.finished.connect(lambda work: self._on_timed(request, job, keys, work))
        job.failed.connect(lambda exc: self._on_timed(request, job, keys, None))
        job.cancelled.connect(lambda: self._on_timed(request, job, keys, None, cancelled=True))

    def _on_timed(self, request: CoverageRequest, job: Job, keys: list[str], work: CoverageWork | None,
                  cancelled: bool = False) -> None:
        if job is not self.timing:
            return
        self.timing = None
        if request != self.current or cancelled:
            self.offer_changed.emit()
            return
        keys = [key for key in keys if key in self.runs]
        for key in keys:
            self.runs[key].waiting_for = ""
        if work is not None:
            for key, missing in zip(keys, work.missing):
                if not missing:  # stored: reading it is quick
                    self.runs[key].allowed = True
        offered = [key for key in keys if not self.runs[key].allowed]
        if offered and work is not None and work.seconds <= AUTO_START_S:
            for key in offered:
                self.runs[key].allowed = True
            offered = []
        self.offer = Offer(offered, None if work is None else work.seconds,
                           {} if work is None else work.parts) if offered else None
        self.offer_changed.emit()
        self._advance()

    def _inputs(self, request: CoverageRequest, run: SetRun) -> tuple:
        """(test split, indices) of a set whose prerequisites are there, as `measure_groups` takes them."""
        choice, session = run.choice, self.session
        data = session.datasets[choice.dataset]
        # A split of the model's own dataset goes by name, so stored results are found by it; a stored
        # set is read on the job's thread.
        if choice.stored:
            split = choice.stored
        else:
            split = choice.split if choice.dataset == request.dataset else data.split(choice.split)
        indices = None
        if choice.needs_predictions:
            predictions = session.evaluation(request.model, choice.dataset, choice.split)["predictions"]
            indices = choice.indices(data.split(choice.split).labels, predictions)
        return split, indices

    def _fail(self, run: SetRun, error: BaseException, details: str = "") -> None:
        run.state, run.error, run.details = FAILED, error, details

    def _submit(self, request: CoverageRequest, run: SetRun) -> None:
        session, choice = self.session, run.choice
        run.test_split, run.test_indices = self._inputs(request, run)
        groups = criterion_groups(request.criteria)
        importance = session.importance(request.model, request.dataset, request.layer)
        if "idc" in request.criteria and importance is None:  # its relevance failed: IDC says why, the rest runs
            groups = [g for g in groups if "idc" not in g]
        run.state, run.waiting_for, run.progress = RUNNING, "", (0, 0)
        run.growth = {name: [] for name in request.criteria}
        job = session.runner.submit(
            f"Coverage of {choice.title} ({', '.join(request.criteria)}) in {request.model}",
            measure_groups, session.models[request.model].model, session.datasets[request.dataset],
            run.test_split, run.test_indices, request.layer, groups, request.m, importance,
            project=session.project, reuse=not run.fresh, lane=LONG, view="coverage", report_errors=False)
        run.job = job
        job.partial.connect(lambda progress: self._on_partial(request, run, progress))
        job.finished.connect(lambda stored: self._on_finished(request, run, stored))
        job.failed.connect(lambda exc: self._on_ended(request, run, FAILED, exc, job.record.details))
        job.cancelled.connect(lambda: self._on_ended(request, run, CANCELLED, WorkbenchError(
            "Measuring was cancelled.", "Press Measure again to run it again."), ""))

    def _on_partial(self, request: CoverageRequest, run: SetRun, progress) -> None:
        if not isinstance(progress, CoverageProgress):  # relevance summed on the way hands out its own
            return
        run.progress = (progress.done, progress.total)
        for name, value in progress.values.items():
            if value.fraction is not None and name in run.growth:
                run.growth[name].append((progress.done, value.fraction))
        if self.runs.get(run.choice.key) is run:
            self.changed.emit(run.choice.key)

    def _on_finished(self, request: CoverageRequest, run: SetRun, measured: SetCoverage) -> None:
        run.measured, run.state, run.job = measured, DONE, None
        if measured.test is not None:  # a stored set: later passes (KMNC sections) reuse what was read
            run.test_split = measured.test
        if "idc" in request.criteria and "idc" not in run.measured.results and "idc" not in run.measured.errors:
            run.measured.errors["idc"] = self.importance_error or WorkbenchError(
                "IDC was not measured: the layer's relevance is missing.", "Compute the importance again.")
        remember(self._kept, (request, run.choice.key), run, KEPT_RUNS)
        self._after(request)

    def _on_ended(self, request: CoverageRequest, run: SetRun, state: str, error: BaseException,
                  details: str) -> None:
        run.state, run.error, run.details, run.job = state, error, details, None
        self._after(request)

    def _after(self, request: CoverageRequest) -> None:
        if request == self.current:
            self._advance()

    # --- which inputs fall in a KMNC cell ------------------------------------------------------------

    def kmnc_sections(self, key: str):
        """The KMNC section of each input of set `key` per neuron: an array, an exception, or None
        while a job computes it (started here on first ask; `sections_ready(key)` says when)."""
        request, run = self.current, self.runs.get(key)
        cache_key = (request, key)
        if cache_key in self.sections.results:
            return self.sections.results[cache_key]
        if cache_key in self.sections.errors:
            return self.sections.errors[cache_key]
        result = run.result("kmnc") if run is not None else None
        if result is None:
            return None
        session = self.session
        self.sections.run(cache_key, f"KMNC sections of {run.choice.title} in {request.model}", kmnc_sections,
                          session.models[request.model].model, session.datasets[request.dataset], run.test_split,
                          run.test_indices, result.criterion, result.provenance.get("activation_point", "post"),
                          lane=LONG, view="coverage")
        return None

    def sections_running(self, key: str) -> bool:
        return self.sections.running((self.current, key))
