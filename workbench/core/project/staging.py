"""A job's staged save: what a job stores is committed together when it succeeds, dropped otherwise.

A job gets a `StagedProject` where it would get a `Project`. Finding and reading stored results go
straight to the project; each `save_artifact` writes its HDF5 file at once, under a temporary name,
on the job's own thread, so the UI thread never writes arrays. `commit()` renames every staged file
into place and indexes them in one change of `project.json`; `discard()` removes them. Used as a
context manager it commits when the block ends normally and discards when it raises (a failure or a
cancellation), so a job that stops half-way leaves the project as it was.

`run_staged` is the one way the CLI and the GUI run a job that saves: the same call, the same
commit at the end, whatever shows the progress.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from workbench.core.project.folder import Project, StagedArtifact


class StagedProject:
    """A project as one job sees it: reads go through, saves wait for `commit()`.

    `reuse=False` hides the stored results from the job, so it computes afresh (the user asked
    for a recomputation). On a read-only project nothing is staged: the job still runs and
    returns its result, and `unsaved` names what could not be stored.
    """

    def __init__(self, project: Project, reuse: bool = True):
        self.project = project
        self.reuse = reuse
        self.staged: list[StagedArtifact] = []
        self.unsaved: list[str] = []
        self.committed: list[str] = []

    # --- reading: the project as it is -------------------------------------------------------------

    @property
    def folder(self):
        return self.project.folder

    @property
    def read_only(self) -> bool:
        return self.project.read_only

    @property
    def testsets(self) -> list[dict]:
        return self.project.testsets

    @property
    def datasets(self) -> list[str]:
        return self.project.datasets

    def artifacts(self, kind: str | None = None) -> dict[str, dict]:
        return self.project.artifacts(kind) if self.reuse else {}

    def find_artifact(self, kind: str, **match) -> str | None:
        return self.project.find_artifact(kind, **match) if self.reuse else None

    def load_artifact(self, name: str, kind: str | None = None):
        return self.project.load_artifact(name, kind)

    def ensure_writable(self) -> None:
        self.project.ensure_writable()

    # --- writing: staged until commit ----------------------------------------------------------------

    def save_artifact(self, kind: str, name: str, arrays: dict[str, np.ndarray], **how) -> dict:
        """Stage an artifact (its file is written now, under a temporary name); returns its index entry."""
        if self.project.read_only:
            self.unsaved.append(name)
            return {"kind": kind, "provenance": how}
        earlier = [s for s in self.staged if s.name == name]  # saved twice: the last one counts
        self.project.discard(earlier)
        self.staged = [s for s in self.staged if s.name != name]
        item = self.project.stage_artifact(kind, name, arrays, **how)
        self.staged.append(item)
        return item.entry

    @property
    def names(self) -> list[str]:
        """The names of the staged artifacts, in the order they were saved."""
        return [s.name for s in self.staged]

    def commit(self) -> list[str]:
        """Rename and index everything staged, in one change; returns the names committed."""
        staged, self.staged = self.staged, []
        try:
            self.project.commit(staged)
        except BaseException:
            self.project.discard(staged)
            raise
        self.committed += [s.name for s in staged]
        return [s.name for s in staged]

    def discard(self) -> None:
        staged, self.staged = self.staged, []
        self.project.discard(staged)

    def __enter__(self) -> "StagedProject":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def run_staged(ctx, job: Callable, project: Project | None, *args, reuse: bool = True,
               on_commit: Callable[[StagedProject], None] | None = None, **kwargs):
    """Run `job(ctx, *args, project=staged, **kwargs)` and commit what it saved once it has finished;
    `on_commit(staged)` is told what was committed (and what could not be stored).

    Cancelling up to the moment of the commit stores nothing. Without a project the job runs with
    `project=None` and stores nothing.
    """
    if project is None:
        return job(ctx, *args, project=None, **kwargs)
    with StagedProject(project, reuse=reuse) as staged:
        result = job(ctx, *args, project=staged, **kwargs)
        ctx.check()  # the last moment to cancel before anything is stored
    if on_commit is not None:
        on_commit(staged)
    return result
