"""Jobs by key: one in flight per key, results cached by key, and a newer request superseding an
older one of the same group. The one way views and the session ask for work.

A key names what a result is (a model and layer, a neuron's gallery, a test set's coverage). Asking
for a key that is running joins that job; asking for a key that is cached answers at once; asking
for another key of the same `group` cancels the older job when it is no longer wanted (a neuron
clicked after another). Results land in `results` (errors in `errors`) before `ended` fires, so
every view that asked finds them. Saving goes through the runner's staged project (`project=`),
so no caller can forget to store a result.

Lookups take a key whole or in parts: `result("gallery", key)` is `result(("gallery", key))`, so a
view can key its panels' jobs by (panel, key).
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

from PySide6.QtCore import QObject, Signal

from workbench.gui.session.jobs import Job, JobRunner


class KeyedJobs(QObject):
    """Cached, de-duplicated, superseding jobs on a `JobRunner`."""

    ended = Signal(object)  # the key whose job finished, failed or was cancelled

    def __init__(self, runner: JobRunner, parent: QObject | None = None, cancelled_error: Callable | None = None,
                 keep: int | None = None):
        super().__init__(parent)
        self.runner = runner
        self.results: dict[Hashable, Any] = {}
        self.errors: dict[Hashable, BaseException] = {}
        self.details: dict[Hashable, str] = {}  # key → the traceback of an unexpected error
        self.jobs: dict[Hashable, Job] = {}  # the job of each key while it runs (or waits)
        self._groups: dict[Hashable, Hashable] = {}
        # what a cancelled key records as its error (None: nothing, the key can simply be asked again)
        self.cancelled_error = cancelled_error
        self.keep = keep  # at most this many results are kept (the oldest go first); None: all

    # As a container it holds the jobs that run: `key in jobs`, `jobs[key]`, `len(jobs)`, `not jobs`.
    def __contains__(self, key: Hashable) -> bool:
        return self.running(key)

    def __getitem__(self, key: Hashable) -> Job:
        if not self.running(key):
            raise KeyError(key)
        return self.jobs[key]

    def __len__(self) -> int:
        return sum(1 for key in self.jobs if self.running(key))

    def result(self, *key: Hashable):
        return self.results.get(_whole(key))

    def error(self, *key: Hashable) -> BaseException | None:
        return self.errors.get(_whole(key))

    def running(self, *key: Hashable) -> bool:
        """Whether a job for `key` runs (or waits) and was not cancelled: one that was is not joined."""
        job = self.jobs.get(_whole(key))
        return job is not None and job.record.active and not job.ctx.cancelled

    def run(self, key: Hashable, name: str, fn: Callable, *args, group: Hashable | None = None,
            then: Callable[[Any], None] | None = None, cached: bool = False, **submit) -> Job | None:
        """Submit `fn(ctx, *args)` for `key` unless it runs already (then it is joined).

        With `cached`, a result already held is handed to `then` at once and nothing runs. With
        `group`, a running job of the group for another key is cancelled. `submit` goes to
        `JobRunner.submit` (lane, project, reuse, view, report_errors, device, uses_device, …).
        """
        if cached and key in self.results:
            if then is not None:
                then(self.results[key])
            return None
        if self.running(key):
            job = self.jobs[key]
            if then is not None:
                job.finished.connect(then)
            return job
        if group is not None:
            for other, job in list(self.jobs.items()):
                if other != key and self._groups.get(other) == group and job.record.active:
                    job.cancel()
        self.errors.pop(key, None)
        submit.setdefault("report_errors", False)
        job = self.runner.submit(name, fn, *args, **submit)
        self.jobs[key] = job
        self._groups[key] = group
        record = job.record  # the slots keep the record, not the job: a slot holding its sender leaks it

        def current() -> bool:  # a superseded job's end must not touch the key's newer job
            newer = self.jobs.get(key)
            return newer is not None and newer.record.id == record.id

        def finished(result) -> None:
            if current():
                self.errors.pop(key, None)
                self.results.pop(key, None)
                self.results[key] = result
                while self.keep is not None and len(self.results) > self.keep:
                    del self.results[next(iter(self.results))]

        def failed(exc: BaseException) -> None:
            if current():
                self.errors[key], self.details[key] = exc, record.details

        def cancelled() -> None:
            if current() and self.cancelled_error is not None:
                self.errors[key], self.details[key] = self.cancelled_error(name), ""

        def ended() -> None:
            if current():
                del self.jobs[key]  # the result is kept in `results`; the job itself can go
                self.ended.emit(key)

        job.finished.connect(finished)  # before `then`: the result is in place when it runs
        if then is not None:
            job.finished.connect(then)
        job.failed.connect(failed)
        job.cancelled.connect(cancelled)
        job.ended.connect(ended)
        return job

    def is_current(self, key: Hashable, job_id: int) -> bool:
        """Whether job `job_id` is still the running job of `key` and was not cancelled (its partial
        results count)."""
        current = self.jobs.get(key)
        return current is not None and current.record.id == job_id and not current.ctx.cancelled

    def cancel(self, group: Hashable | None = None) -> None:
        """Cancel the running jobs (of one group, or all)."""
        for key, job in self.jobs.items():
            if job.record.active and (group is None or self._groups.get(key) == group):
                job.cancel()

    def forget(self, keep: Callable[[Hashable], bool]) -> None:
        """Drop cached results and errors of the keys `keep` says no to (e.g. a deleted artifact's).

        The dictionaries are changed in place: callers may hold them."""
        for table in (self.results, self.errors, self.details):
            for k in [k for k in table if not keep(k)]:
                del table[k]


def _whole(parts: tuple) -> Hashable:
    return parts[0] if len(parts) == 1 else parts
