"""Does targeting importance-driven coverage reach more IDC combinations than the benchmark's objective?

For each bundled Fashion-MNIST generator named, the same seeds (the same random streams) are searched
twice at the same budget against the bundled LeNet-5: with the benchmark's misbehaviour objective and
with the new-IDC-combination objective (IDC of the model's coverage layer, m = `--m`, fitted on the
training split; the test split is the reference whose uncovered combinations are the targets). For
the best input of every searched seed under each objective, the IDC combination it falls in is read
with the same fitted IDC model; printed per generator and objective: seeds searched, successes,
misbehaviours, and the distinct combinations the inputs reach that the test split leaves uncovered
(all best inputs, and the misbehaviours among them), with the mean generations used.

Run: `python benchmarks/bench_idc_objective.py [--seeds 50] [--budget 100] [--generators vae,gan] [--m 6]`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from workbench.core.data.registry import load_dataset  # noqa: E402
from workbench.core.execution.jobs import JobContext  # noqa: E402
from workbench.core.generation.objectives import Misbehaviour, idc_objective  # noqa: E402
from workbench.core.generation.storage import load_generator  # noqa: E402
from workbench.core.generation.tig import generate  # noqa: E402
from workbench.core.models.model_io import load_model  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--generators", default="vae,gan")
    parser.add_argument("--m", type=int, default=6)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    ctx = JobContext(args.device)
    classifier = load_model("lenet5-fashion")
    data = load_dataset("fashion-mnist")
    test = data.split("test")
    started = time.perf_counter()
    target = idc_objective(ctx, classifier, data, m=args.m)
    info = target.describe()
    print(f"IDC of {info['layer']} (m = {info['m']}, {info['incc']} combinations): the test split covers "
          f"{info['reference_covered']}, leaving {len(target.uncovered)} to reach ({time.perf_counter() - started:.0f} s "
          f"to fit and measure)")
    print("| generator | objective | seeds searched | successes | misbehaviours | new combinations (all best inputs) | "
          "new combinations (misbehaviours) | mean generations | time |")
    print("|---|---|---|---|---|---|---|---|---|")
    uncovered = set(target.uncovered.tolist())
    for kind in args.generators.split(","):
        generator = load_generator(f"{kind}-fashion-mnist", device=ctx.device)
        for objective in (Misbehaviour(), target):
            started = time.perf_counter()
            run = generate(ctx, generator, classifier, args.seeds, "high", args.budget, 0, test, kind,
                           objective=objective)
            seconds = time.perf_counter() - started
            results = run.results
            if not results:
                continue
            images = torch.from_numpy(np.stack([r.best_image for r in results]))
            labels = torch.tensor([r.label for r in results])
            with torch.inference_mode():
                scores = target.evaluate(ctx, classifier, images, labels)
            codes = scores.code.numpy()
            wrong = (scores.predicted != labels).numpy()
            new = np.array([c in uncovered for c in codes])
            found = [r for r in results if r.found]
            mean = np.mean([r.generations for r in found]) if found else float("nan")
            print(f"| {kind} | {objective.name} | {len(results)} | {len(found)} | {int(wrong.sum())} | "
                  f"{len(set(codes[new].tolist()))} | {len(set(codes[new & wrong].tolist()))} | {mean:.0f} | "
                  f"{seconds:.0f} s |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
