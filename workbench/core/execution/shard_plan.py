"""What a job that splits into shards is: a plan of independent pieces, cut at batch boundaries, with their
merge; the progress of its shards; and how it ends when a shard fails or the job is stopped.

Where a plan's shards run — here, one after another, or on a Ray cluster — is `core.execution.sharding`'s
concern; the executors (`sharding.LocalShards`, `ray_cluster.RayShards`) share what is here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext


@dataclass
class ShardPlan:
    """How one job runs as shards (see the module docstring). `run` must be a module-level function so a
    cluster's workers can import it; `sizes[i]` is piece i's work in `units`, for progress."""

    name: str
    shared: Any
    pieces: list
    run: Callable[[JobContext, Any, Any], Any]
    merge: Callable[[list], Any]
    sizes: list[int]
    units: str = "inputs"
    # {shard index: part} finished so far → the partial results to hand out now (a list)
    partial: Callable[[dict], list] | None = None
    describe: Callable[[Any], str] = field(default=lambda piece: str(piece))
    # a stop that keeps what was found: {shard index: part} finished → the job's result (None: a stop cancels)
    on_stop: Callable[[dict], Any] | None = None

    def __post_init__(self):
        if len(self.sizes) != len(self.pieces):
            raise ValueError("a plan needs one size per piece")

    @property
    def total(self) -> int:
        return int(sum(self.sizes))


def range_plan(name: str, shared, ranges: list[tuple[int, int]], run, merge, **options) -> ShardPlan:
    """A plan over contiguous (start, stop) ranges of inputs: each sized by its length, named by its bounds."""
    return ShardPlan(name, shared, list(ranges), run, merge, [b - a for a, b in ranges],
                     describe=lambda piece: f"inputs {piece[0]:,}–{piece[1] - 1:,}", **options)


class ShardFailed(WorkbenchError):
    """A shard failed for good; `parts` holds the parts of the shards that finished ({index: part}), so the
    work done is not lost with the job."""

    def __init__(self, message: str, hint: str = "", parts: dict | None = None):
        super().__init__(message, hint)
        self.parts = parts or {}


def split_range(n: int, shards: int, align: int = 1) -> list[tuple[int, int]]:
    """`shards` contiguous (start, stop) ranges covering 0..n, as equal as `align` allows (every start a
    multiple of `align`, so batch and curve boundaries fall where they fall in one pass); empty ranges
    are left out."""
    align = max(1, int(align))
    blocks = -(-n // align)  # ceil
    shards = max(1, min(int(shards), blocks)) if n else 1
    bounds = [min(n, (blocks * k // shards) * align) for k in range(shards + 1)]
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def range_inputs(indices, piece: tuple[int, int]) -> np.ndarray:
    """The inputs of a range piece: positions piece[0]..piece[1] of `indices` (of all the inputs when None)."""
    positions = np.arange(piece[0], piece[1], dtype=np.int64)
    return positions if indices is None else np.asarray(indices)[positions]


def split_list(items, shards: int) -> list[list]:
    """`items` in `shards` contiguous runs of near-equal length, in order (none empty)."""
    items = list(items)
    return [items[a:b] for a, b in split_range(len(items), shards)]


class ShardProgress:
    """The job's progress as the sum of its shards' (each shard's last report, in the plan's units)."""

    def __init__(self, ctx: JobContext, plan: ShardPlan):
        self.ctx, self.plan = ctx, plan
        self.done = [0] * len(plan.pieces)

    def report(self, index: int, done: int, total: int | None = None) -> None:
        """Shard `index` has done `done` of its `total` steps (of its units when `total` is None): its share
        of the plan's units, never going back (a shard's second stage starts its count again). Silent once
        the job is cancelled: the executor then ends the plan (`stopped`), keeping what was found where the
        plan says so."""
        size = self.plan.sizes[index]
        units = size * done // total if total else int(done)
        self.done[index] = max(self.done[index], min(units, size))
        if self.ctx.cancelled:
            return
        finished = sum(d >= s for d, s in zip(self.done, self.plan.sizes))
        self.ctx.progress(sum(self.done), self.plan.total,
                          f"{self.plan.name}: {finished} of {len(self.plan.pieces)} shards done")


def stopped(ctx: JobContext, plan: ShardPlan, parts: dict):
    """A cancelled plan's end: the result of the shards finished when it keeps what was found, else `Cancelled`."""
    if plan.on_stop is None:
        raise Cancelled()
    ctx.keep_what_was_found()
    return plan.on_stop(dict(parts))
