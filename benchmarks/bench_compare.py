"""How fast a comparison fills: three sets of 10,000 inputs, once computed and once read back.

A project on the demo (Fashion-MNIST, the bundled LeNet-5) compares the test split, the first 10,000
training inputs and a seeded sample of 10,000 other training inputs by IDC (m = 6) and the classic
criteria, with 1,000 bootstrap and size-matched resamples. Printed, beside the floor — a plain forward
pass over the same 30,000 inputs (no gradients, batches of 500):

- the first comparison, which fits the criteria and profiles every set (a pass with activations,
  one with input gradients for FOL, and the novelty distances);
- the second, which reads the stored profiles and each set's resampled figures back: what the Compare
  view waits for when it opens again;
- 1,000 bootstrap resamples of IDC and of KMNC coverage of one 10,000-input set from its stored
  covered items, without the model.

    .venv/bin/python benchmarks/bench_compare.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

SETS = ["fashion-mnist:test", "fashion-mnist:train[first=10000]", "fashion-mnist:train[sample=10000 seed=1]"]


def forward_floor(model, testsets) -> float:
    import torch

    module = model.module.eval()
    started = time.perf_counter()
    with torch.no_grad():
        for testset in testsets:
            for start in range(0, len(testset), 500):
                module(torch.as_tensor(testset.numpy(np.arange(start, min(start + 500, len(testset))))))
    return time.perf_counter() - started


def main() -> int:
    import torch

    from workbench.core.comparison import resampling as rs
    from workbench.core.comparison.compare import compare_testsets
    from workbench.core.data.registry import load_dataset
    from workbench.core.execution.jobs import JobContext
    from workbench.core.labeling.labelled_sets import resolve
    from workbench.core.models.model_io import load_model
    from workbench.core.project.folder import Project

    torch.set_num_threads(os.cpu_count() or 1)
    folder = Path(tempfile.mkdtemp(prefix="bench-compare-")) / "project"
    project = Project.create(folder, "fashion-mnist", ["lenet5-fashion"])
    dataset, model = load_dataset("fashion-mnist"), load_model("lenet5-fashion")
    testsets = [resolve(project, name, dataset) for name in SETS]
    floor = min(forward_floor(model, testsets) for _ in range(3))
    ctx = JobContext("cpu")
    started = time.perf_counter()
    first = compare_testsets(ctx, project, SETS, model, dataset)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    second = compare_testsets(ctx, Project.open(folder), SETS, model, dataset)
    warm = time.perf_counter() - started
    assert all(s.profile_reused for s in second.sets)
    assert [s["figures"] for s in second.to_dict()["sets"]] == [s["figures"] for s in first.to_dict()["sets"]]
    profile = second.profiles[SETS[0]]
    draws = rs.bootstrap_draws(len(profile), 1000, 0)
    timings = {}
    for criterion in ("idc", "kmnc"):
        started = time.perf_counter()
        rs.resampled_coverage(profile.items[criterion], draws)
        timings[criterion] = time.perf_counter() - started
    print(f"Three sets of 10,000 inputs, IDC m = 6 + NC, KMNC, NBC, SNAC, TKNC, 1,000 resamples "
          f"(torch threads: {torch.get_num_threads()})")
    print(f"  floor: a forward pass over the 30,000 inputs   {floor:7.2f} s")
    print(f"  first comparison (fits, profiles computed)    {cold:7.2f} s   {cold / floor:6.1f}× the floor")
    print(f"  again, profiles read back (the view opening)  {warm:7.2f} s   {warm / floor:6.1f}× the floor")
    for criterion, seconds in timings.items():
        total = profile.items[criterion].shape[1]
        print(f"  1,000 bootstrap resamples of {criterion.upper():4} ({total:,} items) {seconds:7.2f} s   "
              f"{seconds / floor:6.2f}× the floor, no model pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
