"""How soon a cancel ends a job: from `cancel()` to the job's end as its caller sees it.

A job looks for a cancel at each of its steps (`JobContext.progress` / `check`), so a cancel ends it at
its next step. The tests prove that part, which does not depend on the machine
(tests/core/test_cancel_latency.py, test_training.py, test_worker_process.py, tests/gui/test_jobs.py);
how many milliseconds it takes does, so it is measured here. The goal (DESIGN.md, principle 2): within
a second. The floor of each case is the job's own step, the time between two of its checks: a cancel
waits for the step under way, on average half of one.

- **runner, thread**: a job of the GUI's `JobRunner` reporting every 10 ms; until its `cancelled` signal
  reaches the UI thread.
- **runner, shutdown**: `JobRunner.shutdown()` with two such jobs running and two queued, until it returns.
- **runner, training**: LeNet-1 trained on Fashion-MNIST (batch 64) on the runner's thread; until `ended`.
- **runner, evaluation**: LeNet-5 on the 60,000 training images (batches of 1,000); until `ended`.
- **worker process**: a job in a `ProcessExecutor`'s child reporting every 10 ms; until `Cancelled` is
  raised in the caller (the caller's thread looks at the cancel every `POLL_S`).
- **window closed while training**: `MainWindow.close()` with a training run going; it returns once the
  run's thread has ended.
- **diffusion training**: the spec-sized class-conditional model (batch 32), cancelled from another thread.
- **Ray** (`--ray`): two never-ending shards on a local instance; until `Cancelled` is raised.

    .venv/bin/python benchmarks/bench_cancel_latency.py [--repeats 5] [--ray]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


# --- jobs ---------------------------------------------------------------------------------------------------

def ticking(ctx, step_s: float, times: list | None = None):
    """Reports every `step_s` until cancelled; `times` gets the moment of each report (the floor)."""
    for i in itertools.count():
        time.sleep(step_s)
        ctx.progress(i, 10**9, "ticking")
        if times is not None:
            times.append(time.perf_counter())


def beating(ctx, folder, piece):
    """A Ray shard that never ends by itself."""
    while True:
        ctx.progress(1, 2)
        time.sleep(0.05)


def step_times(fn) -> float:
    """The median time between two progress reports of `fn(ctx)`, run until 12 reports."""
    from workbench.core.errors import Cancelled
    from workbench.core.execution.jobs import JobContext

    times = []

    def report(done, total, message):
        times.append(time.perf_counter())
        if len(times) >= 12:
            ctx.cancel()

    ctx = JobContext("cpu", on_progress=report)
    try:
        fn(ctx)
    except Cancelled:
        pass
    return statistics.median(b - a for a, b in zip(times[1:], times[2:]))  # the first step warms up


# --- measuring ----------------------------------------------------------------------------------------------

def wait_in_ui(app, done, limit_s: float = 120.0) -> None:
    from PySide6.QtCore import QEventLoop

    deadline = time.perf_counter() + limit_s
    while not done() and time.perf_counter() < deadline:
        app.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents, 20)


def runner_case(app, runner, fn, *args, started=lambda job: job.record.done > 0, **kwargs) -> float:
    """Submit, wait until `started(job)`, cancel; seconds until the job's end reaches the UI thread."""
    from workbench.gui.session.jobs import CANCELLED

    job = runner.submit("bench", fn, *args, **kwargs)
    wait_in_ui(app, lambda: started(job))
    at = time.perf_counter()
    job.cancel()
    wait_in_ui(app, lambda: job.record.state == CANCELLED)
    assert job.record.state == CANCELLED, job.record.state
    return time.perf_counter() - at


