"""One way to run long work, shared by the CLI and the GUI.

A job is a plain function whose first argument is a `JobContext`. It reports progress, hands out
partial results and checks for cancellation through the context; it never knows whether a
terminal progress bar or a Qt worker thread is listening. Cancellation is cooperative:
`progress()` and `check()` raise `Cancelled` once `cancel()` was called, so a job that reports at
least once per batch stops within a batch.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from workbench.core.errors import Cancelled

ProgressCallback = Callable[[int, int, str], None]
PartialCallback = Callable[[Any], None]
NoticeCallback = Callable[[str], None]
ShardsCallback = Callable[[Any], None]  # given the job's `core.execution.sharding.Distribution`
STAGE_SCALE = 1000  # progress steps of a job made of stages
#: The name prefix of modules imported from a file rather than an installed package (plugins): a worker on
#: another machine cannot import them, so what they define travels with the job by value.
FILE_MODULE_PREFIX = "workbench_plugin_"


class SentOnce:
    """A base for what jobs read but never change in place — a dataset, a split, a loaded model (a job that
    trains works on a copy of its model): a worker process is sent such an object once and keeps it for the
    jobs after, so the data and the weights do not cross the pipe with every job."""


def resolve_device(name: str = "auto"):
    """`auto` is CUDA when present, else the CPU; anything else is passed to torch as given."""
    import torch

    from workbench.core.errors import WorkbenchError

    if name in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise WorkbenchError(f"Unknown device {name!r}.", "Use auto, cpu, cuda or cuda:N.") from exc
    if device.type not in ("cpu", "cuda"):  # meta holds no data; mps and others are not supported here
        raise WorkbenchError(f"The workbench computes on the CPU or a CUDA GPU, not on {name!r}.",
                             "Use auto, cpu, cuda or cuda:N.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise WorkbenchError(f"Device {name!r} was asked for, but no CUDA GPU is available.",
                             "Use --device cpu (or auto).")
    return device


def device_description(device) -> str:
    """A short human name for a device: 'CPU' or 'CUDA: <GPU name>'."""
    import torch

    if device.type == "cuda":
        return f"CUDA: {torch.cuda.get_device_name(device)}"
    return "CPU"


class JobContext:
    """What a running job sees of the world: progress, partial results, notices, cancellation, device."""

    def __init__(self, device: str = "auto", on_progress: ProgressCallback | None = None,
                 on_partial: PartialCallback | None = None, cancel_event=None,
                 on_notice: NoticeCallback | None = None, distribution=None,
                 on_shards: ShardsCallback | None = None):
        self._device_name = device
        # where a job that can shard runs its shards (`core.execution.sharding.Distribution`); None: as it always ran
        self.distribution = distribution
        self._device = None
        self._on_progress = on_progress
        self._on_partial = on_partial
        self._on_notice = on_notice
        self._on_shards = on_shards  # told the distribution when the job's work runs as shards
        self.notices: list[str] = []  # every notice of the job, its sub-steps' included
        # Any object with set() and is_set(): a worker process's job checks an event its parent sets.
        self._cancel = cancel_event if cancel_event is not None else threading.Event()
        self._keeping = threading.Event()  # shared with sub-contexts: see `keep_what_was_found`
        self.started = time.monotonic()

    @property
    def device_name(self) -> str:
        """The device as it was asked for ("auto", "cpu", "cuda:1"), before it is resolved."""
        return self._device_name

    @property
    def device(self):
        """The torch device the job should compute on, resolved on first use."""
        if self._device is None:
            self._device = resolve_device(self._device_name)
        return self._device

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def check(self) -> None:
        """Raise `Cancelled` if the job was cancelled (and has not chosen to keep what it found)."""
        if self._cancel.is_set() and not self._keeping.is_set():
            raise Cancelled()

    def keep_what_was_found(self) -> None:
        """Make a cancel a *stop*: the job, having caught `Cancelled`, finishes with what it found so far
        (a search's partial results, marked so), and its result is saved like a finished job's. From now
        on no check raises, for this context, the job's own and every sub-context alike: what is left of
        the job (judging and saving what was found, seconds) runs to its end."""
        self._keeping.set()

    @property
    def stopped_early(self) -> bool:
        """Cancelled, and finishing with what was found (`keep_what_was_found`)."""
        return self._cancel.is_set() and self._keeping.is_set()

    def progress(self, done: int, total: int, message: str = "") -> None:
        """Report `done` of `total` steps and stop here if the job was cancelled."""
        self.check()
        if self._on_progress is not None:
            self._on_progress(done, total, message)

    def quiet(self) -> "JobContext":
        """A context for a sub-step: same device and cancellation, but it reports nothing."""
        sub = JobContext(self._device_name, distribution=self.distribution)
        sub._device, sub._cancel, sub._keeping = self._device, self._cancel, self._keeping
        sub.notices, sub._on_notice = self.notices, self._on_notice  # a sub-step's notice is the job's
        sub._on_shards = self._on_shards
        return sub

    def reporting_to(self, on_progress: ProgressCallback) -> "JobContext":
        """A quiet sub-context whose progress goes to `on_progress` (a shard's, counted in its own units)."""
        sub = self.quiet()
        sub._on_progress = on_progress
        return sub

    def stage(self, index: int, count: int, label: str = "", partials: bool = False, span: int = 1) -> "JobContext":
        """A context for step `index` of `count` steps (and the `span` − 1 after it): its progress fills that
        slice of this job's bar.

        Partial results of the step are passed on only with `partials`; else the job hands out its own.
        """
        sub = self.quiet()
        if partials:
            sub._on_partial = self.partial

        def forward(done: int, total: int, message: str) -> None:
            fraction = (index + span * (min(done / total, 1.0) if total else 1.0)) / count
            self.progress(round(fraction * STAGE_SCALE), STAGE_SCALE, f"{label}: {message}" if label else message)

        sub._on_progress = forward
        return sub

    def partial(self, result: Any) -> None:
        """Hand out an intermediate result (a curve point, a heatmap row) for views to show."""
        if self._on_partial is not None:
            self._on_partial(result)

    def notice(self, text: str) -> None:
        """Tell the user something the job decided on their behalf (a damaged stored result computed
        again): the CLI prints it on stderr, the window in its status bar and the job's record."""
        self.notices.append(text)
        if self._on_notice is not None:
            self._on_notice(text)

    def runs_shards(self, distribution) -> None:
        """Say that the job's work runs as shards, where `distribution` says (`core.execution.sharding.Distribution`):
        the jobs panel shows it beside the device. Only a job that does shard says so; one that cannot
        shard runs in one pass whatever the user chose."""
        if self._on_shards is not None:
            self._on_shards(distribution)


class InlineExecutor:
    """Runs a job on the calling thread: the CLI's way, and the GUI's for its interactive lanes.

    `ProcessExecutor` (`core.execution.worker_process`) has the same `run` and runs the job in a child process.
    """

    def run(self, ctx: JobContext, fn: Callable, args: tuple = (), kwargs: dict | None = None, *,
            project=None, reuse: bool = True, on_commit: Callable[[list, list], None] | None = None,
            on_device: Callable[[str], None] | None = None):
        """`fn(ctx, *args, **kwargs)`; with `project`, saving through a staged save committed when it
        has finished (`on_commit(committed, unsaved)` is told what was stored). `on_device` hears the
        device's description before the job starts."""
        from workbench.core.project.staging import run_staged

        kwargs = kwargs or {}
        if on_device is not None:  # resolving the device imports torch: part of the job's time
            on_device(device_description(ctx.device))
        if project is None:
            return fn(ctx, *args, **kwargs)
        return run_staged(ctx, fn, project, *args, reuse=reuse, **kwargs,
                          on_commit=None if on_commit is None else
                          (lambda staged: on_commit(staged.committed, staged.unsaved)))


BACKGROUND_NICENESS = 10  # how far background work steps back behind the window's thread
NICENESS_VARIABLE = "WORKBENCH_BACKGROUND_NICENESS"


def background_niceness() -> int:
    """How far background work steps back: `WORKBENCH_BACKGROUND_NICENESS` (0 to 19) where it is set, so that
    on a machine shared with other work of normal priority the jobs are not starved by it (0 runs them at the
    window's priority); `BACKGROUND_NICENESS` otherwise, or where the value is not a whole number."""
    value = os.environ.get(NICENESS_VARIABLE, "").strip()
    try:
        return min(19, max(0, int(value))) if value else BACKGROUND_NICENESS
    except ValueError:
        return BACKGROUND_NICENESS


def run_in_background() -> None:
    """Lower the calling thread's scheduling priority (and that of the threads it starts), so that on a
    machine whose cores are all computing, the window's thread is scheduled as soon as it has
    something to draw rather than waiting its turn behind the jobs. On Linux a priority is a thread's
    own; elsewhere (where it is the process's) this is done only in a worker process. Never raised back:
    a background thread stays one. Best effort: where it is not allowed, nothing changes."""
    import sys

    niceness = background_niceness()
    if not hasattr(os, "setpriority") or niceness == 0:
        return
    try:
        if sys.platform.startswith("linux"):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
    except OSError:
        pass


def run_process_in_background() -> None:
    """`run_in_background` for a whole worker process, before it starts its compute threads."""
    niceness = background_niceness()
    if not hasattr(os, "nice") or niceness == 0:
        return
    try:
        os.nice(niceness)
    except OSError:
        pass


def share_cores(lanes: int = 2) -> int:
    """Give each of `lanes` compute lanes an equal share of all cores but one, so the window stays
    responsive and a click's job progresses beside a long one instead of fighting it for threads
    (OpenMP teams spinning against each other slow a step many times over). Returns torch's thread count.

    Only when the user has not chosen a thread count (OMP_NUM_THREADS) and torch would use them all.
    """
    import torch

    cores = os.cpu_count() or 1
    if "OMP_NUM_THREADS" not in os.environ and cores > 1 and torch.get_num_threads() >= cores:
        torch.set_num_threads(max(1, (cores - 1) // max(1, lanes)))
    return torch.get_num_threads()
