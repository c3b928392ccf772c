"""The sharded jobs on a local Ray instance (2 CPUs): the results of one pass, progress and partial
results from the workers, cancelling, a worker that dies (and what Ray says of it, on stderr), and the bad inputs
of a cluster.

Bit-identical where the computation is: the reference pass runs with one torch thread, as Ray's
workers do, so every layer sums in the same order (with more threads a value on a KMNC section
boundary can fall on the other side; `docs/methods/scale-out.md` says so). Relevance totals are
summed in another order and agree to float rounding.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from workbench.core.coverage import measure_coverage
from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution import sharding
from workbench.core.execution.jobs import JobContext
from workbench.core.execution.shard_plan import ShardFailed, ShardPlan
from workbench.core.execution.sharding import Distribution, executor_for

ray = pytest.importorskip("ray", reason="Ray is the distributed extra: pip install '.[distributed]'")

RAY = Distribution("ray", shards=4)


@pytest.fixture(scope="module")
def cluster():
    import torch

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # this file's shard functions go by value
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the reference pass sums as the workers do
    yield executor_for(RAY)
    torch.set_num_threads(threads)
    sharding.forget_clusters()
    ray.shutdown()


def job(distribution=None, **callbacks) -> JobContext:
    return JobContext("cpu", distribution=distribution, **callbacks)


def test_coverage_on_ray_is_the_coverage_of_one_pass(cluster, lenet5_fashion, fashion_slice):
    criteria = ("idc", "nc", "kmnc", "nbc", "snac", "tknc", "tknp", "lsa")
    whole = measure_coverage(job(), lenet5_fashion, fashion_slice, criteria=criteria, batch_size=200)
    progress, partials = [], []
    on_ray = measure_coverage(job(RAY, on_progress=lambda d, t, m: progress.append((d, t, m)),
                                  on_partial=partials.append), lenet5_fashion, fashion_slice, criteria=criteria,
                              batch_size=200)
    for key in whole:
        a, b = whole[key].criterion.state_dict(), on_ray[key].criterion.state_dict()
        assert on_ray[key].value == whole[key].value, key
        for name, value in a["arrays"].items():
            if name in ("fit.std", "fit.mean"):
                np.testing.assert_allclose(b["arrays"][name], value, rtol=1e-12, atol=1e-12)
            else:
                np.testing.assert_array_equal(b["arrays"][name], value, err_msg=f"{key}: {name}")
    assert any("shards on Ray" in m for _, _, m in progress)
    assert partials and partials[-1].done == len(fashion_slice.split("test"))


def test_relevance_on_ray(cluster, lenet5_fashion, fashion_slice):
    from workbench.core.importance.neuron_importance import compute_importance

    whole = compute_importance(job(), lenet5_fashion, fashion_slice, "fc2")
    on_ray = compute_importance(job(RAY), lenet5_fashion, fashion_slice, "fc2")
    np.testing.assert_allclose(on_ray.totals, whole.totals, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(on_ray.counts, whole.counts)


def test_a_pool_on_ray(cluster, lenet5_fashion, fashion_slice):
    from workbench.core.robustness.pool import build_pool

    split, some = fashion_slice.split("test"), np.arange(0, 1000, 4)
    whole = build_pool(job(), lenet5_fashion, split, 0.1, indices=some, batch_size=32)
    on_ray = build_pool(job(RAY), lenet5_fashion, split, 0.1, indices=some, batch_size=32)
    np.testing.assert_array_equal(on_ray.images, whole.images)
    np.testing.assert_array_equal(on_ray.source_index, whole.source_index)
    np.testing.assert_allclose(on_ray.scores["fol_linf"], whole.scores["fol_linf"], rtol=1e-6, atol=1e-7)


def test_a_search_on_ray(cluster, lenet5_fashion, fashion_tiny):
    from workbench.core.generation.storage import load_generator
    from workbench.core.generation.tig import generate

    generator = load_generator("vae-fashion-mnist")
    whole = generate(job(), generator, lenet5_fashion, 8, budget=20, images=fashion_tiny.split("test"))
    partials = []
    on_ray = generate(job(RAY, on_partial=partials.append), generator, lenet5_fashion, 8, budget=20,
                      images=fashion_tiny.split("test"))
    assert [(r.seed, r.found, r.generations) for r in on_ray.results] == \
        [(r.seed, r.found, r.generations) for r in whole.results]
    assert sorted(r.seed for r in partials) == [r.seed for r in whole.results]


def test_the_experiment_grid_on_ray(cluster, digits_model, digits):
    from workbench.core.robustness.experiment import prepare, robot_experiment

    setup = prepare(job(), digits_model, digits, 0.1, pool_inputs=300, report_subset=50)
    grid = dict(strategies=("random", "be-st"), budgets=("10%",), seeds=(0,), epochs=1, setup=setup)
    whole = robot_experiment(job(), digits_model, digits, 0.1, **grid)
    on_ray = robot_experiment(job(RAY), digits_model, digits, 0.1, **grid)
    for a, b in zip(whole.rows, on_ray.rows):
        assert (b["strategy"], b["selected"], b["best_epoch"]) == (a["strategy"], a["selected"], a["best_epoch"])
        assert b["static_ae_accuracy"] == pytest.approx(a["static_ae_accuracy"], abs=1e-6)


# --- shards that misbehave ----------------------------------------------------------------------------------

def beating(ctx, folder, piece):
    """A shard that never ends by itself: it counts up in its heartbeat file every 50 ms."""
    beat = Path(folder) / f"beat-{piece}"
    for count in itertools.count():
        beat.write_text(str(count))
        ctx.progress(1, 2)
        time.sleep(0.05)


def heartbeats(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.glob("beat-*")}


def test_cancelling_stops_the_remote_tasks(cluster, tmp_path):
    """The job raises Cancelled and its tasks stop beating (how soon, in seconds: bench_cancel_latency.py)."""
    ctx = job(RAY)
    plan = ShardPlan("forever", str(tmp_path), [0, 1], beating, list, [2, 2])
    raised = []

    def run():
        try:
            cluster.run(ctx, plan)
        except Cancelled:
            raised.append(True)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 120  # a generous bound, not a speed
    while len(heartbeats(tmp_path)) < 2 and time.monotonic() < deadline:  # both tasks running
        time.sleep(0.05)
    ctx.cancel()
    thread.join(120)
    assert not thread.is_alive() and raised
    # Stopped: waited for, up to the bound, until no file changes for a second (twenty beats of a live task).
    last, unchanged_since, stopped = heartbeats(tmp_path), time.monotonic(), False
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.1)
        now = heartbeats(tmp_path)
        if now != last:
            last, unchanged_since = now, time.monotonic()
        stopped = time.monotonic() - unchanged_since >= 1.0
    assert stopped, "a cancelled task still beats"


def dying_once(ctx, folder, piece):
    """Shard 1's worker dies on its first try; the retry finds the mark and finishes."""
    mark = Path(folder) / f"tried-{piece}"
    if piece == 1 and not mark.exists():
        mark.write_text("once")
        import os

        os._exit(1)
    return piece * 10


