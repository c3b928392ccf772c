"""The GenAI-TIG benchmark's table for the workbench's generators: seeds kept, misbehaviours, proxy-valid
misbehaviours and mean generations per generator and extent, with `workbench generate`.

Each cell is one `workbench generate --json` run (the benchmark's objective, budget 250 generations,
seed 0) against the bundled LeNet-5 of the dataset, with the bundled validators' proxies; its JSON
goes to `--out`, and the table is printed as Markdown. The spec's reference figures (the benchmark's
MNIST, SVHN, CIFAR-10 and ImageNet runs) are orientation, not targets: the workbench's small
diffusion model is not Stable Diffusion, and Fashion-MNIST is not MNIST.

Run: `python benchmarks/bench_tig_table.py [--seeds 100] [--cells vae,gan] [--out DIR]`; on two cores
the VAE cells take a minute or two each, the cDCGAN's up to ten, the diffusion model's hours at 100
seeds (`--diffusion-seeds` and `--diffusion-budget` make it fit).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"fashion-mnist": ("lenet5-fashion", ("vae-fashion-mnist", "gan-fashion-mnist", "diffusion-fashion-mnist")),
         "mnist-5k": ("lenet5-mnist5k", ("vae-mnist-5k", "gan-mnist-5k"))}


def run_cell(dataset: str, model: str, generator: str, extent: str, seeds: int, budget: int, out: Path) -> dict:
    target = out / f"{generator}-{extent}.json"
    if target.is_file():  # a finished cell is kept: the run can be continued
        return json.loads(target.read_text())
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "workbench", "generate", "--generator", generator, "--model", model,
                           "--data", dataset, "--seeds", str(seeds), "--extent", extent, "--budget", str(budget),
                           "--json"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{generator} {extent} failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["budget"] = budget
    target.write_text(json.dumps(result, indent=1))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--budget", type=int, default=250)
    parser.add_argument("--diffusion-seeds", type=int, default=10)
    parser.add_argument("--diffusion-budget", type=int, default=50)
    parser.add_argument("--kinds", default="vae,gan,diffusion")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "tig-table"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kinds = args.kinds.split(",")
    rows = []
    for dataset, (model, generators) in TASKS.items():
        for generator in generators:
            kind = generator.split("-")[0]
            if kind not in kinds:
                continue
            seeds = args.diffusion_seeds if kind == "diffusion" else args.seeds
            budget = args.diffusion_budget if kind == "diffusion" else args.budget
            cells = {extent: run_cell(dataset, model, generator, extent, seeds, budget, out)
                     for extent in ("high", "low")}
            rows.append((dataset, generator, cells))
            print(f"done {generator}", file=sys.stderr, flush=True)
    print("| task, generator | seeds | budget | seeds kept | misbehaviours | proxy-valid (SO & DAIV) | "
          "+ oracle kept label | mean gen. | time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dataset, generator, cells in rows:
        s = {e: c["summary"][0] for e, c in cells.items()}

        def pair(key, fmt="{}"):
            return "/".join("—" if s[e].get(key) is None else fmt.format(s[e][key]) for e in ("high", "low"))

        print(f"| {dataset}, {generator.split('-')[0]} | {s['high'].get('seeds')} | {cells['high']['budget']} | "
              f"{pair('kept')} | {pair('misbehaviours')} | {pair('proxy_both_valid')} | "
              f"{pair('proxy_valid_preserved')} | {pair('mean_generations', '{:.0f}')} | "
              f"{cells['high']['seconds'] / 60:.1f}/{cells['low']['seconds'] / 60:.1f} min |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
