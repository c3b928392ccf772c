"""Jobs as shards (`core.execution.sharding`): every sharded job gives the result of one pass.

Shards run here (`LocalShards`) give bit-identical results wherever the computation is the same, batch
for batch: coverage states, pools, searches. Sums added in another order (relevance totals, the
training statistics' mean and standard deviation) agree to float rounding. `test_ray_sharding.py`
runs the same jobs on a local Ray instance.
"""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.coverage import measure_coverage
from workbench.core.coverage.protocol import CoverageValue, Criterion
from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.execution.shard_plan import ShardPlan, split_list, split_range
from workbench.core.execution.sharding import Distribution, LocalShards, shard_count

SHARDED = Distribution(shards=3)
CRITERIA = ("idc", "nc", "kmnc", "nbc", "snac", "tknc", "tknp", "lsa", "dsa", "mdsa")


def job(distribution=None, **callbacks) -> JobContext:
    return JobContext("cpu", distribution=distribution, **callbacks)


# --- cutting work into shards -------------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 7, 100, 999, 1000, 1001])
@pytest.mark.parametrize("shards", [1, 2, 3, 8, 5000])
@pytest.mark.parametrize("align", [1, 64, 500])
def test_ranges_cover_the_inputs_in_order_on_batch_boundaries(n, shards, align):
    ranges = split_range(n, shards, align)
    covered = [i for a, b in ranges for i in range(a, b)]
    assert covered == list(range(n))  # every input once, in order
    assert all(a % align == 0 and b > a for a, b in ranges)
    assert len(ranges) <= max(1, shards)
    blocks = -(-n // align)
    assert len(ranges) == (min(shards, blocks) if n else 0)


def test_lists_and_shard_counts():
    assert split_list(range(10), 3) == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert split_list([], 4) == []
    assert shard_count(Distribution(shards=5), 3, workers=1) == 3  # never more shards than work
    assert shard_count(Distribution("ray"), 10_000, workers=2, smallest=500) == 8  # a few per worker
    assert shard_count(Distribution("ray"), 900, workers=2, smallest=500) == 1


@pytest.mark.parametrize("bad", [dict(executor="spark"), dict(shards=0), dict(shards=2.5), dict(shards=True)])
def test_a_bad_distribution_is_refused_with_what_to_do(bad):
    with pytest.raises(WorkbenchError) as raised:
        Distribution(**bad)
    assert raised.value.hint


def _double(ctx, shared, piece):
    for i, _ in enumerate(piece):
        ctx.progress(i + 1, len(piece))
    return [shared * x for x in piece]


def test_local_shards_report_progress_partials_and_merge_in_order():
    progress, partials = [], []
    plan = ShardPlan("double", 2, [[1, 2], [3], [4, 5, 6]], _double, lambda parts: sum(parts, []), [2, 1, 3],
                     partial=lambda parts: [sorted(parts)])
    out = LocalShards().run(job(on_progress=lambda d, t, m: progress.append((d, t)), on_partial=partials.append), plan)
    assert out == [2, 4, 6, 8, 10, 12]
    assert progress[-1] == (6, 6) and all(t == 6 for _, t in progress)
    assert [d for d, _ in progress] == sorted(d for d, _ in progress)
    assert partials == [[0], [0, 1], [0, 1, 2]]


def _in_steps(ctx, shared, piece):
    for step in range(1, 11):  # its own count, ten steps, whatever the piece's size
        ctx.progress(step, 10)
    ctx.progress(1, 10, "a second stage starts its count again")
    return piece


def test_a_shard_counting_in_its_own_steps_fills_its_share_of_the_bar():
    progress = []
    plan = ShardPlan("steps", None, ["a", "b"], _in_steps, list, [30, 10])
    LocalShards().run(job(on_progress=lambda d, t, m: progress.append(d)), plan)
    assert progress[:11] == [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30]  # the first shard's 30 units, step by step
    assert progress == sorted(progress) and progress[-1] == 40  # never back, however a shard counts


def test_a_stage_spanning_several_steps_fills_their_slice():
    progress = []
    ctx = job(on_progress=lambda d, t, m: progress.append(d / t))
    runs = ctx.stage(1, 5, "runs", span=4)
    runs.progress(0, 8)
    runs.progress(4, 8)
    runs.progress(8, 8)
    assert progress == pytest.approx([0.2, 0.6, 1.0])


def test_a_cancelled_plan_stops_or_keeps_what_its_shards_found():
    def run(ctx, shared, piece):
        if piece == "second":
            ctx.cancel()
        return piece

    plan = ShardPlan("p", None, ["first", "second", "third"], run, list, [1, 1, 1])
    with pytest.raises(Cancelled):
        LocalShards().run(job(), plan)
    plan.on_stop = lambda parts: sorted(parts.values())
    ctx = job()
    assert LocalShards().run(ctx, plan) == ["first", "second"]
    assert ctx.stopped_early


# --- coverage --------------------------------------------------------------------------------------------

def assert_same_states(whole, sharded, rounded=("fit.std", "fit.mean")):
    a, b = whole.criterion.state_dict(), sharded.criterion.state_dict()
    assert a["meta"] == b["meta"] and a["identity_hash"] == b["identity_hash"]
    assert set(a["arrays"]) == set(b["arrays"])
    for name, value in a["arrays"].items():
        if any(name.endswith(r.split(".")[-1]) and name.startswith("fit.") for r in rounded):
            np.testing.assert_allclose(b["arrays"][name], value, rtol=1e-12, atol=1e-12)
        else:
            np.testing.assert_array_equal(b["arrays"][name], value, err_msg=name)


def assert_curve_points_hold(whole: np.ndarray, sharded: np.ndarray):
    """Every point of the sharded curve is the one-pass curve's point at that many inputs."""
    at = {int(row[0]): row for row in whole}
    assert sharded[-1, 0] == whole[-1, 0]
    for row in sharded:
        np.testing.assert_array_equal(at[int(row[0])], row)


@pytest.mark.parametrize("per_class", [False, True])
def test_coverage_in_shards_is_the_coverage_of_one_pass(lenet5_fashion, fashion_slice, per_class):
    criteria = CRITERIA if not per_class else ("idc", "nc", "kmnc", "tknp", "lsa")
    whole = measure_coverage(job(), lenet5_fashion, fashion_slice, criteria=criteria, per_class=per_class,
                             batch_size=200)
    partials = []
    sharded = measure_coverage(job(SHARDED, on_partial=partials.append), lenet5_fashion, fashion_slice,
                               criteria=criteria, per_class=per_class, batch_size=200)
    for key in whole:
        assert sharded[key].value == whole[key].value, key
        assert sharded[key].per_class == whole[key].per_class
        assert_same_states(whole[key], sharded[key])
        assert_curve_points_hold(whole[key].curve, sharded[key].curve)
        assert sharded[key].warnings == whole[key].warnings
    assert partials and partials[-1].done == 1000  # running values as shards finished


def test_the_first_shard_keeps_the_curve_fine_and_later_shards_add_a_point_each(lenet5_fashion, fashion_slice):
    whole = measure_coverage(job(), lenet5_fashion, fashion_slice, criteria=["nc"], batch_size=200)["nc"]
    sharded = measure_coverage(job(Distribution(shards=4)), lenet5_fashion, fashion_slice, criteria=["nc"],
                               batch_size=200)["nc"]
    # 1,000 inputs in 4 shards of batch-aligned ranges: [0, 200), [200, 400), [400, 600), [600, 1000)
    np.testing.assert_array_equal(sharded.curve[:, 0], [100, 200, 400, 600, 1000])
    assert_curve_points_hold(whole.curve, sharded.curve)


class Unmergeable(Criterion):
    """A plugin-style criterion that cannot merge shards: covered when above the training mean."""

    name, title = "above-mean", "Above the mean"

    def __init__(self, layers=None):
        super().__init__()
        self.layers = layers
        self.reset()

    def _start_fit(self):
        self.total, self.n = 0.0, 0

    def _partial_fit(self, layers, labels, predictions):
        v = np.concatenate([a.reshape(len(a), -1) for a in layers.values()], axis=1)
        self.total, self.n = self.total + v.sum(0), self.n + len(v)

    def _update(self, layers, labels, predictions):
        v = np.concatenate([a.reshape(len(a), -1) for a in layers.values()], axis=1)
        self.hit |= (v > self.total / self.n).any(0)

    def _reset_cover(self):
        self.hit = np.zeros(0 if not getattr(self, "n", 0) else len(self.total), dtype=bool)

    def coverage(self):
        return CoverageValue.of(int(self.hit.sum()), len(self.hit))


def test_a_criterion_that_cannot_merge_runs_here_with_a_notice(lenet5_fashion, fashion_slice):
    criteria = [("above-mean", Unmergeable(layers=["fc1"])), "nc"]
    notices = []
    whole = measure_coverage(job(), lenet5_fashion, fashion_slice, criteria=criteria, batch_size=200)
    sharded = measure_coverage(job(SHARDED, on_notice=notices.append), lenet5_fashion, fashion_slice,
                               criteria=[("above-mean", Unmergeable(layers=["fc1"])), "nc"], batch_size=200)
    assert not Unmergeable(layers=["fc1"]).mergeable
    assert any("above-mean cannot merge" in n for n in notices)
    assert {k: r.value for k, r in sharded.items()} == {k: r.value for k, r in whole.items()}


def test_merging_refuses_another_criterion_fit():
    from workbench.core.coverage import create_criterion

    with pytest.raises(WorkbenchError, match="cannot be merged"):
        create_criterion("kmnc", k=10).merge_fit(create_criterion("kmnc", k=20))


def test_the_example_plugin_criterion_merges(lenet5_fashion, fashion_slice):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "plugins" / "example_criterion.py"
    spec = importlib.util.spec_from_file_location("example_criterion_for_sharding", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    make = lambda: [("half-max", module.HalfMaxCoverage(layers=["fc1", "fc2"]))]  # noqa: E731
    assert make()[0][1].mergeable
    notices = []
    whole = measure_coverage(job(), lenet5_fashion, fashion_slice, criteria=make(), batch_size=200)["half-max"]
    sharded = measure_coverage(job(SHARDED, on_notice=notices.append), lenet5_fashion, fashion_slice,
                               criteria=make(), batch_size=200)["half-max"]
    assert not notices and sharded.value == whole.value
    assert_same_states(whole, sharded)


# --- importance, attacks, the latent search, the experiment grid ------------------------------------------

def test_relevance_in_shards_sums_to_the_relevance_of_one_pass(lenet5_fashion, fashion_slice):
    from workbench.core.importance.neuron_importance import compute_importance

    whole = compute_importance(job(), lenet5_fashion, fashion_slice, "fc2", per_class=True)
    partials = []
    sharded = compute_importance(job(SHARDED, on_partial=partials.append), lenet5_fashion, fashion_slice, "fc2",
                                 per_class=True)
    np.testing.assert_allclose(sharded.totals, whole.totals, rtol=1e-9, atol=1e-9)  # summed in another order
    np.testing.assert_allclose(sharded.per_class, whole.per_class, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(sharded.counts, whole.counts)
    np.testing.assert_array_equal(sharded.ranking, whole.ranking)
    assert len(partials) == 3 and partials[-1].done == whole.inputs


def test_a_pool_in_shards_is_the_pool_of_one_pass(lenet5_fashion, fashion_slice):
    from workbench.core.robustness.pool import build_pool

    split, some = fashion_slice.split("test"), np.arange(0, 1000, 3)
    whole = build_pool(job(), lenet5_fashion, split, 0.1, indices=some, batch_size=32)
    sharded = build_pool(job(Distribution(shards=4)), lenet5_fashion, split, 0.1, indices=some, batch_size=32)
    # each input gets the random start it gets in one pass: the same candidates, bit for bit
    np.testing.assert_array_equal(sharded.images, whole.images)
    np.testing.assert_array_equal(sharded.source_index, whole.source_index)
    np.testing.assert_array_equal(sharded.attack, whole.attack)
    for name, scores in whole.scores.items():
        np.testing.assert_allclose(sharded.scores[name], scores, rtol=1e-6, atol=1e-7, err_msg=name)
    assert sharded.params == whole.params


def test_a_pool_whose_first_shards_find_nothing(lenet5_fashion, fashion_slice):
    """Shards that keep no candidate are joined with those that do."""
    from workbench.core.robustness.pool import build_pool

    split = fashion_slice.split("test")
    whole = build_pool(job(), lenet5_fashion, split, 0.02, indices=np.arange(64), batch_size=16)
    sharded = build_pool(job(Distribution(shards=4)), lenet5_fashion, split, 0.02, indices=np.arange(64),
                         batch_size=16)
    np.testing.assert_array_equal(sharded.source_index, whole.source_index)


@pytest.mark.parametrize("name", ["vae-fashion-mnist", "gan-fashion-mnist"])
def test_a_search_in_shards_is_the_search_of_one_run(lenet5_fashion, fashion_tiny, name):
    from workbench.core.generation.storage import load_generator
    from workbench.core.generation.tig import generate

    generator = load_generator(name)  # a bundled generator: its card holds the latent range the search needs
    images = fashion_tiny.split("test")
    whole = generate(job(), generator, lenet5_fashion, 8, budget=20, images=images)
    partials = []
    sharded = generate(job(SHARDED, on_partial=partials.append), generator, lenet5_fashion, 8, budget=20,
                       images=images)
    same = lambda run: [(r.seed, r.found, r.generations, r.predicted) for r in run.results]  # noqa: E731
    assert same(sharded) == same(whole)
    for a, b in zip(whole.results, sharded.results):
        np.testing.assert_allclose(b.best_image, a.best_image, atol=1e-5)
        np.testing.assert_allclose(b.fitness, a.fitness, rtol=1e-5, atol=1e-5)
    assert sorted(r.seed for r in partials) == [r.seed for r in whole.results]


def test_a_search_in_shards_stopped_says_so_once_and_keeps_what_it_found(lenet5_fashion, fashion_tiny):
    from workbench.core.generation.storage import load_generator
    from workbench.core.generation.tig import generate

    generator = load_generator("vae-fashion-mnist")
    ended = []

    def stop_after_first_seed(result):
        ended.append(result)
        ctx.cancel()

    ctx = job(SHARDED, on_partial=stop_after_first_seed)
    run = generate(ctx, generator, lenet5_fashion, 8, budget=20, images=fashion_tiny.split("test"))
    assert len(run.results) == int(np.sum(run.seeds.kept)) and ctx.stopped_early and ended
    assert any(r.finished for r in run.results) and not all(r.finished for r in run.results)
    assert sum("was stopped" in text for text in ctx.notices) == 1


def test_the_experiment_grid_in_shards_has_the_rows_of_one_run(digits_model, digits):
    from workbench.core.robustness.experiment import prepare, robot_experiment

    setup = prepare(job(), digits_model, digits, 0.1, pool_inputs=300, report_subset=50)
    grid = dict(strategies=("random", "be-st"), budgets=("10%",), seeds=(0, 1), epochs=1, setup=setup)
    whole = robot_experiment(job(), digits_model, digits, 0.1, **grid)
    partials = []
    sharded = robot_experiment(job(SHARDED, on_partial=partials.append), digits_model, digits, 0.1, **grid)

    def key(rows):
        return [(r["strategy"], r["budget"], r["seed"], r["selected"], r["best_epoch"]) for r in rows]

    assert key(sharded.rows) == key(whole.rows)
    for a, b in zip(whole.rows, sharded.rows):
        assert b["static_ae_accuracy"] == pytest.approx(a["static_ae_accuracy"], abs=1e-6)
    assert key(partials) == key(whole.rows)
