"""The retraining sub-commands: `retrain` fine-tunes on a selection and reports static AE, adaptive
robust and clean accuracy; `converge` runs rounds of attack and cumulative fine-tuning until
robustness reaches a requirement; `experiment robot` runs the whole RobOT grid of strategies ×
budgets × seeds and writes its report (CSV, Markdown, JSON and a plot).

Methods: docs/methods/fuzzing-and-retraining.md#retraining, #robustness-reports, #convergence-loop
and #the-robot-experiment.

Each command checks its input before any work starts and writes only when the job has finished
(see `workbench.cli.common`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from workbench.cli.arguments import integer, output_file, output_folder
from workbench.cli.common import (
    ProjectTarget,
    add_common,
    add_distribution,
    add_loading,
    add_model_data,
    check_creatable,
    check_positive,
    command_line,
    emit,
    error,
    load_model_and_data,
    parse_list,
    record_model,
    run_job,
    say,
)
from workbench.cli.robustness_options import (
    add_eps,
    add_grid_options,
    add_report,
    check_checkpoint_and_preset,
    check_pool_dataset,
    check_pool_model,
    load_generated_misbehaviours,
    load_pool,
    parse_budget,
    parse_seeds,
    parse_strategies,
    resolve_eps,
)
from workbench.core.robustness.experiment_report import (
    OPTIMISTIC_LABEL,
    TABLE_METRICS,
    epochs_text,
    experiment_table,
    num,
    pct,
    write_experiment_outputs,
)


def add_parsers(sub) -> None:
    rt = sub.add_parser("retrain", help="select from the training-set pool, fine-tune, and report static AE, "
                                        "adaptive robust and clean accuracy (the RobOT protocol)")
    add_model_data(rt)
    add_grid_options(rt, strategies=None, budgets=None)
    rt.add_argument("--pool", metavar="NAME", help="use this candidate pool of --project instead of attacking the "
                                                   "training set; a generated set gives its misbehaviours")
    rt.add_argument("--out", metavar="MODEL.pt", type=output_file, help="save the retrained model (exactly one run)")
    rt.add_argument("--name", help="name of the run stored with --project")
    add_loading(rt)
    add_common(rt)
    add_distribution(rt)

    cv = sub.add_parser("converge", help="rounds of attack and cumulative fine-tuning until static AE accuracy "
                                         "reaches the requirement; the FOL curve per round")
    add_model_data(cv)
    cv.add_argument("--rounds", type=integer(1, 10_000), default=20, help="at most this many rounds (default 20)")
    cv.add_argument("--requirement", type=float, default=0.8, help="static AE accuracy to reach (default 0.8)")
    cv.add_argument("--epochs", type=integer(1, 10_000), default=5, help="fine-tuning epochs per round (default 5)")
    cv.add_argument("--strategy", metavar="S", help="select from each round's pool with this strategy (needs "
                                                    "--budget; default: every success)")
    cv.add_argument("--budget", metavar="B", help="a count or a percentage of each round's pool")
    cv.add_argument("--pool-inputs", type=integer(1, 10**9), metavar="N",
                    help="attack a seeded sample of N training inputs per round")
    cv.add_argument("--plateau-stop", action="store_true", help="stop when the mean FOL∞ stops changing")
    add_eps(cv)
    add_report(cv)
    cv.add_argument("--name", help="name of the run stored with --project")
    add_loading(cv)
    add_common(cv)
    add_distribution(cv)

    ex = sub.add_parser("experiment", help="a whole protocol: `experiment robot` runs the RobOT grid of "
                                           "strategies × budgets × seeds")
    protocols = ex.add_subparsers(dest="protocol")
    robot = protocols.add_parser("robot", help="RobOT: BE-ST and KM-ST against DeepGini and random selection")
    add_model_data(robot, data_default="fashion-mnist", model_default="lenet5-fashion")
    add_grid_options(robot, strategies="be-st,km-st,deepgini,random", budgets="1%,2%,4%")
    robot.add_argument("--out", metavar="DIR", type=output_folder,
                       help="folder for robot_experiment.csv/.md/.json/.png (default "
                                                    "robot-experiment, or experiments/robot in --project)")
    robot.add_argument("--name", help="name of the run stored with --project")
    add_loading(robot)
    add_common(robot)
    add_distribution(robot)
    rt.set_defaults(handler=cmd_retrain)
    cv.set_defaults(handler=cmd_converge)
    ex.set_defaults(handler=cmd_experiment)


# --- retrain ----------------------------------------------------------------------------------------------


def _row_line(row: dict) -> str:
    return (f"{row['strategy']} {row['budget']} seed {row['seed']}: {row['selected']:,} selected, static AE "
            f"{pct(row.get('static_ae_accuracy'))}, adaptive robust {pct(row['adaptive_robust_accuracy'])}, "
            f"clean {pct(row['clean_accuracy'])}, mean FOL∞ {num(row['fol_mean'])}")


def _results_table(rows: list[dict], baseline: dict) -> list[str]:
    header = ["strategy", "budget", "seed", "selected", "static AE acc", "adaptive robust acc", "clean acc",
              "mean FOL∞", "selected FOL∞"]
    body = [["original", "—", "—", "0", pct(baseline.get("static_ae_accuracy")),
             pct(baseline["adaptive_robust_accuracy"]), pct(baseline["clean_accuracy"]), num(baseline["fol_mean"]),
             "—"]]
    for r in rows:
        body.append([r["strategy"], r["budget"], str(r["seed"]), f"{r['selected']:,}", pct(r.get("static_ae_accuracy")),
                     pct(r["adaptive_robust_accuracy"]), pct(r["clean_accuracy"]), num(r["fol_mean"]),
                     num(r.get("selected_fol_mean"))])
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    fmt = lambda line: "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip()
    return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(line) for line in body]


def _setup_lines(summary: dict, checkpoint_mode: str) -> list[str]:
    pool, fp = summary["pool"], summary["fp_test"]
    mode = "clean (best epoch on the held-out pool part)" if checkpoint_mode == "clean" else \
        f"paper (best epoch on fp_test) — results are {OPTIMISTIC_LABEL}"
    return [f"eps {summary['eps']:g}; pool {pool['candidates']:,} candidates ("
            + ", ".join(f"{a} {n:,}" for a, n in pool["by_attack"].items())
            + f"), {summary['selectable']:,} selectable, {summary['heldout']:,} held out; fp_test {fp['candidates']:,}",
            f"checkpoint: {mode}"]


def cmd_retrain(args) -> int:
    import numpy as np

    from workbench.core.robustness.experiment import (
        ExperimentResult,
        prepare,
        run_strategy,
    )
    from workbench.core.robustness.pool import (
        GENERATED,
        generated_candidates,
        generated_misbehaviours,
        held_out_split,
    )
    from workbench.core.robustness.retraining import get_preset
    from workbench.core.robustness.selection import resolve_budget

    started = time.monotonic()
    strategies = parse_strategies(args.strategy, "--strategy", with_model=True)
    budgets = [parse_budget(b) for b in parse_list(args.budget, "--budget")]
    seeds = parse_seeds(args)
    check_checkpoint_and_preset(args)
    grid = [(s, b, seed) for b in budgets for s in strategies for seed in seeds]
    if args.out and len(grid) != 1:
        raise error(f"--out saves one retrained model, but this command makes {len(grid)} runs.",
                    "Give one strategy, one budget and one seed with --out.")
    if args.pool and args.pool_inputs:
        raise error("--pool-inputs sizes a new pool, but --pool gives a stored one.", "Give one of them.")
    model, dataset = load_model_and_data(args)
    if args.out:
        if not model.info.arch:
            raise error(f"Model {model.name!r} ({model.info.format}) has no known architecture to save it with.",
                        "Use a workbench checkpoint or a bundled model, or pass --arch.")
        check_creatable(Path(args.out).resolve().parent)
    dataset.split("train")
    dataset.split("test")
    target = ProjectTarget(args.project, required=bool(args.pool), what="--pool")
    key = dataset.spec
    pool = generated = None
    if args.pool:
        generated = load_generated_misbehaviours(target.project, args.pool, model, dataset)
        if generated is not None:  # its misbehaviours become the pool, scored when the job starts
            eps, eps_source = resolve_eps(args, dataset)
            source = generated_misbehaviours(generated)[1]
            grouping = (source, np.full(len(source), GENERATED))  # what the held-out split groups by
        else:
            pool = load_pool(target.project, args.pool, generated_too=True)
            check_pool_model(pool, model, args.pool)
            check_pool_dataset(pool, dataset, args.pool)
            eps, eps_source = resolve_eps(args, dataset, pool.params.get("eps"), f"Pool {args.pool!r}")
            if len(pool) == 0:
                raise error(f"Pool {args.pool!r} is empty.", "Make a pool with candidates first.")
            grouping = (pool.source_index, pool.attack)
        size = len(grouping[0])
        selectable = len(held_out_split(*grouping, 0.1, seeds[0])[0]) if args.checkpoint == "clean" else size
        for b in budgets:
            if resolve_budget(b, selectable) > selectable:
                raise error(f"The budget {b} is larger than the {selectable:,} selectable candidates of pool "
                            f"{args.pool!r}.", "Lower the budget or make a larger pool.")
    else:
        eps, eps_source = resolve_eps(args, dataset)
    epochs = args.epochs or get_preset(args.preset).epochs
    holder: dict = {}
    name = args.name or f"retrain-{model.name}-{'+'.join(strategies)}-{'+'.join(str(b) for b in budgets)}"

    def job(ctx):
        first = int(generated is not None)  # a stage for scoring the generated set's misbehaviours
        stages = first + len(grid) + 1
        candidates = pool
        if generated is not None:
            candidates = generated_candidates(ctx.stage(0, stages, "scoring the generated set"), model, generated,
                                              eps, what=f"generated set {args.pool!r}")
        setup = prepare(ctx.stage(first, stages, "setup"), model, dataset, eps, seed=seeds[0],
                        checkpoint_mode=args.checkpoint, pool=candidates, pool_inputs=args.pool_inputs,
                        report_subset=args.report_inputs)
        rows, tuned = [], None
        for k, (strategy, budget, seed) in enumerate(grid):
            row, tuned = run_strategy(ctx.stage(first + k + 1, stages, f"run {k + 1}/{len(grid)}"), setup, strategy,
                                      budget, seed, preset=args.preset, epochs=args.epochs)
            rows.append(row)
            if not args.json:
                say(holder, _row_line(row), sys.stderr)
        params = {"strategies": strategies, "budgets": [str(b) for b in budgets], "seeds": seeds,
                  "preset": args.preset, "epochs": epochs, "checkpoint_mode": args.checkpoint,
                  "report_subset": args.report_inputs, "eps": eps}
        return ExperimentResult(rows, setup.summary(), params), tuned

    (result, tuned), device = run_job(args, job, holder=holder)
    out = None
    if args.out:
        out = _save_retrained(args, tuned, model, dataset, result.rows[0], result.params)
    artifact = None
    if target:
        project = target.open(key)
        params = {**result.params, "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key,
                  "pool": args.pool, "pool_inputs": args.pool_inputs, "eps_source": eps_source,
                  "setup": result.setup}
        _save_run(project, name, "experiment", result.rows, params, command=command_line(args))
        artifact = name
        record_model(project, args)
        if out:
            project.add_model(out)
    baseline = result.setup["baseline"]
    payload = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "eps": eps,
        "eps_source": eps_source, "preset": args.preset, "epochs": epochs, "checkpoint_mode": args.checkpoint,
        "optimistic": args.checkpoint == "paper", "label": OPTIMISTIC_LABEL if args.checkpoint == "paper" else None,
        "pool": args.pool, "setup": result.setup, "baseline": baseline, "rows": result.rows, "out": out,
        "artifact": artifact, "device": device, "seconds": round(time.monotonic() - started, 3),
    }
    lines = [f"{model.name} on {key}: {len(grid)} retraining run(s), preset {args.preset}, {epochs_text(epochs)}"]
    lines += _setup_lines(result.setup, args.checkpoint)
    lines += _results_table(result.rows, baseline)
    if args.checkpoint == "paper":
        lines.append(f"All retrained results are {OPTIMISTIC_LABEL}.")
    if out:
        lines.append(f"Retrained model saved to {out}.")
    if artifact:
        lines.append(f"Stored as run {artifact!r} in {target.folder}.")
    lines.append(f"Took {payload['seconds']:.1f} s on {device}.")
    emit(args, payload, "\n".join(lines))
    return 0


def _save_run(project, name, what, rows, params, **how):
    from workbench.core.robustness.runs import save_run

    return save_run(project, name, what, rows, params, **how)


def _save_retrained(args, tuned, model, dataset, row: dict, params: dict) -> str:
    """The retrained model as a workbench checkpoint with its card (and the card as a sidecar JSON)."""
    from workbench.core.models.model_io import save_checkpoint, weights_digest
    from workbench.core.project.store import write_json

    out = Path(args.out)
    base = model.info.card or {}
    card = {
        "name": out.stem, "title": f"{model.name} fine-tuned with {row['strategy']} {row['budget']} (RobOT)",
        "arch": model.info.arch, "dataset": dataset.spec, "fine_tuned_from": model.name,
        "fine_tuned_from_fingerprint": model.fingerprint(), "strategy": row["strategy"], "budget": row["budget"],
        "selected": row["selected"], "seed": row["seed"], "preset": params["preset"], "epochs": params["epochs"],
        "best_epoch": row["best_epoch"], "checkpoint_mode": row["checkpoint_mode"], "optimistic": row["optimistic"],
        "eps": params["eps"], "test_accuracy": row["clean_accuracy"],
        "static_ae_accuracy": row.get("static_ae_accuracy"),
        "adaptive_robust_accuracy": row["adaptive_robust_accuracy"], "fol_mean": row["fol_mean"],
        "input_shape": list(dataset.image_shape), "class_names": list(model.info.class_names or dataset.class_names),
        "command": command_line(args), "source": "fine-tuned by this project's own `workbench retrain`",
        "weights_sha256": weights_digest(tuned.module.state_dict()),
    }
    if base.get("licence"):
        card["licence"] = base["licence"]
    save_checkpoint(out, tuned.module, model.info.arch, card)
    write_json(out.with_suffix(".json"), card, backup=False)
    return str(out)


# --- converge ---------------------------------------------------------------------------------------------


def _round_line(row: dict) -> str:
    extra = f", pool {row['pool_size']:,}, selected {row['selected']:,}" if "pool_size" in row else ""
    return (f"round {row['round']}: static AE {pct(row.get('static_ae_accuracy'))}, adaptive robust "
            f"{pct(row['adaptive_robust_accuracy'])}, clean {pct(row['clean_accuracy'])}, mean FOL∞ "
            f"{num(row['fol_mean'])}{extra} ({row['seconds']:.1f} s)")


def cmd_converge(args) -> int:
    from workbench.core.robustness.convergence import convergence_loop
    from workbench.core.robustness.pool import build_pool

    started = time.monotonic()
    if args.rounds < 1:
        raise error(f"--rounds must be at least 1; got {args.rounds}.", "Run one round or more.")
    if not 0.0 <= args.requirement <= 1.0:
        raise error(f"--requirement {args.requirement} is not an accuracy in [0, 1].", "Use e.g. 0.8.")
    check_positive("--epochs", args.epochs, allow_none=False)
    check_positive("--pool-inputs", args.pool_inputs)
    check_positive("--report-inputs", args.report_inputs, allow_none=False)
    if (args.strategy is None) != (args.budget is None):
        raise error("--strategy and --budget go together.", "Give both, or neither to use every success.")
    strategy = parse_strategies(args.strategy, "--strategy")[0] if args.strategy else None
    budget = parse_budget(args.budget) if args.budget else None
    model, dataset = load_model_and_data(args)
    dataset.split("train")
    test = dataset.split("test")
    eps, eps_source = resolve_eps(args, dataset)
    target = ProjectTarget(args.project)
    key = dataset.spec
    name = args.name or f"converge-{model.name}"
    holder: dict = {}

    def show(row):
        if "round" in row and not args.json:
            say(holder, _round_line(row))

    def job(ctx):
        fp_test = build_pool(ctx, model, test, eps, seed=args.seed + 100, what="the test set")
        return fp_test, convergence_loop(ctx, model, dataset, eps, fp_test, rounds=args.rounds,
                                         requirement=args.requirement, epochs=args.epochs, strategy=strategy,
                                         budget=budget, seed=args.seed, plateau_stop=args.plateau_stop,
                                         pool_inputs=args.pool_inputs, report_subset=args.report_inputs)

    (fp_test, result), device = run_job(args, job, show, holder)
    artifact = None
    if target:
        project = target.open(key)
        params = {**result.params, "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key,
                  "eps_source": eps_source, "met": result.met, "stop_reason": result.stop_reason,
                  "fp_test": fp_test.summary()}
        _save_run(project, name, "convergence", result.rounds, params, command=command_line(args))
        artifact = name
        record_model(project, args)
    payload = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "eps": eps,
        "eps_source": eps_source, "requirement": args.requirement, "met": result.met,
        "stop_reason": result.stop_reason, "rounds": result.rounds, "fp_test": fp_test.summary(),
        "params": result.params, "artifact": artifact, "device": device,
        "seconds": round(time.monotonic() - started, 3),
    }
    last = result.rounds[-1]
    lines = [(f"stopped after round {last['round']}: {result.stop_reason}; requirement static AE accuracy > "
              f"{pct(args.requirement)} {'met' if result.met else 'NOT met'} "
              f"(final {pct(last.get('static_ae_accuracy'))}); eps {eps:g} ({eps_source}), fp_test "
              f"{len(fp_test):,} adversarials")]
    if artifact:
        lines.append(f"Stored as run {artifact!r} in {target.folder}.")
    lines.append(f"Took {payload['seconds']:.1f} s on {device}.")
    emit(args, payload, "\n".join(lines))
    return 0


# --- experiment robot -------------------------------------------------------------------------------------


def cmd_experiment(args) -> int:
    if args.protocol != "robot":
        raise error("Name the protocol to run.", "Use `workbench experiment robot`.")
    return cmd_experiment_robot(args)


def cmd_experiment_robot(args) -> int:
    from workbench.core.robustness.experiment import robot_experiment
    from workbench.core.robustness.retraining import get_preset

    started = time.monotonic()
    strategies = parse_strategies(args.strategies, "--strategies", with_model=True)
    budgets = [parse_budget(b) for b in parse_list(args.budgets, "--budgets")]
    seeds = parse_seeds(args) if args.seeds or args.seed else [0, 1, 2]
    check_checkpoint_and_preset(args)
    model, dataset = load_model_and_data(args)
    dataset.split("train")
    dataset.split("test")
    eps, eps_source = resolve_eps(args, dataset)
    target = ProjectTarget(args.project)
    key = dataset.spec
    out_dir = Path(args.out) if args.out else (target.folder / "experiments" / "robot" if target
                                               else Path("robot-experiment"))
    check_creatable(out_dir)
    epochs = args.epochs or get_preset(args.preset).epochs
    name = args.name or f"robot-{model.name}"
    holder: dict = {}

    def show(row):
        if not args.json and "strategy" in row:
            say(holder, _row_line(row), sys.stderr)

    result, device = run_job(args, lambda ctx: robot_experiment(
        ctx, model, dataset, eps, strategies=strategies, budgets=budgets, seeds=seeds, preset=args.preset,
        epochs=args.epochs, checkpoint_mode=args.checkpoint, pool_inputs=args.pool_inputs,
        report_subset=args.report_inputs), show, holder)
    result.params.update({"model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key,
                          "eps_source": eps_source, "epochs": epochs, "pool_inputs": args.pool_inputs,
                          "pool_attacked": (f"a seeded sample of {args.pool_inputs:,} training inputs"
                                            if args.pool_inputs and args.pool_inputs < len(dataset.split("train"))
                                            else f"all {len(dataset.split('train')):,} training inputs"),
                          "command": command_line(args)})
    # The plot is drawn headless (matplotlib's Agg); should it fail, the report is written without the PNG.
    from workbench.core.robustness.experiment_plot import save_experiment_plot

    warnings: list[str] = []
    files = write_experiment_outputs(result, out_dir, plot=save_experiment_plot, on_warning=warnings.append)
    artifact = None
    if target:
        project = target.open(key)
        _save_run(project, name, "experiment", result.rows, {**result.params, "setup": result.setup},
                  command=command_line(args), files=files)
        artifact = name
        record_model(project, args)
    baseline = result.setup["baseline"]
    tables = {m: experiment_table(result, m) for m in TABLE_METRICS}
    payload = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "eps": eps,
        "eps_source": eps_source, "strategies": strategies, "budgets": [str(b) for b in budgets], "seeds": seeds,
        "preset": args.preset, "epochs": epochs, "checkpoint_mode": args.checkpoint,
        "optimistic": args.checkpoint == "paper", "label": OPTIMISTIC_LABEL if args.checkpoint == "paper" else None,
        "setup": result.setup, "baseline": baseline, "rows": result.rows, "tables": tables, "params": result.params,
        "files": files, "warnings": warnings, "artifact": artifact, "device": device,
        "seconds": round(time.monotonic() - started, 3),
    }
    lines = [(f"RobOT experiment: {model.name} on {key}, {len(result.rows)} runs "
              f"({len(strategies)} strategies × {len(budgets)} budgets × {len(seeds)} seeds), preset {args.preset}, "
              f"{epochs_text(epochs)}")]
    lines += _setup_lines(result.setup, args.checkpoint)
    lines.append("original: static AE accuracy " + pct(baseline.get("static_ae_accuracy")) + ", adaptive robust "
                 + pct(baseline["adaptive_robust_accuracy"]) + ", clean " + pct(baseline["clean_accuracy"]))
    budget_names = [str(b) for b in budgets]
    for metric, title in (("static_ae_accuracy", "Static AE accuracy"),
                          ("adaptive_robust_accuracy", "Adaptive robust accuracy")):
        lines.append(f"{title}, mean ± sd over seeds (%)" + (f" — {OPTIMISTIC_LABEL}" if payload["optimistic"] else ""))
        width = max(len(s) for s in strategies) + 2
        lines.append(" " * (width + 2) + "".join(b.rjust(14) for b in budget_names))
        for s in strategies:
            cells = [tables[metric][s].get(b) for b in budget_names]
            lines.append(f"  {s:<{width}}" + "".join(
                ("—" if not c or c["mean"] is None else f"{c['mean'] * 100:.1f} ± {c['sd'] * 100:.1f}").rjust(14)
                for c in cells))
    lines.append("Written: " + ", ".join(files.values()))
    lines += [f"warning: {w}" for w in warnings]
    if artifact:
        lines.append(f"Stored as run {artifact!r} in {target.folder}.")
    lines.append(f"Took {payload['seconds']:.1f} s on {device}.")
    emit(args, payload, "\n".join(lines))
    return 0
