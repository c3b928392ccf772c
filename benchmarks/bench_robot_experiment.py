"""The RobOT protocol on LeNet-5 / Fashion-MNIST: robustness after retraining vs budget, per strategy.

    .venv/bin/python benchmarks/bench_robot_experiment.py [--budgets 1%,2%,4%,8%] [--seeds 0,1,2]
        [--epochs 10] [--out benchmarks/robot] [--checkpoint clean]

Protocol (docs/methods/fuzzing-and-retraining.md#the-robot-experiment): the bundled `lenet5-fashion`,
ε = 0.1; the candidate pool is FGSM ∪ PGD successes over all 60k training images against the original
model; 10 % of its source images are held out for checkpointing (clean mode); `fp_test` is FGSM ∪ PGD
successes over the 10k test images, frozen. Each (strategy, budget, seed) fine-tunes a copy of the original with the
`robot-mnist` preset (Adam 1e-3, batch 64) on train ∪ selected and reports static AE accuracy,
adaptive PGD-10 robust accuracy on a fixed seeded 1,000-image test subset, and clean accuracy.

Runs are appended to `<out>/runs.jsonl` as they finish and skipped when the script is started
again, so a long run can be resumed; the pools are kept in `<out>/project`. At the end the table
(`robot_experiment.md`), the rows (`.csv`, `.json`) and a plot (`robot_experiment.png`) are written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="lenet5-fashion")
    parser.add_argument("--data", default="fashion-mnist")
    parser.add_argument("--strategies", default="be-st,km-st,deepgini,random")
    parser.add_argument("--budgets", default="1%,2%,4%,8%")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=None, help="default: the preset's 10")
    parser.add_argument("--checkpoint", default="clean", choices=("clean", "paper"))
    parser.add_argument("--pool-inputs", type=int, default=None)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "robot"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    from workbench.core.data.registry import load_dataset
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.model_io import load_model
    from workbench.core.project.folder import Project
    from workbench.core.robustness.attacks import default_eps
    from workbench.core.robustness.experiment import ExperimentResult, prepare, run_strategy
    from workbench.core.robustness.pool import load_pool, save_pool

    torch.set_num_threads(args.threads)  # OpenMP workers spin against other processes on a small shared box
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model, dataset = load_model(args.model), load_dataset(args.data)
    eps = default_eps(args.data)
    project = Project.open_or_create(out / "project", args.data, [args.model])
    key = {"model_fingerprint": model.fingerprint(), "eps": eps, "pool_inputs": args.pool_inputs}
    stored = {kind: project.find_artifact("testset", kind_of_pool=kind, **key) for kind in ("train", "fp_test")}
    ctx = JobContext("cpu", on_progress=lambda d, t, m: None)
    started = time.monotonic()
    setup = prepare(ctx, model, dataset, eps, seed=0, checkpoint_mode=args.checkpoint,
                    pool=load_pool(project, stored["train"]) if stored["train"] else None,
                    fp_test=load_pool(project, stored["fp_test"]) if stored["fp_test"] else None,
                    pool_inputs=args.pool_inputs)
    for kind, pool in (("train", setup.pool), ("fp_test", setup.fp_test)):
        if not stored[kind]:
            save_pool(project, f"{kind} pool", pool, kind_of_pool=kind, **key)
    print(f"setup {time.monotonic() - started:.0f} s: pool {len(setup.pool)} ({setup.pool.attack_counts()}), "
          f"selectable {len(setup.selectable)}, held out {len(setup.heldout)}, fp_test {len(setup.fp_test)}; "
          f"baseline {json.dumps(setup.baseline)}", flush=True)

    log = out / "runs.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    seen = {(r["strategy"], r["budget"], r["seed"], r["checkpoint_mode"], r.get("epochs_arg")) for r in done}
    strategies, budgets = args.strategies.split(","), args.budgets.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    for budget in budgets:
        for seed in seeds:
            for strategy in strategies:
                if (strategy, budget, seed, args.checkpoint, args.epochs) in seen:
                    continue
                row, _ = run_strategy(ctx, setup, strategy, budget, seed, epochs=args.epochs)
                row["epochs_arg"] = args.epochs
                done.append(row)
                with log.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{strategy:9s} {budget:>4s} seed {seed}: static {row['static_ae_accuracy']:.3f} "
                      f"adaptive {row['adaptive_robust_accuracy']:.3f} clean {row['clean_accuracy']:.3f} "
                      f"FOL {row['fol_mean']:.2f} ({row['seconds']:.0f} s)", flush=True)
    rows = [r for r in done if r["checkpoint_mode"] == args.checkpoint and r.get("epochs_arg") == args.epochs
            and r["strategy"] in strategies and r["budget"] in budgets and r["seed"] in seeds]
    params = {"strategies": strategies, "budgets": budgets, "seeds": seeds, "preset": "robot-mnist",
              "epochs": args.epochs or 10, "checkpoint_mode": args.checkpoint, "eps": eps, "model": args.model,
              "dataset": args.data, "model_fingerprint": key["model_fingerprint"],
              "eps_source": f"the {args.data} default of "
                            "docs/methods/fol-and-selection.md#attack-budgets-per-dataset",
              "report_subset": setup.report_subset}
    result = ExperimentResult(rows, setup.summary(), params)
    from workbench.core.robustness.experiment_plot import save_experiment_plot
    from workbench.core.robustness.experiment_report import write_experiment_outputs

    written = write_experiment_outputs(result, out, plot=save_experiment_plot)
    print("wrote", ", ".join(written.values()))
    print(f"mean static AE accuracy by strategy: "
          f"{ {s: round(float(np.mean([r['static_ae_accuracy'] for r in rows if r['strategy'] == s])), 3) for s in strategies} }")
    return 0


if __name__ == "__main__":
    sys.exit(main())
