"""Jobs in a worker process: the same results, progress, partial results, errors, cancellation and
staged saves as on the calling thread, with datasets sent once and a dead worker replaced; a script
without a `__main__` guard, whose jobs run on the calling thread instead."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading

import numpy as np
import pytest
import worker_jobs

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import InlineExecutor, JobContext
from workbench.core.execution.worker_process import IN_THREAD, IN_WORKER, ProcessExecutor, starting_worker
from workbench.core.project.folder import Project


@pytest.fixture(scope="module")
def worker():
    executor = ProcessExecutor(threads=1)
    executor.start()
    yield executor
    executor.close()
    assert not executor.alive


def _context(**callbacks) -> JobContext:
    return JobContext("cpu", **callbacks)


def test_results_progress_and_partials_are_those_of_the_calling_thread(worker, digits):
    runs = {}
    for name, executor in (("inline", InlineExecutor()), ("process", worker)):
        progress, partials = [], []
        result = executor.run(_context(on_progress=lambda *p: progress.append(p), on_partial=partials.append),
                              worker_jobs.count, (5,), {"data": digits})
        runs[name] = result, progress, partials
    assert worker.last_placement == IN_WORKER
    (inline, inline_progress, inline_partials), (result, progress, partials) = runs["inline"], runs["process"]
    assert result[0] == inline[0] == 5
    assert result[1] is digits  # the caller's own dataset comes back, not a copy
    assert [p["step"] for p in partials] == [p["step"] for p in inline_partials] == list(range(5))
    assert all(p["data"] is digits for p in partials)
    assert progress[-1] == inline_progress[-1] == (5, 5, "done")
    assert worker.run(_context(), worker_jobs.pixel_sum, (digits,)) == \
        int(digits.split("train").images.astype(np.int64).sum())


def test_notices_reach_the_caller_from_the_job_and_its_sub_steps(worker):
    texts = ["The stored pool was damaged. It is built again.", "A sub-step's notice."]
    for executor in (InlineExecutor(), worker):
        heard = []
        ctx = _context(on_notice=heard.append)
        assert executor.run(ctx, worker_jobs.tell, (texts,)) == 2
        assert heard == ctx.notices == texts


def test_a_dataset_is_sent_once_while_the_caller_holds_it(worker, digits):
    worker.run(_context(), worker_jobs.pixel_sum, (digits,))
    sent = worker.sent_objects
    for split in ("train", "test"):
        worker.run(_context(), worker_jobs.pixel_sum, (digits, split))
    worker.run(_context(), worker_jobs.count, (1,), {"data": digits.split("test")})
    assert worker.sent_objects == sent  # the splits went over inside the dataset
    copy = type(digits)(digits.name, digits.class_names, dict(digits.splits), digits.card)
    worker.run(_context(), worker_jobs.pixel_sum, (copy,))
    assert worker.sent_objects == sent + 1  # a new dataset object, its splits known already
    del copy
    gc.collect()
    assert worker.run(_context(), worker_jobs.count, (1,))[0] == 1  # the child is told to forget it


def test_large_arrays_travel_whole_and_writable(worker):
    images = np.random.default_rng(0).random((300, 1, 28, 28)).astype(np.float32)  # 940 kB, out of band
    doubled = worker.run(_context(), worker_jobs.double_in_place, (images.copy(),))
    np.testing.assert_array_equal(doubled, images * 2)
    assert doubled.flags.writeable


def test_arrays_of_every_size_and_kind_travel_whole_both_ways(worker):
    """Empty, one byte, odd sizes, and sizes many times a pipe's buffer, of several dtypes: each
    buffer is read straight from the pipe, so each must come out byte for byte, and writable."""
    rng = np.random.default_rng(1)
    arrays = [np.zeros(0, np.float32), np.array([7], np.uint8), rng.integers(0, 255, 4097, dtype=np.uint8),
              rng.random(3 * 2**20 // 8), rng.integers(-5, 5, (5, 2**20), dtype=np.int32),
              rng.random((700, 3)) > 0.5, rng.random((40, 50))[:, ::2]]  # the last one not contiguous: in band
    back = worker.run(_context(), worker_jobs.reverse_each, ([a.copy() for a in arrays],))
    assert len(back) == len(arrays)
    for sent, came in zip(arrays, back):
        assert came.dtype == sent.dtype and came.shape == sent.shape
        np.testing.assert_array_equal(came, sent[::-1])
        assert came.flags.writeable
    again = worker.run(_context(), worker_jobs.reverse_each, (back,))  # and the received ones go back out
    for sent, came in zip(arrays, again):
        np.testing.assert_array_equal(came, sent)


def test_errors_come_back_as_themselves_with_the_childs_traceback(worker):
    with pytest.raises(WorkbenchError) as caught:
        worker.run(_context(), worker_jobs.fail)
    assert caught.value.message == "The input has 3 channels but the model takes 1."
    assert caught.value.hint == "Choose a grayscale dataset."
    assert "worker_jobs.py" in caught.value.worker_traceback
    with pytest.raises(KeyError):
        worker.run(_context(), worker_jobs.fail_plainly)
    assert worker.run(_context(), worker_jobs.count, (2,))[0] == 2  # the worker serves the next job


def test_cancelling_stops_the_job(worker):
    """A cancel here stops the job in the child, which would otherwise run until it gives up after two
    minutes (how soon it stops, in seconds: benchmarks/bench_cancel_latency.py)."""
    ctx = _context(on_progress=lambda *_: ctx.cancel())  # at the job's first report, which it made in the child
    with pytest.raises(Cancelled):
        worker.run(ctx, worker_jobs.until_cancelled, (120.0,))
    assert worker.run(_context(), worker_jobs.count, (3,))[0] == 3


def test_a_worker_that_dies_is_reported_and_replaced(worker):
    with pytest.raises(WorkbenchError, match="worker process for long jobs stopped by signal 9"):
        worker.run(_context(), worker_jobs.die)
    assert not worker.alive
    assert worker.run(_context(), worker_jobs.count, (2,))[0] == 2
    assert worker.alive


def test_what_cannot_be_sent_runs_on_the_calling_thread(worker):
    def local_job(ctx, x):
        return x + 1

    assert worker.run(_context(), local_job, (41,)) == 42
    assert worker.last_placement.startswith(IN_THREAD) and "cannot be sent" in worker.last_placement
    lock = threading.Lock()  # like a model holding a lock, or a file handle
    assert worker.run(_context(), worker_jobs.count, (1,), {"data": lock})[1] is lock
    assert worker.last_placement.startswith(IN_THREAD)


def test_saves_are_committed_by_the_child_and_seen_by_the_caller(worker, tmp_path):
    project = Project.create(tmp_path / "p", "digits")
    told = []
    names = worker.run(_context(), worker_jobs.save_then, ("finishing",), project=project,
                       on_commit=lambda committed, unsaved: told.append((committed, unsaved)))
    assert names == ["saved by a finishing job"]
    assert told == [(["saved by a finishing job"], [])]
    assert project.load_artifact("saved by a finishing job")["v"].tolist() == [0, 1, 2, 3]

    with pytest.raises(WorkbenchError, match="failed after staging"):
        worker.run(_context(), worker_jobs.save_then, ("failing",), project=project)
    ctx = _context(on_progress=lambda *_: ctx.cancel())  # its first report comes after it staged its save
    with pytest.raises(Cancelled):
        worker.run(ctx, worker_jobs.save_then, ("cancelled",), project=project)
    reopened = Project.open(tmp_path / "p")
    assert set(reopened.artifacts()) == {"saved by a finishing job"}
    assert not list((tmp_path / "p").rglob("*.tmp")) and reopened.problems == []


def test_relevance_in_the_worker_equals_relevance_on_the_thread(worker, digits, digits_model, tmp_path):
    from workbench.core.importance.neuron_importance import compute_importance

    args = (digits_model, digits, "fc1")
    inline = InlineExecutor().run(_context(), compute_importance, args, {"batch_size": 128, "split": "train"})
    project = Project.create(tmp_path / "p", "digits")
    remote = worker.run(_context(), compute_importance, args, {"batch_size": 128, "split": "train"}, project=project)
    assert worker.last_placement == IN_WORKER
    # The child computes with one torch thread, the test process with its own count: sums are
    # reduced in another order, so they agree to float precision, not bit for bit.
    np.testing.assert_allclose(remote.totals, inline.totals, rtol=1e-6)
    np.testing.assert_array_equal(remote.ranking, inline.ranking)
    assert remote.artifact in project.artifacts()


def test_coverage_in_the_worker_equals_coverage_on_the_thread(worker, digits, digits_model):
    """A real job whose result holds fitted criteria (which must not keep the job's context)."""
    from workbench.core.coverage.measure import measure_groups

    args = (digits_model, digits, "test", None, "fc1", [("nc", "kmnc")], 6, None)
    inline = InlineExecutor().run(_context(), measure_groups, args)
    remote = worker.run(_context(), measure_groups, args)
    assert worker.last_placement == IN_WORKER and not remote.errors
    assert remote.results["nc"].value == inline.results["nc"].value
    # The child computes with one torch thread: activations differ in the last bits, so a value lying
    # on a KMNC section boundary may fall on the other side (a cell or two of 58,000).
    kmnc, reference = remote.results["kmnc"].value, inline.results["kmnc"].value
    assert kmnc.total == reference.total and abs(kmnc.covered - reference.covered) <= 3


def test_a_job_the_child_cannot_rebuild_runs_on_the_calling_thread(worker):
    """A function of a module only this process has (made at run time, like a plugin the child could
    not load) pickles here but not there: the job runs here, and the child serves the next one."""
    import sys
    import types

    module = types.ModuleType("only_in_this_process")
    exec("def triple(ctx, x):\n    return 3 * x\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        assert worker.run(_context(), module.triple, (14,)) == 42
        assert worker.last_placement.startswith(IN_THREAD) and "cannot rebuild" in worker.last_placement
        assert worker.run(_context(), worker_jobs.count, (2,))[0] == 2 and worker.last_placement == IN_WORKER
    finally:
        del sys.modules[module.__name__]


def test_closing_does_not_wait_for_a_job_that_will_not_end(tmp_path):
    executor = ProcessExecutor(threads=1)
    running = threading.Event()
    ctx = _context(on_progress=lambda *_: running.set())
    thread = threading.Thread(target=lambda: pytest.raises(Exception, executor.run, ctx, worker_jobs.count,
                                                             (10**9,), {"pause": 0.01}))
    thread.start()
    assert running.wait(120)  # the child has started and runs the endless job
    closing = threading.Thread(target=executor.close, kwargs={"timeout": 0.5})
    closing.start()
    closing.join(120)  # a bound for a loaded machine: the job alone would run for months
    assert not closing.is_alive()
    thread.join(120)
    assert not thread.is_alive()


UNGUARDED_SCRIPT = '''
import json

from workbench.core.execution.jobs import JobContext
from workbench.core.execution.worker_process import ProcessExecutor


def square(ctx, x):
    return x * x


said = []  # no `if __name__ == "__main__":` guard: a worker process runs all of this again while it starts
executor = ProcessExecutor(threads=1, on_unavailable=said.append)
results = [executor.run(JobContext("cpu"), square, (n,)) for n in (2, 3, 4)]
print(json.dumps({"results": results, "said": [(e.message, e.hint) for e in said], "where": executor.last_placement}))
executor.close()
'''


def test_a_script_without_a_main_guard_runs_its_jobs_here_and_says_why_once(tmp_path):
    """Each worker process ran the script again and died of multiprocessing's bootstrapping error, with a
    traceback, at every job; now the first child leaves quietly and the jobs run on the calling thread."""
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED_SCRIPT)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=180)
    assert run.returncode == 0, run.stderr
    assert "bootstrapping" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    outcome = json.loads(run.stdout)
    assert outcome["results"] == [4, 9, 16]
    assert outcome["where"].startswith(IN_THREAD) and "guard" in outcome["where"]
    [(message, hint)] = outcome["said"]  # once, for three jobs
    assert "unguarded.py" in message and "threads" in message
    assert 'if __name__ == "__main__":' in hint


def test_a_worker_started_from_a_guarded_script_is_not_taken_for_one_re_running_it(worker):
    assert not starting_worker()  # the main process
    assert worker.run(_context(), worker_jobs.count, (2,))[0] == 2 and worker.last_placement == IN_WORKER
    assert worker.unavailable is None
