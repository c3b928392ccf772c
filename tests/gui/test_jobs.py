"""The job runner: signals arrive in the UI thread, cancelling stops a job and leaves nothing written,
failures are reported, and shutting down leaves no thread running.

The waits here are generous bounds for a loaded machine: a job stops at its next check of the cancel
(tests/core/test_training.py), and how soon that is in seconds is benchmarks/bench_cancel_latency.py's."""

from __future__ import annotations

import threading
import time

import pytest
from gui_helpers import flush_events
from PySide6.QtCore import Qt

from workbench.core.errors import WorkbenchError
from workbench.gui.session.jobs import CANCELLED, DONE, FAILED, JobRunner

pytestmark = pytest.mark.gui


def counting_job(ctx, steps, pause=0.0):
    for i in range(steps):
        time.sleep(pause)
        ctx.progress(i + 1, steps, f"step {i + 1}")
        if i % 2 == 0:
            ctx.partial(i)
    return steps * 10


def endless_job(ctx, started: threading.Event, out):
    """Works in small batches until cancelled; would write `out` only if it ever finished."""
    started.set()
    for i in range(100_000):
        time.sleep(0.01)
        ctx.progress(i, 100_000, "working")
    out.write_text("finished")


@pytest.fixture
def runner(qapp):
    runner = JobRunner()
    yield runner
    assert runner.shutdown(30_000)
    assert runner.active_thread_count() == 0


def test_job_reports_progress_partials_and_result_in_the_ui_thread(qtbot, runner):
    main_thread = threading.current_thread()
    partials, threads = [], []
    job = runner.submit("count", counting_job, 6, uses_device=False)
    job.partial.connect(lambda value: (partials.append(value), threads.append(threading.current_thread())))
    with qtbot.waitSignal(job.finished, timeout=30_000) as blocker:
        pass
    assert blocker.args == [60]
    assert job.record.state == DONE and job.result == 60
    assert job.record.done == job.record.total == 6
    assert partials == [0, 2, 4]
    assert all(t is main_thread for t in threads)
    assert job.record.device == "CPU" and job.record.elapsed >= 0


def test_cancel_stops_a_job_and_nothing_is_written(qtbot, runner, tmp_path):
    started, out = threading.Event(), tmp_path / "result.txt"
    job = runner.submit("endless", endless_job, started, out, uses_device=False)
    assert started.wait(30)
    qtbot.waitUntil(lambda: job.record.done > 0, timeout=30_000)
    with qtbot.waitSignal(job.cancelled, timeout=30_000):  # the job would run for over 15 minutes
        job.cancel()
    assert job.record.state == CANCELLED
    assert not out.exists()
    assert runner.is_idle()


def test_cancelled_training_writes_no_checkpoint(qtbot, runner, tmp_path):
    from workbench.core.data.registry import load_dataset
    from workbench.core.models.training import train_and_save

    dataset = load_dataset("fashion-mnist")
    out = tmp_path / "models" / "never.pt"
    job = runner.submit("train", train_and_save, "lenet1", dataset, out, "never", epochs=200, batch_size=64, lr=1e-3,
                        seed=0, device="cpu")
    qtbot.waitUntil(lambda: job.record.done > 3, timeout=60_000)
    with qtbot.waitSignal(job.ended, timeout=30_000):  # 200 epochs would take minutes
        job.cancel()
    assert job.record.state == CANCELLED
    assert not out.exists()
    assert not out.parent.exists() or not any(out.parent.iterdir())


def test_a_failing_job_reports_its_error(qtbot, runner):
    def broken(ctx):
        raise WorkbenchError("The file is damaged.", "Export it again.")

    with qtbot.waitSignal(runner.job_failed, timeout=30_000) as blocker:
        job = runner.submit("broken", broken, uses_device=False)
    assert blocker.args == [job]
    assert job.record.state == FAILED
    assert job.record.message == "The file is damaged."
    assert isinstance(job.record.error, WorkbenchError)