def dying_always(ctx, folder, piece):
    if piece == 1:
        import os

        os._exit(1)
    return piece * 10


def refusing(ctx, folder, piece):
    if piece == 2:
        raise WorkbenchError("This shard's inputs are bad.", "Fix them.")
    return piece


def test_a_worker_that_dies_has_its_shard_run_once_more(cluster, tmp_path):
    plan = ShardPlan("retried", str(tmp_path), [0, 1, 2], dying_once, list, [1, 1, 1])
    assert cluster.run(job(RAY), plan) == [0, 10, 20]
    assert (tmp_path / "tried-1").exists()


def test_what_the_cluster_says_of_a_dead_worker_goes_to_stderr(cluster, tmp_path, capsys):
    """Ray's driver printed "(raylet) A worker died…" to stdout, where a command's --json document goes."""
    plan = ShardPlan("retried", str(tmp_path), [0, 1, 2], dying_once, list, [1, 1, 1])
    assert cluster.run(job(RAY), plan) == [0, 10, 20]
    out, err = capsys.readouterr()
    deadline = time.monotonic() + 60  # the driver prints it as it arrives, maybe after the job's end: a bound
    while "(raylet)" not in err and time.monotonic() < deadline:
        time.sleep(0.2)
        more_out, more_err = capsys.readouterr()
        out, err = out + more_out, err + more_err
    assert "(raylet)" in err and "(raylet)" not in out


def test_a_worker_that_dies_twice_fails_the_job_naming_the_shard_and_keeping_the_rest(cluster, tmp_path):
    plan = ShardPlan("doomed", str(tmp_path), [0, 1, 2], dying_always, list, [1, 1, 1],
                     describe=lambda piece: f"part {piece}")
    with pytest.raises(ShardFailed) as failed:
        cluster.run(job(RAY), plan)
    assert "shard 2 of 3 (part 1)" in failed.value.message and "failed twice" in failed.value.message
    assert set(failed.value.parts) <= {0, 2} and all(failed.value.parts[i] == i * 10 for i in failed.value.parts)
    assert failed.value.hint


def test_a_shard_error_is_the_job_error_with_the_shard_named(cluster, tmp_path):
    plan = ShardPlan("refused", str(tmp_path), [0, 1, 2], refusing, list, [1, 1, 1])
    with pytest.raises(WorkbenchError, match=r"This shard's inputs are bad\. \(shard 3 of 3") as raised:
        cluster.run(job(RAY), plan)
    assert raised.value.hint == "Fix them."


def test_what_cannot_be_sent_to_the_cluster_is_refused_clearly(cluster, lenet5_fashion, fashion_slice):
    import torch

    from workbench.core.robustness.pool import build_pool

    plan = ShardPlan("locked", threading.Lock(), [0], refusing, list, [1])
    with pytest.raises(WorkbenchError, match="cannot be sent to the cluster") as raised:
        cluster.run(job(RAY), plan)
    assert "--executor local" in raised.value.hint
    scripted = torch.jit.script(lenet5_fashion.module)
    with pytest.raises(WorkbenchError, match="cannot be sent to the cluster"):
        build_pool(job(RAY), scripted, fashion_slice.split("test"), 0.1, indices=np.arange(64))


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:9", "localhost"])
def test_an_address_nothing_answers_at_is_refused_within_seconds(cluster, address):
    """Refused by the workbench's own check, a connection with a time limit of seconds, before Ray is asked
    (Ray would retry for minutes)."""
    from workbench.core.execution import ray_cluster

    with pytest.raises(WorkbenchError) as raised:
        ray_cluster.RayShards(address)
    assert raised.value.message.startswith(("Nothing answers at the Ray address", "The Ray address"))
    assert 0 < ray_cluster.CONNECT_TIMEOUT_S <= 10
    assert raised.value.hint


def test_without_ray_installed_the_option_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    monkeypatch.setattr(sharding, "_clusters", {})
    with pytest.raises(WorkbenchError, match="Ray is not installed") as raised:
        executor_for(Distribution("ray"))
    assert "pip install" in raised.value.hint and "--executor local" in raised.value.hint
