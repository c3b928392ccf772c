"""Jobs that split into independent shards, and where the shards run: here, one after another, or on Ray.

A long job that is a stream of independent batches (inputs) or independent tasks (seeds, runs of an
experiment grid) says so with a `ShardPlan` (`core.execution.shard_plan`): the objects every shard needs (`shared`: the model, the
fitted criteria, the data), one small `piece` per shard (a range of inputs, a list of seeds), a
`run(ctx, shared, piece)` that computes one shard's part, and a `merge(parts)` that combines the
parts in shard order into the job's result. The job never knows where its shards ran. A plan with
`on_stop` turns a stop into a result made of the shards finished (a search keeps what it found);
without one, cancelling cancels the job.

`Distribution` is the user's choice, carried by the job's context (`JobContext.distribution`): `local`
(the default) runs every job as it always ran; `ray` runs the plans of jobs that can shard on a Ray
cluster (`core.execution.ray_cluster`), sending `shared` to the object store once. `LocalShards` runs a plan's
shards one after another on the calling thread: the reference that a cluster's results are compared
with, and what a plan runs on when its job is asked to shard without a cluster (`--shards N`).

Progress is the sum of the shards' own; a shard reports its progress in its plan's `units` (inputs,
seeds). A plan's `partial(parts)` turns the parts finished so far into a partial result for views.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.execution.shard_plan import ShardPlan, ShardProgress, split_range, stopped

EXECUTORS = ("local", "ray")
SHARDS_PER_WORKER = 4  # more shards than workers: an idle worker takes the next, and progress is finer


@dataclass(frozen=True)
class Distribution:
    """Where the shards of a job that can shard run: `local` or on a `ray` cluster at `address` (None:
    a local Ray instance with the machine's cores; "auto": the cluster this machine belongs to;
    "ray://HOST:PORT": a remote one), in `shards` shards (None: a few per worker)."""

    executor: str = "local"
    address: str | None = None
    shards: int | None = None

    def __post_init__(self):
        if self.executor not in EXECUTORS:
            raise WorkbenchError(f"Unknown executor {self.executor!r}.", f"Use one of: {', '.join(EXECUTORS)}.")
        if self.shards is not None and (isinstance(self.shards, bool) or not isinstance(self.shards, int)
                                        or self.shards < 1):
            raise WorkbenchError(f"The number of shards must be a whole number of at least 1; got {self.shards!r}.",
                                 "Leave it out for a few shards per worker.")

    @property
    def sharded(self) -> bool:
        """Whether jobs that can shard should build their plans (on Ray, or locally when shards are asked)."""
        return self.executor == "ray" or self.shards is not None

    def describe(self) -> str:
        where = "this machine" if self.executor == "local" else f"Ray ({self.address or 'a local instance'})"
        return where + (f", {self.shards} shards" if self.shards else "")

    def short(self) -> str:
        """A word or two for a table cell: 'Ray', or '3 shards' here."""
        return "Ray" if self.executor == "ray" else f"{self.shards} shards"


LOCAL = Distribution()


def shard_count(distribution: Distribution, work: int, workers: int, smallest: int = 1) -> int:
    """How many shards to cut `work` units into: as asked, else a few per worker, each at least `smallest`."""
    if distribution.shards is not None:
        return max(1, min(distribution.shards, work)) if work else 1
    return max(1, min(SHARDS_PER_WORKER * max(1, workers), work // max(1, smallest))) if work else 1


class LocalShards:
    """Runs a plan's shards one after another on the calling thread (see the module docstring)."""

    workers = 1

    def run(self, ctx: JobContext, plan: ShardPlan):
        progress = ShardProgress(ctx, plan)
        parts: dict[int, Any] = {}
        ctx.progress(0, plan.total, f"{plan.name}: {len(plan.pieces)} shards")
        for index, piece in enumerate(plan.pieces):
            shard_ctx = ctx.reporting_to(lambda done, total, message, i=index: progress.report(i, done, total))
            shard_ctx.distribution = LOCAL  # a shard runs in one pass, as on a cluster's worker
            parts[index] = plan.run(shard_ctx, plan.shared, piece)
            if ctx.cancelled:  # not `check()`: a shard that kept what it found has made checks pass
                return stopped(ctx, plan, parts)
            progress.report(index, plan.sizes[index])
            for result in plan.partial(dict(parts)) if plan.partial is not None else ():
                ctx.partial(result)
        return plan.merge([parts[i] for i in range(len(plan.pieces))])


_clusters: dict[tuple, Any] = {}  # one connection per address and process, kept for the next job


def forget_clusters() -> None:
    """Drop the kept cluster connections (after `ray.shutdown()`, say), so the next job connects anew."""
    _clusters.clear()


def executor_for(distribution: Distribution):
    """The executor of a distribution: `LocalShards`, or the Ray cluster it names (connected on first use)."""
    if distribution.executor == "local":
        return LocalShards()
    key = (distribution.executor, distribution.address)
    if key not in _clusters:
        from workbench.core.execution.ray_cluster import RayShards

        _clusters[key] = RayShards(distribution.address)
    return _clusters[key]


def distribution_of(ctx: JobContext) -> Distribution:
    return ctx.distribution if isinstance(ctx.distribution, Distribution) else LOCAL


def sharding(ctx: JobContext) -> bool:
    """Whether the job of this context should run as shards (`Distribution.sharded`)."""
    return distribution_of(ctx).sharded


def running_here(ctx: JobContext) -> JobContext:
    """A sub-context of `ctx` (its progress, device and cancellation) whose jobs run on this machine, unsharded."""
    sub = ctx.reporting_to(ctx.progress)
    sub.distribution = LOCAL
    return sub


def run_plan(ctx: JobContext, plan: ShardPlan):
    """Run `plan` where the job's context says (`ctx.distribution`), and return its merged result."""
    distribution = distribution_of(ctx)
    ctx.runs_shards(distribution)
    return executor_for(distribution).run(ctx, plan)


def input_ranges(ctx: JobContext, total: int, batch: int) -> list[tuple[int, int]]:
    """`total` inputs cut for the context's distribution into ranges that start at multiples of `batch`."""
    return split_range(total, planned_shards(ctx, total, smallest=batch), batch)


def planned_shards(ctx: JobContext, work: int, smallest: int = 1) -> int:
    """How many shards a job of `work` units should plan for its context's distribution."""
    distribution = distribution_of(ctx)
    workers = executor_for(distribution).workers if distribution.executor == "ray" else 1
    return shard_count(distribution, work, workers, smallest)