def test_unexpected_exceptions_keep_their_traceback(qtbot, runner):
    def buggy(ctx):
        return 1 / 0

    with qtbot.waitSignal(runner.job_failed, timeout=30_000):
        job = runner.submit("buggy", buggy, uses_device=False)
    assert isinstance(job.record.error, ZeroDivisionError)
    assert "ZeroDivisionError" in job.record.details and "buggy" in job.record.details


def test_shutdown_cancels_running_and_queued_jobs_and_waits_for_threads(qtbot, runner, tmp_path):
    events = [threading.Event() for _ in range(4)]
    jobs = [runner.submit(f"endless {i}", endless_job, events[i], tmp_path / f"{i}.txt", uses_device=False)
            for i in range(4)]  # two run, two wait in the queue
    assert events[0].wait(30) and events[1].wait(30)
    assert runner.shutdown(30_000)  # True: every thread ended (the jobs would run for over 15 minutes)
    assert runner.active_thread_count() == 0
    qtbot.waitUntil(lambda: all(j.record.state == CANCELLED for j in jobs), timeout=30_000)
    assert not any((tmp_path / f"{i}.txt").exists() for i in range(4))
    late = runner.submit("after shutdown", counting_job, 1, uses_device=False)
    assert late.record.state == CANCELLED


def test_jobs_panel_shows_progress_outcome_and_cancels(qtbot, runner, tmp_path):
    from workbench.gui.widgets.jobs_panel import JobsPanel

    panel = JobsPanel(runner)
    qtbot.addWidget(panel)
    done = runner.submit("quick", counting_job, 2, uses_device=False)
    qtbot.waitSignal(done.ended, timeout=30_000).wait()
    started = threading.Event()
    endless = runner.submit("endless", endless_job, started, tmp_path / "x.txt", uses_device=False)
    qtbot.waitUntil(lambda: endless.record.done > 0, timeout=30_000)
    item = panel.item(endless)
    assert panel.tree.itemWidget(item, 1).value() >= 0
    assert "running" in item.text(4) or "working" in item.text(4)
    cancel = panel.tree.itemWidget(item, 5)
    with qtbot.waitSignal(endless.ended, timeout=30_000):
        qtbot.mouseClick(cancel, Qt.MouseButton.LeftButton)
    assert panel.item(done).text(4) == "done"
    assert panel.item(endless).text(4).startswith("cancelled")
    assert panel.tree.itemWidget(panel.item(endless), 5) is None  # finished rows lose their cancel button
    panel.clear_finished()
    assert panel.tree.topLevelItemCount() == 0


def noticing_job(ctx, texts):
    for text in texts:
        ctx.notice(text)
    return len(texts)


def test_a_jobs_notices_reach_its_record_the_runner_and_the_jobs_panel(qtbot, runner):
    from workbench.gui.widgets.jobs_panel import JobsPanel

    panel = JobsPanel(runner)
    qtbot.addWidget(panel)
    heard = []
    runner.job_notice.connect(lambda job, text: heard.append((job.name, text)))
    texts = ["The stored evaluation was damaged. The model is evaluated again.", "Second."]
    job = runner.submit("evaluate", noticing_job, texts, uses_device=False)
    qtbot.waitSignal(job.ended, timeout=30_000).wait()
    assert job.record.notices == texts and heard == [("evaluate", t) for t in texts]
    item = panel.item(job)
    assert item.text(4) == "done; Second." and texts[0] in item.toolTip(4)


