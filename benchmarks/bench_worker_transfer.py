"""Receiving a large result from the worker process: how long it takes, and how long it keeps the
interpreter lock from the window's thread.

A long job's result comes back from the worker process over a pipe (a candidate pool of 10,000
attacked images with their scores is about 70 MB). While one thread receives it, another thread
stands in for the window: it wakes every 2 ms, and each wake-up that comes late was held up by the
interpreter lock. Three ways side by side, in the same process:

- **floor**: one copy of the same bytes in memory (`numpy.copyto`), the least any transfer costs;
- **multiprocessing**: `Connection.recv_bytes_into`, which reads into a growing `BytesIO` and copies
  it into the buffer, holding the lock while it copies;
- **workbench**: `ProcessExecutor.run` returning the arrays, as a long job's result comes back.

    .venv/bin/python benchmarks/bench_worker_transfer.py [--megabytes 120] [--repeats 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

WAKE_MS = 2.0
_held: dict = {}  # the child's arrays, made once, so a run times the transfer alone


def arrays_of(ctx, megabytes: int) -> dict:
    """The job: a result of four arrays, `megabytes` in all, as a pool's images, probabilities and scores."""
    if megabytes not in _held:
        n = megabytes * 2**20 // 4 // 4
        rng = np.random.default_rng(0)
        _held[megabytes] = {name: rng.random(n, dtype=np.float32) for name in ("x", "probs", "fol", "grad")}
    return _held[megabytes]


def _send_forever(conn, megabytes: int) -> None:
    data = np.ones(megabytes * 2**20, np.uint8)
    while conn.recv() == "send":
        conn.send_bytes(memoryview(data))


class Waker:
    """A thread that wakes every 2 ms; how late its wake-ups come is how long the lock was held from it."""

    def __init__(self):
        self.late: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(WAKE_MS / 1000):
            now = time.perf_counter()
            self.late.append(max(0.0, (now - last) * 1000 - WAKE_MS))
            last = now

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def timed(receive) -> tuple[float, float, float]:
    """(seconds, worst lateness ms, p99 lateness ms) of one `receive()` with a waker beside it."""
    with Waker() as waker:
        started = time.perf_counter()
        receive()
        seconds = time.perf_counter() - started
    late = np.asarray(waker.late or [0.0])
    return seconds, float(late.max()), float(np.percentile(late, 99))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from workbench.core.execution.jobs import JobContext
    from workbench.core.execution.worker_process import ProcessExecutor

    size = args.megabytes * 2**20
    source, target = np.ones(size, np.uint8), np.empty(size, np.uint8)
    parent, child = multiprocessing.get_context("spawn").Pipe()
    sender = multiprocessing.get_context("spawn").Process(target=_send_forever, args=(child, args.megabytes),
                                                          daemon=True)
    sender.start()
    executor = ProcessExecutor(threads=1)
    executor.start()
    ctx = JobContext("cpu")
    executor.run(ctx, arrays_of, (args.megabytes,))  # the child makes its arrays once, and both children warm up
    parent.send("send")
    parent.recv_bytes_into(bytearray(size))

    def by_multiprocessing():
        parent.send("send")
        parent.recv_bytes_into(bytearray(size))

    ways = {"floor: one copy in memory": lambda: np.copyto(target, source),
            "multiprocessing recv_bytes_into": by_multiprocessing,
            "workbench ProcessExecutor.run": lambda: executor.run(ctx, arrays_of, (args.megabytes,))}
    results = {name: [timed(way) for _ in range(args.repeats)] for name, way in ways.items()}
    parent.send("stop")
    executor.close()
    sender.join(5)

    floor = min(r[0] for r in results["floor: one copy in memory"])
    print(f"Receiving {args.megabytes} MB; a thread beside it wakes every {WAKE_MS:g} ms "
          f"(best of {args.repeats}; lateness: worst over the runs)")
    print(f"{'way':<34} {'time ms':>8} {'× floor':>8} {'worst late ms':>14} {'p99 late ms':>12}")
    for name, runs in results.items():
        best = min(r[0] for r in runs)
        print(f"{name:<34} {best * 1000:>8.0f} {best / floor:>8.1f} {max(r[1] for r in runs):>14.1f} "
              f"{max(r[2] for r in runs):>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