def summary(name: str, seconds: list[float], floor: float) -> str:
    worst, median = max(seconds), statistics.median(seconds)
    return (f"{name:<30} {median * 1000:>8.0f} {worst * 1000:>8.0f} {floor * 1000:>9.1f} "
            f"{median / floor:>8.1f} {worst / floor:>8.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ray", action="store_true", help="also cancel shards on a local Ray instance")
    args = parser.parse_args()

    import torch
    from PySide6.QtWidgets import QApplication

    from workbench.core.data.registry import load_dataset
    from workbench.core.errors import Cancelled
    from workbench.core.execution.jobs import JobContext
    from workbench.core.execution.worker_process import IN_WORKER, POLL_S, ProcessExecutor
    from workbench.core.models.model_io import load_model
    from workbench.core.models.training import evaluate, train, train_and_save
    from workbench.gui.session.jobs import JobRunner

    torch.set_num_threads(1)  # as each lane's job runs
    app = QApplication.instance() or QApplication([])
    fashion = load_dataset("fashion-mnist")
    lenet5 = load_model("lenet5-fashion")
    tmp = Path(tempfile.mkdtemp(prefix="bench-cancel-"))
    rows = []
    n = args.repeats

    # The floors: each job's step.
    tick_times: list[float] = []
    probe = JobContext("cpu")
    threading.Timer(1.0, probe.cancel).start()
    try:
        ticking(probe, 0.01, tick_times)
    except Cancelled:
        pass
    tick = statistics.median(b - a for a, b in zip(tick_times, tick_times[1:]))
    batch_lenet1 = step_times(lambda ctx: train(ctx, "lenet1", fashion, epochs=1, batch_size=64, eval_split=None))
    batch_eval = step_times(lambda ctx: evaluate(ctx, lenet5, fashion, "train", batch_size=1000))

    runner = JobRunner()
    rows.append(summary("runner, thread (10 ms steps)", [
        runner_case(app, runner, ticking, 0.01, uses_device=False) for _ in range(n)], tick))
    rows.append(summary("runner, training LeNet-1", [
        runner_case(app, runner, train_and_save, "lenet1", fashion, tmp / f"never-{i}.pt", "never", epochs=50,
                    batch_size=64, device="cpu", started=lambda job: job.record.done > 3) for i in range(n)],
        batch_lenet1))
    rows.append(summary("runner, evaluation LeNet-5", [
        runner_case(app, runner, evaluate, lenet5, fashion, "train", device="cpu",
                    started=lambda job: job.record.done > 0) for _ in range(n)], batch_eval))
    runner.shutdown(60_000)

    shutdowns = []
    for _ in range(n):
        runner = JobRunner()
        jobs = [runner.submit(f"ticking {i}", ticking, 0.01, uses_device=False) for i in range(4)]
        wait_in_ui(app, lambda: jobs[0].record.done > 0 and jobs[1].record.done > 0)
        at = time.perf_counter()
        assert runner.shutdown(60_000)
        shutdowns.append(time.perf_counter() - at)
    rows.append(summary("runner, shutdown (2 running)", shutdowns, tick))

    executor = ProcessExecutor(threads=1)
    executor.start()
    executor.run(JobContext("cpu"), _first_report, ())  # the child has started and imported what it needs
    in_worker = []
    for _ in range(n):
        at = {}

        def cancel_soon(done, total, message):
            if done >= 5 and "t" not in at:
                at["t"] = time.perf_counter()
                ctx.cancel()

        ctx = JobContext("cpu", on_progress=cancel_soon)
        try:
            executor.run(ctx, ticking, (0.01,))
        except Cancelled:
            in_worker.append(time.perf_counter() - at["t"])
        assert executor.last_placement == IN_WORKER, executor.last_placement
    executor.close()
    rows.append(summary(f"worker process (poll {POLL_S * 1000:g} ms)", in_worker, tick))

    rows.append(summary("window closed while training", [close_while_training(app, tmp / f"w{i}")
                                                         for i in range(n)], batch_lenet1))

    rows.append(diffusion_case(fashion, tmp, n))
    if args.ray:
        rows.append(ray_case(tmp, n, tick))

    print(f"A cancel, until the job's end reaches its caller ({n} runs each; one torch thread)")
    print(f"{'case':<30} {'median':>8} {'worst':>8} {'step (ms)':>9} {'× step':>8} {'worst ×':>8}")
    print(f"{'':<30} {'(ms)':>8} {'(ms)':>8}")
    for row in rows:
        print(row)
    return 0


def _first_report(ctx):
    ctx.progress(0, 1, "warm")
    return 0


def close_while_training(app, folder: Path) -> float:
    """The GUI test's scenario: a long training run from the Training view, then the window closes."""
    from workbench.core.project.folder import Project
    from workbench.gui.session.jobs import RUNNING
    from workbench.gui.shell.main_window import MainWindow

    project = Project.create(folder, "fashion-mnist", ["lenet5-fashion"])
    window = MainWindow(project, [], long_jobs="thread")
    window.show()
    wait_in_ui(app, lambda: window.session.is_ready and window.runner.is_idle())
    view = window.views["training"]
    view.epochs.setValue(300)
    view.name.setText("never-saved")
    view._name_edited = True  # as if typed: the test does the same
    view.start_training()
    job = view.job
    wait_in_ui(app, lambda: job.record.state == RUNNING and job.record.done > 3)
    at = time.perf_counter()
    window.close()
    return time.perf_counter() - at


def diffusion_case(fashion, tmp: Path, n: int) -> str:
    from workbench.core.errors import Cancelled
    from workbench.core.execution.jobs import JobContext
    from workbench.core.generation.training import train_generator

    seconds, steps = [], []
    for i in range(n):
        times, at = [], {}

        def report(done, total, message, times=times, at=at):
            times.append(time.perf_counter())
            if done == 3 and "timer" not in at:  # cancelled from another thread, in the middle of a step
                def cancel():
                    at["t"] = time.perf_counter()
                    ctx.cancel()
                at["timer"] = threading.Timer(0.5 * (times[-1] - times[-2]), cancel)
                at["timer"].start()

        ctx = JobContext("cpu", on_progress=report)
        try:
            train_generator(ctx, "diffusion", fashion, tmp / f"dm-{i}", epochs=1, batch_size=32)
        except Cancelled:
            seconds.append(time.perf_counter() - at["t"])
        steps.append(times[2] - times[1])
    return summary("diffusion training (step)", seconds, statistics.median(steps))


def ray_case(tmp: Path, n: int, tick: float) -> str:
    import ray

    from workbench.core.execution.jobs import JobContext
    from workbench.core.execution.shard_plan import ShardPlan
    from workbench.core.execution.sharding import Distribution, executor_for

    distribution = Distribution("ray", shards=2)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = executor_for(distribution)
    seconds = []
    for _ in range(n):
        reports, raised = [], []
        ctx = JobContext("cpu", distribution=distribution, on_progress=lambda *report: reports.append(report))
        thread = threading.Thread(target=lambda: _run_catching(cluster, ctx, ShardPlan(
            "forever", str(tmp), [0, 1], beating, list, [2, 2]), raised))
        thread.start()
        deadline = time.perf_counter() + 120
        while len(reports) < 4 and time.perf_counter() < deadline:
            time.sleep(0.01)
        at = time.perf_counter()
        ctx.cancel()
        thread.join(120)
        seconds.append(raised[0] - at)
    ray.shutdown()
    return summary("Ray, 2 shards", seconds, 0.05)


def _run_catching(cluster, ctx, plan, raised: list) -> None:
    from workbench.core.errors import Cancelled

    try:
        cluster.run(ctx, plan)
    except Cancelled:
        raised.append(time.perf_counter())


if __name__ == "__main__":
    sys.exit(main())
