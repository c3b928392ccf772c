"""Job functions for the worker-process tests: module-level, so the child can import them by name."""

from __future__ import annotations

import os
import signal
import time

import numpy as np

from workbench.core.errors import WorkbenchError


def count(ctx, n: int, data=None, pause: float = 0.0):
    """Reports n steps and hands out each step as a partial result; returns (n, data)."""
    for i in range(n):
        ctx.progress(i, n, f"step {i}")
        ctx.partial({"step": i, "data": data})
        time.sleep(pause)
    ctx.progress(n, n, "done")
    return n, data


def until_cancelled(ctx, limit_s: float):
    """Reports every 10 ms until cancelled (its report then raises); gives up after `limit_s`, a bound that
    turns a cancel that never arrives into a failed test rather than a hung one."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        ctx.progress(0, 1, "waiting for the cancel")
        time.sleep(0.01)
    return "never cancelled"


def tell(ctx, texts: list[str]):
    """Gives each text as a notice, one of them from a sub-step's context."""
    ctx.notice(texts[0])
    for text in texts[1:]:
        ctx.stage(0, 1, "sub-step").notice(text)
    return len(texts)


def pixel_sum(ctx, data, split: str = "train") -> int:
    return int(data.split(split).images.astype(np.int64).sum())


def fail(ctx):
    raise WorkbenchError("The input has 3 channels but the model takes 1.", "Choose a grayscale dataset.")


def fail_plainly(ctx):
    raise KeyError("layer")


def die(ctx):
    ctx.progress(0, 1, "about to die")
    os.kill(os.getpid(), signal.SIGKILL)


def save_then(ctx, how: str, project=None):
    """Stages one artifact, then finishes, fails or waits to be cancelled."""
    project.save_artifact("result", f"saved by a {how} job", {"v": np.arange(4)}, how=how)
    if how == "failing":
        raise WorkbenchError("It failed after staging.")
    while how == "cancelled":
        ctx.progress(0, 1, "waiting")
        time.sleep(0.01)
    return project.names


def double_in_place(ctx, images: np.ndarray) -> np.ndarray:
    images *= 2  # arrays arrive writable, as the caller's were
    return images


def reverse_each(ctx, arrays: list[np.ndarray]) -> list[np.ndarray]:
    for array in arrays:
        array[...] = array[::-1].copy()  # in place: each arrives writable
    return arrays
