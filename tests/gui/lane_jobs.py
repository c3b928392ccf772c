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