@pytest.mark.parametrize("long_jobs", ["thread", "process"])  # gui.session.jobs.THREAD, PROCESS
def test_only_a_job_whose_work_runs_as_shards_is_shown_with_them(qtbot, qapp, long_jobs):
    """With shards chosen for long jobs, the jobs panel names them beside the device of a job that did
    shard (on a lane's thread or in its worker process), and not beside one that ran in one pass."""
    import lane_jobs

    from workbench.core.execution.sharding import Distribution
    from workbench.gui.session.jobs import LONG
    from workbench.gui.widgets.jobs_panel import JobsPanel

    runner = JobRunner(long_jobs=long_jobs)
    runner.distribution = Distribution("local", shards=3)
    panel = JobsPanel(runner)
    qtbot.addWidget(panel)
    sharded = runner.submit("sum in shards", lane_jobs.sum_of_range, 30, device="cpu", lane=LONG)
    whole = runner.submit("sum in one pass", lane_jobs.sum_in_one_pass, 30, device="cpu", lane=LONG)
    qtbot.waitUntil(lambda: runner.is_idle(), timeout=60000)
    assert sharded.result == whole.result == sum(range(30))
    assert (sharded.record.shards, sharded.record.shards_short) == ("this machine, 3 shards", "3 shards")
    assert panel.item(sharded).text(3) == "CPU · 3 shards" and "its shards run on this machine" in \
        panel.item(sharded).toolTip(3)
    assert whole.record.shards == whole.record.shards_short == ""
    assert panel.item(whole).text(3) == "CPU" and "shard" not in panel.item(whole).toolTip(3)
    assert runner.shutdown(30_000)


def garbage_job(ctx, rounds: int):
    """Makes cyclic garbage on the worker thread, enough to trigger the collector many times over."""
    for _ in range(rounds):
        for _ in range(2000):
            a, b = [], []
            a.append(b)
            b.append(a)
        ctx.progress(0, 1)
    return threading.get_ident()


def test_garbage_is_collected_on_the_ui_thread_only(qtbot, qapp):
    """While a runner lives, cyclic collection runs on the UI thread (a Qt object destroyed by the collector on
    a worker can deadlock against the UI thread); after its shutdown automatic collection is back."""
    import gc

    threads = set()
    record = lambda phase, info: phase == "start" and threads.add(threading.get_ident())  # noqa: E731
    from workbench.gui.session import ui_gc

    runner = JobRunner()
    gc.callbacks.append(record)
    try:
        assert not gc.isenabled()
        job = runner.submit("garbage", garbage_job, 50, uses_device=False)
        with qtbot.waitSignal(job.finished, timeout=60_000) as finished:
            pass
        worker = finished.args[0]
        qtbot.waitUntil(lambda: bool(threads), timeout=30_000)  # the UI-thread timer collected
        assert threading.get_ident() in threads and worker not in threads
    finally:
        gc.callbacks.remove(record)
        assert runner.shutdown(30_000)
    assert gc.isenabled() or ui_gc._users > 0  # back on unless another runner still lives


def test_a_progress_bar_is_drawn_with_the_next_frame_not_at_once(qtbot, runner, tmp_path):
    """A progress bar repaints at once when its value changes, which drew every widget of the window
    waiting to be redrawn there and then; the panel lets the window's next frame draw it."""
    from PySide6.QtCore import QEvent, QObject

    from workbench.gui.widgets.jobs_panel import JobsPanel

    class Paints(QObject):
        count = 0

        def eventFilter(self, watched, event):
            if event.type() == QEvent.Type.Paint:
                Paints.count += 1
            return False

    panel = JobsPanel(runner)
    qtbot.addWidget(panel)
    panel.resize(1000, 300)  # the bar's column in view
    panel.show()
    qtbot.waitExposed(panel)
    started = threading.Event()
    job = runner.submit("endless", endless_job, started, tmp_path / "x.txt", uses_device=False)
    qtbot.waitUntil(lambda: job.record.done > 0, timeout=30_000)
    flush_events()  # the panel's own paints so far are over
    bar = panel.tree.itemWidget(panel.item(job), 1)
    paints = Paints()
    bar.installEventFilter(paints)
    job.record.done, job.record.total = 3, 10
    panel.update_job(job)
    assert Paints.count == 0 and bar.value() == 300 and bar.text() == "30 %"
    flush_events()  # the next frame
    assert Paints.count > 0
    with qtbot.waitSignal(job.ended, timeout=30_000):
        job.cancel()
