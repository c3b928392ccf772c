"""`workbench importance` end to end, and the ablation numbers it reports (DeepImportance's Table 2 question).

For each bundled Fashion-MNIST LeNet and its DeepImportance subject layer (LeNet-1 `conv2`, LeNet-4
`fc1`, LeNet-5 `fc2`) and each ablation mode (zero, mean) it runs the real command in a fresh
process — `workbench importance --model M --data fashion-mnist --layer L --ablation MODE --json` —
over all 60k training images (importance) and 10k test images (ablation, m = 6, 5 random draws,
seed 0), several rounds, and prints the best wall time (process start to exit, so imports and
data loading count) with the conservation error and the ablation result. The results are
deterministic; only the times vary with other load on the machine, hence best-of-rounds.

Run: `python benchmarks/bench_importance_cli.py [--rounds 3]` (about two minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SUBJECTS = [("lenet5-fashion", "fc2"), ("lenet1-fashion", "conv2"), ("lenet4-fashion", "fc1")]


def workbench_command() -> list[str]:
    script = Path(sys.executable).parent / "workbench"
    return [str(script)] if script.exists() else [sys.executable, "-m", "workbench"]


def run_once(model: str, layer: str, mode: str) -> tuple[float, dict]:
    argv = workbench_command() + ["importance", "--model", model, "--data", "fashion-mnist", "--layer", layer,
                                  "--ablation", mode, "--json", "--device", "cpu"]
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr}")
    return wall, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print("| model | layer | mode | best wall time | conservation error | baseline | top-6 drop | "
          "random drop (mean ± sd, 5 draws) | downstream change top-6 / random | important hurts more |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model, layer in SUBJECTS:
        for mode in ("zero", "mean"):
            times, result = [], None
            for _ in range(args.rounds):
                wall, result = run_once(model, layer, mode)
                times.append(wall)
            a, c = result["ablation"], result["conservation"]
            print(f"| {model} | `{layer}` | {mode} | {min(times):.1f} s | {c['error']:.1e} | "
                  f"{a['baseline_accuracy'] * 100:.2f} % | {a['important_drop'] * 100:.2f} | "
                  f"{a['random_drop_mean'] * 100:.2f} ± {a['random_drop_std'] * 100:.2f} | "
                  f"{a['important_activation_change'] * 100:.1f} % / {a['random_activation_change_mean'] * 100:.1f} % | "
                  f"{'yes' if a['important_hurts_more'] else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
