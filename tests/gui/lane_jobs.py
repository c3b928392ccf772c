"""Job functions for the GUI tests that run in a worker process: module-level, so the child imports them."""

from __future__ import annotations

import time
from pathlib import Path


def wait_for(ctx, flag: str) -> str:
    """A long job, as far as the lanes are concerned: it runs until the file `flag` exists."""
    while not Path(flag).exists():
        ctx.progress(0, 1, "training")
        time.sleep(0.02)
    return "released"


def sum_of_range(ctx, n: int) -> int:
    """The sum of 0 … n − 1: as shards when the job's distribution asks for them, else in one pass."""
    from workbench.core.execution.shard_plan import range_plan
    from workbench.core.execution.sharding import input_ranges, run_plan, sharding

    if not sharding(ctx):
        return sum_in_one_pass(ctx, n)
    return run_plan(ctx, range_plan("sum", None, input_ranges(ctx, n, 1), sum_of_piece, sum))


def sum_of_piece(ctx, shared, piece) -> int:
    return sum(range(*piece))


def sum_in_one_pass(ctx, n: int) -> int:
    """The same sum by a job that cannot shard."""
    return sum(range(n))
