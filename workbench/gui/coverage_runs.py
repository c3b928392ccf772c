"""The Coverage view's measurements: one job per test set, run one after another, results kept.

A `CoverageRequest` says what to measure (model, dataset, IDC layer, m, criteria); each chosen test
set becomes a `SetRun`. The sets are measured in turn, not side by side: the first job fits the
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

from workbench.core.coverage.measure import SetCoverage, kmnc_sections, measure_groups
from workbench.core.coverage.passes import CoverageProgress
from workbench.core.coverage.registry import criterion_groups
from workbench.core.errors import WorkbenchError
from workbench.gui.coverage_choices import TestSetChoice
from workbench.gui.jobs import LONG, Job
from workbench.gui.keyed_jobs import KeyedJobs
from workbench.gui.session import Session

WAITING, RUNNING, DONE, FAILED, CANCELLED = "waiting", "running", "done", "failed", "cancelled"
KEPT_RUNS = 16  # finished sets kept for going back to an earlier request (a few MB each)
KEPT_SECTIONS = 4  # KMNC sections per input: 60,000 inputs × 258 neurons is 31 MB


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

    def result(self, criterion: str):
        return self.measured.results.get(criterion) if self.measured is not None else None

    def criterion_error(self, criterion: str) -> BaseException | None:
        if self.error is not None:
            return self.error
        return self.measured.errors.get(criterion) if self.measured is not None else None


class CoverageRuns(QObject):
    """`request(request, choices)`; `runs` holds the current `SetRun`s in the chosen order."""

    changed = Signal(str)  # a set's state, values or results changed (its key)
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
                self.runs[key] = SetRun(run.choice, fresh=True)
        self._advance()

    def retry(self, key: str) -> None:
        run = self.runs.get(key)
        if run is not None and run.state in (FAILED, CANCELLED):
            self._ask_importance_again()
            self.runs[key] = SetRun(run.choice)
            self._advance()

    def _ask_importance_again(self) -> None:
        """A relevance computation that failed or was cancelled is started again (IDC waits for it)."""
        request = self.current
        if request is not None and "idc" in request.criteria:
            key = (request.model, request.dataset, request.layer)
            if key in self.session.importance_errors and request.model in self.session.models:
                self.session.compute_importance(*key)

    def cancel(self) -> None:
        for run in self.runs.values():
            if run.job is not None and run.job.record.active:
                run.job.cancel()
        self.sections.cancel()

    def busy(self) -> bool:
        return any(run.state == RUNNING for run in self.runs.values())

    # --- running the sets in turn ---------------------------------------------------------------------

    def _advance(self) -> None:
        """Start the next set whose inputs are there, unless one is running; ask for what is missing."""
        request = self.current
        if request is None or self.busy():
            for key, run in self.runs.items():
                self.changed.emit(key)
            return
        for key, run in self.runs.items():
            if run.state != WAITING:
                continue
            missing = self._missing(request, run)
            run.waiting_for = missing
            if not missing:
                self._submit(request, run)
                break
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
        if "idc" in request.criteria:
            importance_key = (request.model, request.dataset, request.layer)
            self.importance_error = session.importance_errors.get(importance_key)
            if session.importance(*importance_key) is None and self.importance_error is None:
                session.compute_importance(*importance_key)
                return f"the relevance of {request.layer}'s neurons (for IDC)"
        return ""

    def _fail(self, run: SetRun, error: BaseException, details: str = "") -> None:
        run.state, run.error, run.details = FAILED, error, details

    def _submit(self, request: CoverageRequest, run: SetRun) -> None:
        session, choice = self.session, run.choice
        data = session.datasets[choice.dataset]
        # A split of the model's own dataset goes by name, so stored results are found by it; a stored
        # set is read on the job's thread.
        if choice.stored:
            run.test_split = choice.stored
        else:
            run.test_split = choice.split if choice.dataset == request.dataset else data.split(choice.split)
        run.test_indices = None
        if choice.needs_predictions:
            predictions = session.evaluation(request.model, choice.dataset, choice.split)["predictions"]
            run.test_indices = choice.indices(data.split(choice.split).labels, predictions)
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
