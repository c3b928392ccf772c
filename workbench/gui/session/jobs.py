"""Running core jobs on worker threads, reported to the UI thread as Qt signals.

A job is a plain core function `fn(ctx, *args, **kwargs)` (see `workbench.core.execution.jobs`). The runner
gives it a `JobContext` whose callbacks emit signals from the worker thread; because the emitting
object lives in the UI thread, Qt queues them there, so slots never run on a worker. The UI thread
alone updates each `JobRecord`, which is what the jobs panel shows.

Cancelling sets the context's flag; the job raises `Cancelled` at its next progress report (at
least once per batch). `shutdown()` cancels everything and waits for the pools, so closing the
window leaves no thread behind.

Jobs run in lanes, one job at a time per compute lane, so a click never waits behind a training
run: the "long" lane takes training, retraining, convergence, fuzzing and full-dataset passes; the
"interactive" lane takes what a click asks for and should see within seconds (a gallery, an
explanation, an ablation check, a selection); the "io" lane, with two threads, reads files. The
two compute lanes share the cores (`core.execution.jobs.share_cores`), so both progress. A queued job's
record says what it waits for.

With `long_jobs=PROCESS` (the application's choice) the long lane's thread hands each job to a
worker process (`core.execution.worker_process`) and waits: a training loop's Python then runs under another
interpreter lock, so the window's never waits for it. The interactive lane has a worker process of
its own for the jobs that say they are `portable` (galleries, explanations, the ablation check). The job, its signals and its record are the
same either way; a job whose inputs cannot be sent there runs on the lane's thread, and its
record's `where` says so. Where worker processes cannot start at all (a script opened the window without an
`if __name__ == "__main__":` guard, `core.execution.worker_process.WorkersCannotStart`), every job runs on its lane's
thread, and `workers_unavailable` says why, once.

A job given a `project` saves through a `StagedProject`: what it stores is committed on its
worker thread when it finishes, and dropped when it fails or is cancelled, so no view can forget
to save a result and the UI thread never writes arrays.
"""

from __future__ import annotations

import itertools
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

from workbench.core.errors import Cancelled
from workbench.core.execution.jobs import InlineExecutor, JobContext, run_in_background
from workbench.gui.session import ui_gc

QUEUED, RUNNING, DONE, CANCELLED, FAILED = "queued", "running", "done", "cancelled", "failed"
ACTIVE_STATES = (QUEUED, RUNNING)
LONG, INTERACTIVE, IO = "long", "interactive", "io"
THREAD, PROCESS = "thread", "process"  # where the long lane runs its jobs
LANES = {LONG: 1, INTERACTIVE: 1, IO: 2}  # threads per lane
KEPT_FINISHED = 200  # finished jobs (and their results) kept for the jobs panel
UI_SWITCH_INTERVAL_S = 0.001

# Progress signals are throttled: 20 updates a second keep a bar smooth and cost the UI nothing,
# where a training loop reporting every batch would send hundreds.
PROGRESS_INTERVAL_S = 0.05


@dataclass
class JobRecord:
    """What the jobs panel shows about one job; written only in the UI thread."""

    id: int
    name: str
    state: str = QUEUED
    done: int = 0
    total: int = 0
    message: str = ""
    device: str = ""
    submitted: float = 0.0
    started: float | None = None
    ended: float | None = None
    error: BaseException | None = None
    details: str = ""  # the traceback of an unexpected error
    lane: str = LONG
    view: str = ""  # the view that shows the result (double-clicking the job opens it)
    where: str = ""  # where a long job runs: the worker process, or this one (and why)
    shards: str = ""  # where the job's shards run (a Ray cluster), once its work runs as shards
    shards_short: str = ""  # the same in a word or two, for the device column ("Ray")
    saved: list[str] = field(default_factory=list)  # artifacts the job committed to the project
    notices: list[str] = field(default_factory=list)  # what the job decided for the user (JobContext.notice)
    unsaved: list[str] = field(default_factory=list)  # results it could not store (read-only project)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def elapsed(self) -> float:
        if self.started is None:
            return 0.0
        return (self.ended or time.monotonic()) - self.started

    @property
    def eta(self) -> float | None:
        """Seconds left, extrapolated from the rate so far; None until there is a rate."""
        if self.state != RUNNING or not self.total or self.done <= 0:
            return None
        return self.elapsed * (self.total - self.done) / self.done


