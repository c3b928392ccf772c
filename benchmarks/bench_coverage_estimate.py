"""How well the Coverage view's estimate holds: `coverage_work`'s seconds against the real run.

Opening the Coverage view on the demo (LeNet-5, the full Fashion-MNIST) times what the test and
training splits need with the default criteria (a trial on a sample), and starts it by itself only
when that is 30 s or less. This prints the estimate, the trial's own time, and then measures the same
work as the view does (the relevance pass, then each set in turn, the first storing the fits the
second reads), so the two stand side by side in one process, under whatever load the machine has.
The floor is a plain forward pass over the training split. Run:
`python benchmarks/bench_coverage_estimate.py [--rounds 2]` (about 5 minutes a round on 2 cores).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from workbench.core.coverage.estimate import coverage_work
from workbench.core.coverage.measure import measure_groups
from workbench.core.coverage.registry import criterion_catalogue, criterion_groups
from workbench.core.data.registry import load_dataset
from workbench.core.execution.jobs import JobContext
from workbench.core.importance.neuron_importance import compute_importance
from workbench.core.models.model_io import load_model
from workbench.core.project.folder import Project

LAYER, M = "fc2", 6


def forward_floor(model, split) -> float:
    started = time.perf_counter()
    with torch.no_grad():
        for lo in range(0, len(split), 500):
            model.module(torch.as_tensor(split.numpy(slice(lo, lo + 500))))
    return time.perf_counter() - started


def one_round(model, data, folder: Path) -> None:
    ctx = JobContext("cpu")
    project = Project.create(folder, "fashion-mnist", ["lenet5-fashion"])
    groups = criterion_groups([info.name for info in criterion_catalogue() if info.default])
    sets = [("test", None), ("train", None)]
    started = time.perf_counter()
    work = coverage_work(ctx, model, data, sets, LAYER, groups, M, project=project, relevance_batch=512)
    trial = time.perf_counter() - started
    parts = ", ".join(f"{name} {seconds:.1f}" for name, seconds in work.parts.items())
    print(f"estimate {work.seconds:7.1f} s  ({parts}); the trial took {trial:.1f} s")
    started = time.perf_counter()
    importance = compute_importance(ctx, model, data, LAYER, per_class=True, batch_size=512, project=project)
    relevance = time.perf_counter() - started
    for split, indices in sets:
        measure_groups(ctx, model, data, split, indices, LAYER, groups, M, importance, project=project)
    actual = time.perf_counter() - started
    floor = forward_floor(model, data.split("train"))
    print(f"actual   {actual:7.1f} s  (relevance {relevance:.1f}); estimate / actual {work.seconds / actual:.2f}; "
          f"floor (a forward pass over train) {floor:.2f} s, actual / floor {actual / floor:.0f}×")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    model, data = load_model("lenet5-fashion"), load_dataset("fashion-mnist")
    for round_ in range(args.rounds):
        with tempfile.TemporaryDirectory() as folder:
            print(f"round {round_ + 1}:")
            one_round(model, data, Path(folder) / "project")


if __name__ == "__main__":
    main()
