"""How the sharded jobs scale on Ray: per-task overhead, and 1 → 2 workers on this machine.

Measured, on the demo (full Fashion-MNIST, the bundled LeNet-5), each against the same job in one pass
here (`--executor local`, this process with its own torch threads) and against the floor:

- **Per-task overhead**: 200 shards that do nothing, on a local Ray instance; and what sending the
  job's shared objects (the model and the 60,000 training images) to the object store costs once.
- **Coverage** of the six default criteria (IDC m = 6 on fc2, NC, KMNC, NBC, SNAC, TKNC): the fit
  pass over the 60,000 training images and the test pass over the 10,000 test images. Floor: one
  forward pass with the activations captured over the same 70,000 images.
- **The latent search** (the bundled VAE, budget 250) from 100 seeds. Floor: none beyond the one-pass
  run (a search is its own unit of work).

Each job is first run in 8 shards here, one after another, timing the shards' own work apart from the
rest (what stays on the driver: IDC's k-means after the fit, merging, the first shard's set-up); then
on a Ray instance of 1 worker and of 2 (`num_cpus`), 8 shards each. From the measured costs it prints
what 10 and 100 workers would give: the driver's part, plus the shards' work shared among the
workers, plus each task's scheduling, plus sending the shared objects once.

    .venv/bin/python benchmarks/bench_scale.py [--seeds 100] [--budget 250]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


SHARDS = 8
BATCH = 500  # the coverage passes' batch: the smallest shard of inputs


def _idle(ctx, shared, piece):
    return piece


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def start_ray(workers: int):
    import ray

    from workbench.core.execution import sharding

    sharding.forget_clusters()
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
    return ray


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--budget", type=int, default=250)
    args = parser.parse_args()

    import torch

    from workbench.core.coverage import measure_coverage
    from workbench.core.data.registry import load_dataset
    from workbench.core.generation.storage import load_generator
    from workbench.core.models.activations import NeuronDefinition, stream_activations
    from workbench.core.generation.tig import (
        SearchInputs,
        extent_of,
        generate,
        search_part,
    )
    from workbench.core.execution.jobs import JobContext
    from workbench.core.execution.shard_plan import ShardPlan
    from workbench.core.execution.sharding import Distribution, LocalShards, executor_for
    from workbench.core.importance.neuron_importance import compute_importance
    from workbench.core.models.model_io import load_model

    data, model = load_dataset("fashion-mnist"), load_model("lenet5-fashion")
    criteria = ("idc", "nc", "kmnc", "nbc", "snac", "tknc")
    importance = compute_importance(JobContext("cpu"), model, data, "fc2")  # given to every run: not timed
    print(f"{os.cpu_count()} cores; torch {torch.__version__}, {torch.get_num_threads()} threads here, "
          f"1 in each Ray worker; {SHARDS} shards per job")

    layers = [NeuronDefinition(n, "post", "element") for n in ("conv1", "pool1", "conv2", "pool2", "fc1", "fc2", "fc3")]

    def floor():
        for split in ("train", "test"):
            for _ in stream_activations(JobContext("cpu"), model.module, data.split(split), layers, data.image_shape,
                                        500):
                pass

    floor_s, _ = timed(floor)
    coverage = lambda ctx: measure_coverage(ctx, model, data, "fc2", criteria, importance=importance)  # noqa: E731
    measure_coverage(JobContext("cpu"), model, data, "fc2", criteria, importance=importance,  # imports, warm-up
                     test_indices=np.arange(500))
    local_cov, reference = timed(lambda: coverage(JobContext("cpu")))
    generator = load_generator("vae-fashion-mnist")
    search = lambda ctx: generate(ctx, generator, model, args.seeds, budget=args.budget,  # noqa: E731
                                  images=data.split("test"))
    local_tig, tig_reference = timed(lambda: search(JobContext("cpu")))
    print(f"floor (activations of 70,000 images, one pass): {floor_s:.1f} s")
    print(f"coverage, one pass here: {local_cov:.1f} s ({local_cov / floor_s:.2f}× the floor)")
    print(f"latent search from {args.seeds} seeds (VAE, budget {args.budget}), one run here: {local_tig:.1f} s")

    # Where the time of a sharded job goes, measured with its shards run here one after another: each
    # plan's shards' own work (what workers share) and the rest, which stays on the driver.
    split_times = {}
    for name, run in (("coverage", coverage), ("search", search)):
        plans = []  # (plan name, seconds of shard work, the most shards its work can be cut into)
        original = LocalShards.run

        def timed_shards(self, ctx, plan, plans=plans, original=original):
            inner, spent = plan.run, []

            def run_one(ctx, shared, piece):
                started = time.perf_counter()
                try:
                    return inner(ctx, shared, piece)
                finally:
                    spent.append(time.perf_counter() - started)

            plan.run = run_one
            try:
                return original(self, ctx, plan)
            finally:
                atom = BATCH if plan.units == "inputs" else 1  # a batch of inputs, a seed, a neuron
                most = max(len(spent), plan.total // atom)
                # the longest a shard can take: the longest measured, cut down to the smallest shard
                plans.append((plan.name, sum(spent), most, max(spent) * len(spent) / most))

        LocalShards.run = timed_shards
        try:
            total, _ = timed(lambda: run(JobContext("cpu", distribution=Distribution(shards=SHARDS))))
        finally:
            LocalShards.run = original
        work = sum(seconds for _, seconds, _, _ in plans)
        split_times[name] = (total - work, plans)
        print(f"{name} in shards here: {total:.1f} s; the shards' work "
              + ", ".join(f"{plan} {seconds:.1f} s (at most {most} shards, each ≥ {longest:.2f} s)"
                          for plan, seconds, most, longest in plans)
              + f"; the driver's part {total - work:.1f} s")
    slowest = max(tig_reference.results, key=lambda r: r.generations)
    card = generator.card.latent_range
    one_seed = SearchInputs(generator, model, tig_reference.seeds, float(card["low"]), float(card["high"]),
                            extent_of(card, "high"), args.budget, 0, "vae", None)
    slowest_s, _ = timed(lambda: search_part(JobContext("cpu"), one_seed, [slowest.seed]))
    print(f"the slowest seed alone ({slowest.generations} generations, not batched with others): {slowest_s:.2f} s")

    rows = {}
    for workers in (1, 2):
        start_ray(workers)
        ray_dist = Distribution("ray", shards=SHARDS)
        executor = executor_for(ray_dist)
        plan = ShardPlan("idle", None, list(range(200)), _idle, list, [1] * 200)
        executor.run(JobContext("cpu"), ShardPlan("warm", None, list(range(workers)), _idle, list, [1] * workers))
        idle_s, _ = timed(lambda: executor.run(JobContext("cpu"), plan))
        import ray

        put_s, _ = timed(lambda: ray.put((model.module, data.split("train"))))
        cov_s, on_ray = timed(lambda: coverage(JobContext("cpu", distribution=ray_dist)))
        same = all(on_ray[k].value == reference[k].value for k in reference)
        tig_s, tig_run = timed(lambda: search(JobContext("cpu", distribution=ray_dist)))
        tig_same = [(r.seed, r.found, r.generations) for r in tig_run.results] == \
            [(r.seed, r.found, r.generations) for r in tig_reference.results]
        rows[workers] = dict(task_ms=1000 * idle_s / 200, put_s=put_s, coverage=cov_s, search=tig_s)
        print(f"Ray, {workers} worker(s): per task {1000 * idle_s / 200:.1f} ms; the model and the training images "
              f"sent once {put_s:.2f} s; coverage {cov_s:.1f} s (same figures: {same}); search {tig_s:.1f} s "
              f"(same seeds found: {tig_same})")

    one, two = rows[1], rows[2]
    print(f"\nspeed-up 1 → 2 workers: coverage ×{one['coverage'] / two['coverage']:.2f}, "
          f"search ×{one['search'] / two['search']:.2f} (2 cores: the driver shares them with the workers)")
    # T(n) = the driver's part + per plan (its passes run one after another) its work shared by the workers
    # it can use, but no less than its longest shard, + each task's scheduling + the objects sent once.
    task_s = one["task_ms"] / 1000
    for name in ("coverage", "search"):
        driver, plans = split_times[name]
        if name == "search":  # a seed's search cannot be cut: the slowest seed alone bounds it
            plans = [(plan, work, most, max(longest, slowest_s)) for plan, work, most, longest in plans]
        for n in (10, 100):
            estimate = driver + one["put_s"]
            for _, work, most, longest in plans:
                shards = min(most, 4 * n)
                estimate += max(work / min(n, shards), longest) + shards * task_s / n
            print(f"{name}: estimated with {n} workers {estimate:.1f} s "
                  f"(×{(driver + sum(p[1] for p in plans)) / estimate:.1f} of the sharded job on one worker)")
        limit = driver + one["put_s"] + sum(longest for _, _, _, longest in plans)
        print(f"{name}: it stops scaling near {limit:.1f} s: the driver's part and each pass's longest shard ("
              + ", ".join(f"{plan} {longest:.2f} s" for plan, _, _, longest in plans) + ")")

    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