class _Bridge(QObject):
    """Signals emitted on the worker thread; they arrive queued in the UI thread, where this lives."""

    started = Signal(float)
    device = Signal(str, str)  # the device's description, where the job runs (a worker process)
    progress = Signal(int, int, str)
    partial = Signal(object)
    notice = Signal(str)
    shards = Signal(object)  # the `Distribution` the job's work runs its shards on
    saved = Signal(list, list)  # artifacts committed, results that could not be stored (before finished)
    finished = Signal(object)
    failed = Signal(object, str)
    cancelled = Signal()


class _Runnable(QRunnable):
    def __init__(self, job: "Job", fn: Callable, args: tuple, kwargs: dict):
        super().__init__()
        self.setAutoDelete(False)  # the Job keeps it; Python, not the pool, owns it
        self.job, self.fn, self.args, self.kwargs = job, fn, args, kwargs

    def run(self) -> None:
        job = self.job
        bridge, ctx, executor = job.bridge, job.ctx, job.executor
        run_in_background()  # a lane's thread computes behind the window's
        if ctx.cancelled:
            bridge.cancelled.emit()
            return
        bridge.started.emit(time.monotonic())
        try:
            if not job.uses_device:
                bridge.device.emit("CPU", "")
            result = executor.run(
                ctx, self.fn, self.args, self.kwargs, project=job.project, reuse=job.reuse,
                on_commit=bridge.saved.emit,
                on_device=(lambda device: bridge.device.emit(device, getattr(executor, "last_placement", "")))
                if job.uses_device else None)
        except Cancelled:
            bridge.cancelled.emit()
        except Exception as exc:  # every failure reaches the UI as a signal, never kills the thread
            bridge.failed.emit(exc, getattr(exc, "worker_traceback", None) or traceback.format_exc())
        else:
            bridge.finished.emit(result)
        finally:
            self.fn = self.args = self.kwargs = None  # drop references to models and datasets
            job.project = None


class Job(QObject):
    """A submitted job: its record, UI-thread signals and `cancel()`."""

    started = Signal()
    device_known = Signal(str)
    shards_known = Signal()  # its work runs as shards: the record says where
    progress = Signal(int, int, str)
    partial = Signal(object)
    notice = Signal(str)
    finished = Signal(object)  # the job function's return value
    failed = Signal(object)  # the exception
    cancelled = Signal()
    ended = Signal()  # after finished, failed or cancelled; the record's state is final

    def __init__(self, record: JobRecord, fn: Callable, args: tuple, kwargs: dict, device: str,
                 uses_device: bool, parent: QObject, project=None, reuse: bool = True, executor=None):
        super().__init__(parent)
        self.record = record
        self.result: Any = None
        self.report_errors = True
        self.bridge = _Bridge(self)
        self._last_progress = 0.0
        self.ctx = JobContext(device, on_progress=self._progress_from_worker, on_partial=self.bridge.partial.emit,
                              on_notice=self.bridge.notice.emit, on_shards=self.bridge.shards.emit)
        self.bridge.started.connect(self._on_started)
        self.bridge.device.connect(self._on_device)
        self.bridge.progress.connect(self._on_progress)
        self.bridge.partial.connect(self.partial)
        self.bridge.notice.connect(self._on_notice)
        self.bridge.shards.connect(self._on_shards)
        self.bridge.saved.connect(self._on_saved)
        self.bridge.finished.connect(self._on_finished)
        self.bridge.failed.connect(self._on_failed)
        self.bridge.cancelled.connect(self._on_cancelled)
        self.uses_device = uses_device
        self.pool: QThreadPool | None = None  # the lane's pool, once submitted
        self.executor = executor or InlineExecutor()
        self.project, self.reuse = project, reuse  # a project: saves are staged, committed at the end
        self.runnable = _Runnable(self, fn, args, kwargs)

    @property
    def name(self) -> str:
        return self.record.name

    def cancel(self) -> None:
        """Ask the job to stop at its next progress report; a queued job leaves its lane at once."""
        if self.record.active:
            self.ctx.cancel()
            self.record.message = "cancelling…"
            if self.record.state == QUEUED and self.pool is not None and self.pool.tryTake(self.runnable):
                self._on_cancelled()

    # --- worker thread ---------------------------------------------------------------------------

    def _progress_from_worker(self, done: int, total: int, message: str) -> None:
        now = time.monotonic()
        if done >= total or now - self._last_progress >= PROGRESS_INTERVAL_S:
            self._last_progress = now
            self.bridge.progress.emit(done, total, message)

    # --- UI thread -------------------------------------------------------------------------------

    def _on_started(self, when: float) -> None:
        r = self.record
        r.state, r.started = RUNNING, when
        self.started.emit()

    def _on_device(self, device: str, where: str) -> None:
        self.record.device, self.record.where = device, where
        self.device_known.emit(device)

    def _on_notice(self, text: str) -> None:
        self.record.notices.append(text)
        self.notice.emit(text)

    def _on_shards(self, distribution) -> None:
        r = self.record
        r.shards, r.shards_short = distribution.describe(), distribution.short()
        self.shards_known.emit()

    def _on_saved(self, committed: list, unsaved: list) -> None:
        self.record.saved, self.record.unsaved = list(committed), list(unsaved)

    def _on_progress(self, done: int, total: int, message: str) -> None:
        r = self.record
        if r.state != RUNNING:
            return
        r.done, r.total = done, total
        if not self.ctx.cancelled:
            r.message = message
        self.progress.emit(done, total, message)

    def _end(self, state: str) -> None:
        r = self.record
        r.state, r.ended = state, time.monotonic()
        if r.started is None:
            r.started = r.ended

    def _on_finished(self, result: Any) -> None:
        self.result = result
        self._end(DONE)
        # a search stopped early finishes with what it found, marked partial: the record says so
        self.record.message = "stopped; what was found so far is kept" if getattr(result, "partial", False) else ""
        self.finished.emit(result)
        self.ended.emit()

    def _on_failed(self, exc: BaseException, details: str) -> None:
        self._end(FAILED)
        self.record.error, self.record.details = exc, details
        self.record.message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        self.failed.emit(exc)
        self.ended.emit()

    def _on_cancelled(self) -> None:
        self._end(CANCELLED)
        self.record.message = "cancelled; nothing was saved"
        self.cancelled.emit()
        self.ended.emit()


class JobRunner(QObject):
    """Submits jobs to its own thread pool and keeps every job's record for the jobs panel."""

    job_added = Signal(object)
    job_changed = Signal(object)
    job_ended = Signal(object)
    job_failed = Signal(object)  # a failed job whose error should be shown to the user
    project_saved = Signal(object)  # a job that committed artifacts to the project
    job_forgotten = Signal(object)  # an old finished job dropped to bound memory (the panel drops its row)
    device_found = Signal(str)  # the first device description a job reported
    job_notice = Signal(object, str)  # a job's notice to the user (the window's status bar shows it)
    workers_unavailable = Signal(object)  # once: why worker processes cannot start (the jobs run in threads)
    _unavailable_from_lane = Signal(object)  # a lane's executor found it, on the lane's thread

    def __init__(self, parent: QObject | None = None, long_jobs: str = THREAD):
        super().__init__(parent)
        if long_jobs not in (THREAD, PROCESS):
            raise ValueError(f"long jobs run in a {THREAD} or a {PROCESS}, not {long_jobs!r}")
        self.long_jobs = long_jobs
        self.executors: dict[str, Any] = {}  # lane → executor; a lane without one runs jobs on its thread
        self._unavailable_from_lane.connect(self._on_workers_unavailable)
        if long_jobs == PROCESS:
            from workbench.core.execution.worker_process import ProcessExecutor
            from workbench.core.plugins import load_plugins

            for lane in (LONG, INTERACTIVE):  # a click's gallery must not hold the window's lock either
                self.executors[lane] = ProcessExecutor(on_unavailable=self._unavailable_from_lane.emit,
                                                       child_setup=load_plugins)
                self.executors[lane].start()  # it imports PyTorch while the window opens
        self.pools: dict[str, QThreadPool] = {}
        for lane, threads in LANES.items():
            pool = self.pools[lane] = QThreadPool(self)
            pool.setMaxThreadCount(threads)
        self.jobs: list[Job] = []
        self.device = ""
        self.distribution = None  # where long jobs that can shard run them (`core.execution.sharding.Distribution`)
        self._ids = itertools.count(1)
        self._closed = False
        ui_gc.acquire()
        self._holds_gc = True
        # A worker running Python (a training loop's small steps) hands the GIL over when the UI thread
        # asks, after at most this long: 1 ms instead of Python's 5 ms keeps the window's ticks on time.
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, UI_SWITCH_INTERVAL_S))

    def submit(self, name: str, fn: Callable, *args, device: str = "auto", uses_device: bool = True,
               report_errors: bool = True, lane: str | None = None, project=None, reuse: bool = True,
               view: str = "", portable: bool | None = None, **kwargs) -> Job:
        """Run `fn(ctx, *args, **kwargs)` on a worker thread; returns the job at once.

        `uses_device` resolves the torch device before the job starts (and so imports torch); jobs
        that only read files pass False and run in the I/O lane. `lane` is LONG (the default for
        compute) or INTERACTIVE for what a click waits for. `portable` says the job may run in its
        lane's worker process (its result pickles): long jobs may unless they say otherwise, interactive
        ones when they say so (the start-up and model loading stay here). With `project`, `fn` gets `project=` a
        `StagedProject` (`reuse=False` hides stored results) committed when the job finishes.
        Failures are announced through `job_failed` unless `report_errors` is False (the caller then
        handles `job.failed` itself).
        """
        lane = lane or (LONG if uses_device else IO)
        if lane not in LANES:
            raise ValueError(f"unknown lane {lane!r}")
        record = JobRecord(next(self._ids), name, submitted=time.monotonic(), lane=lane, view=view)
        job = Job(record, fn, args, kwargs, device, uses_device, self, project=project, reuse=reuse,
                  executor=self.executors.get(lane) if (lane == LONG if portable is None else portable) else None)
        job.report_errors = report_errors
        if lane == LONG and self.distribution is not None and self.distribution.sharded:
            job.ctx.distribution = self.distribution  # the record says so once the job's work does shard
        job.started.connect(lambda: self.job_changed.emit(job))
        job.device_known.connect(lambda device: self._on_device(job, device))
        job.shards_known.connect(lambda: self.job_changed.emit(job))
        job.progress.connect(lambda *_: self.job_changed.emit(job))
        job.notice.connect(lambda text: self.job_notice.emit(job, text))
        job.ended.connect(lambda: self._on_ended(job))
        self.jobs.append(job)
        self.job_added.emit(job)
        if self._closed:  # late requests during shutdown never start
            job.ctx.cancel()
            job._on_cancelled()
        else:
            job.pool = self.pools[lane]
            job.pool.start(job.runnable)
            self._forget_old()
        return job

    def waiting_for(self, job: Job) -> list[Job]:
        """The running jobs of a queued job's lane: what it waits for."""
        if job.record.state != QUEUED:
            return []
        return [j for j in self.jobs if j.record.lane == job.record.lane and j.record.state == RUNNING]

    def active_jobs(self) -> list[Job]:
        return [j for j in self.jobs if j.record.active]

    def is_idle(self) -> bool:
        return not self.active_jobs()

    def cancel_all(self) -> None:
        for job in self.active_jobs():
            job.cancel()
            self.job_changed.emit(job)

    def clear_finished(self) -> None:
        """Forget finished jobs (the panel drops their rows); their results go with them."""
        finished = [j for j in self.jobs if not j.record.active]
        self.jobs = [j for j in self.jobs if j.record.active]
        for job in finished:
            job.deleteLater()

    def _forget_old(self) -> None:
        """Keep at most KEPT_FINISHED finished jobs: a long session must not hold every result forever."""
        finished = [j for j in self.jobs if not j.record.active]
        for job in finished[:max(0, len(finished) - KEPT_FINISHED)]:
            self.jobs.remove(job)
            self.job_forgotten.emit(job)
            job.deleteLater()

    def shutdown(self, timeout_ms: int = 15000) -> bool:
        """Cancel every job and wait for the worker threads (`timeout_ms` < 0: as long as it takes);
        True when all have stopped."""
        self._closed = True
        self.cancel_all()
        deadline = time.monotonic() + timeout_ms / 1000
        stopped = True
        for pool in self.pools.values():
            left = -1 if timeout_ms < 0 else max(0, int((deadline - time.monotonic()) * 1000))
            stopped = pool.waitForDone(left) and stopped
        for executor in self.executors.values():
            executor.close()
        if stopped and self._holds_gc:
            self._holds_gc = False
            ui_gc.release()
            sys.setswitchinterval(self._switch_interval)
        return stopped

    def active_thread_count(self) -> int:
        return sum(pool.activeThreadCount() for pool in self.pools.values())

    def _on_device(self, job: Job, device: str) -> None:
        if job.uses_device and device != self.device:
            self.device = device
            self.device_found.emit(device)
        self.job_changed.emit(job)

    def _on_workers_unavailable(self, error) -> None:
        """Both lanes' executors find it: the user hears it once, and windows opened from here use threads."""
        if self.long_jobs == THREAD:
            return
        self.long_jobs = THREAD
        self.workers_unavailable.emit(error)

    def _on_ended(self, job: Job) -> None:
        self.job_changed.emit(job)
        if job.record.saved:
            self.project_saved.emit(job)
        self.job_ended.emit(job)
        if job.record.state == FAILED and job.report_errors:
            self.job_failed.emit(job)
