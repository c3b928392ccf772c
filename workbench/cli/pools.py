"""The pool sub-commands: `attack` builds a candidate pool of FGSM/PGD adversarials, `fol` scores
inputs with both FOL kinds, `select` picks tests from a stored pool, and `fuzz` runs RobOT's
FOL-guided fuzzer (optionally joining its tests to a pool).

Methods: docs/methods/fol-and-selection.md (scores, attacks, #candidate-pool, #selection-strategies)
and docs/methods/fuzzing-and-retraining.md#the-fuzzer.

Each command checks its input before any work starts and writes to the project only when the job
has finished (see `workbench.cli.common`).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from workbench.cli.arguments import integer, output_file, real
from workbench.cli.common import (
    ProjectTarget,
    add_common,
    add_distribution,
    add_loading,
    add_model_data,
    add_subset_options,
    check_creatable,
    check_positive,
    command_line,
    emit,
    error,
    load_model_and_data,
    notify,
    parse_list,
    record_model,
    run_job,
    stats,
    stats_line,
    with_subset,
)
from workbench.cli.robustness_options import (
    FOL_LABEL,
    FOL_STRATEGIES,
    GRAD_L2_LABEL,
    add_eps,
    check_loss_mode,
    check_pool_dataset,
    check_pool_model,
    load_pool,
    parse_budget,
    parse_strategies,
    resolve_eps,
    save_pool,
)
from workbench.core.robustness.experiment_report import pct
from workbench.core.sampling import seeded_sample


def add_parsers(sub) -> None:
    att = sub.add_parser("attack", help="FGSM/PGD candidate pool of a split: successes per attack, FOL∞ and "
                                        "grad-L2 of every successful adversarial")
    add_model_data(att)
    att.add_argument("--split", default="train", help="split to attack (default train)")
    add_eps(att)
    att.add_argument("--attacks", default="fgsm,pgd", metavar="LIST", help="comma-separated: fgsm, pgd (default both)")
    att.add_argument("--max-inputs", type=integer(1, 10**9), metavar="N",
                     help="attack a seeded sample of N inputs of the split")
    att.add_argument("--loss-mode", default="logits", help="logits (default) or keras_compat")
    att.add_argument("--batch-size", type=integer(1, 65536), default=256)
    att.add_argument("--name", help="name of the pool stored with --project "
                                    "(default pool-<model>-<split>-eps<E>)")
    add_loading(att)
    add_common(att)
    add_distribution(att)

    fol = sub.add_parser("fol", help="first-order loss per input: FOL∞ and grad-L2 (RobOT fuzzer FOL), with "
                                     "quantiles and an optional per-input CSV")
    add_model_data(fol)
    fol.add_argument("--testset", metavar="NAME", help="a project test set (a stored pool uses its own clean "
                                                       "inputs), a split of --data, or a dataset name or path")
    fol.add_argument("--split", help="split of --data to score (default test)")
    fol.add_argument("--attack", default="none", help="none (x' = x0, so FOL∞ = ε‖g‖₁), fgsm or pgd (default none)")
    add_eps(fol)
    fol.add_argument("--loss-mode", help="logits or keras_compat (default logits, or a stored pool's)")
    fol.add_argument("--max-inputs", type=integer(1, 10**9), metavar="N", help="score a seeded sample of N inputs")
    fol.add_argument("--batch-size", type=integer(1, 65536), default=256)
    add_subset_options(fol)
    fol.add_argument("--out", metavar="CSV", type=output_file, help="write the per-input values to this CSV file")
    add_loading(fol)
    add_common(fol)

    sel = sub.add_parser("select", help="select tests from a stored candidate pool (BE-ST, KM-ST, DeepGini, "
                                        "random, MCP) and store them as a new test set")
    sel.add_argument("--pool", required=True, metavar="NAME", help="candidate pool stored in --project")
    sel.add_argument("--strategy", required=True, metavar="S", help="be-st, km-st, deepgini, random, mcp or "
                                                                     "kmst-legacy")
    sel.add_argument("--budget", required=True, metavar="B", help="a count, or a percentage of the pool like 5%%")
    sel.add_argument("--fol-kind", metavar="KIND", help="FOL the FOL strategies rank by: fol_linf (default), "
                                                        "grad_l2 or fosc_l2")
    sel.add_argument("--k", type=integer(1, 10**9), metavar="K", help="sections of KM-ST (default 4)")
    sel.add_argument("--compat", action="store_true", help="BE-ST as in the RobOT code (n−1 tests for odd n)")
    sel.add_argument("--name", help="name of the new test set (default <pool>-<strategy>-<budget>)")
    add_common(sel)

    fz = sub.add_parser("fuzz", help="RobOT's FOL-guided fuzzer: tests that flip the model's label near seed "
                                     "inputs, with both FOL kinds")
    add_model_data(fz)
    fz.add_argument("--split", default="train", help="split the seeds are drawn from (default train)")
    fz.add_argument("--seeds", type=integer(1, 10**7), default=1000, metavar="N",
                    help="seed inputs drawn (default 1000)")
    fz.add_argument("--time-budget", type=real(0, 7 * 86400, low_open=True), default=300.0, metavar="S",
                    help="wall-clock seconds (default 300)")
    fz.add_argument("--mutations", type=integer(1, 10**6), default=200, metavar="N",
                    help="mutations per seed (default 200)")
    fz.add_argument("--max-tests", type=integer(1, 10**9), metavar="N", help="stop after N tests")
    fz.add_argument("--lr", type=real(0, 10, low_open=True), default=0.1, help="mutation step size (default 0.1)")
    fz.add_argument("--max-dist", type=real(0, 1, low_open=True), default=0.5,
                    help="bound on ‖x − x0‖₂/‖x0‖₂ (default 0.5)")
    fz.add_argument("--project-linf", action="store_true", help="project every mutant onto the ε-ball around its seed")
    add_eps(fz)
    fz.add_argument("--compat", action="store_true", help="the original's recording rule and seed filter")
    fz.add_argument("--loss-mode", default="logits", help="logits (default) or keras_compat")
    fz.add_argument("--batch-size", type=integer(1, 65536), default=256)
    fz.add_argument("--name", help="name of the test set stored with --project (default fuzz-<model>-<split>)")
    fz.add_argument("--join-pool", metavar="NAME", help="also score the tests as candidates and store them merged "
                                                        "with this pool of --project")
    fz.add_argument("--merged-name", metavar="NAME", help="name of the merged pool (default <pool>+<name>)")
    add_loading(fz)
    add_common(fz)
    att.set_defaults(handler=cmd_attack)
    fol.set_defaults(handler=cmd_fol)
    sel.set_defaults(handler=cmd_select)
    fz.set_defaults(handler=cmd_fuzz)


# --- attack -----------------------------------------------------------------------------------------------


def cmd_attack(args) -> int:
    from workbench.core.robustness.attacks import ATTACKS
    from workbench.core.robustness.pool import build_pool

    started = time.monotonic()
    model, dataset = load_model_and_data(args)
    split = dataset.split(args.split)
    eps, eps_source = resolve_eps(args, dataset)
    attacks = [a.lower() for a in parse_list(args.attacks, "--attacks")]
    for name in attacks:
        if name not in ATTACKS:
            raise error(f"Unknown attack {name!r}.", f"Use one of: {', '.join(ATTACKS)}.")
    check_loss_mode(args.loss_mode)
    check_positive("--max-inputs", args.max_inputs)
    check_positive("--batch-size", args.batch_size, allow_none=False)
    target = ProjectTarget(args.project)
    indices = seeded_sample(len(split), args.max_inputs, args.seed)
    key = dataset.spec
    name = args.name or f"pool-{model.name}-{args.split}-eps{eps:g}"

    pool, device = run_job(args, lambda ctx: build_pool(
        ctx, model, split, eps, attacks=tuple(attacks), seed=args.seed, batch_size=args.batch_size, indices=indices,
        loss_mode=args.loss_mode, what=f"{key}:{args.split}"))
    artifact = None
    if target:
        project = target.open(key)
        artifact = save_pool(project, name, pool, model=model.name, model_fingerprint=model.fingerprint(),
                             dataset=key, split=args.split, eps_source=eps_source, command=command_line(args))
        record_model(project, args)
    attempted, succeeded = pool.params["attempted"], pool.params["succeeded"]
    result = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "split": args.split,
        "eps": eps, "eps_source": eps_source, "attacks": attacks, "loss_mode": args.loss_mode, "seed": args.seed,
        "attacked_inputs": pool.params["attacked_inputs"], "split_inputs": len(split),
        "attempted": attempted, "succeeded": succeeded,
        "success_rate": {a: (succeeded[a] / attempted[a] if attempted[a] else None) for a in attacks},
        "candidates": len(pool), "by_attack": pool.attack_counts(),
        "fol_linf": stats(pool.scores["fol_linf"]), "grad_l2": stats(pool.scores["grad_l2"]),
        "grad_l2_label": GRAD_L2_LABEL, "artifact": artifact, "device": device,
        "seconds": round(time.monotonic() - started, 3),
    }
    lines = [(f"{model.name} on {key}:{args.split} ({result['attacked_inputs']:,} of {len(split):,} inputs "
              f"attacked), eps {eps:g} ({eps_source}), loss {args.loss_mode}, seed {args.seed}")]
    width = max(len(a) for a in attacks) + 1
    for a in attacks:
        lines.append(f"  {a + ':':<{width}} {succeeded[a]:,} / {attempted[a]:,} succeeded "
                     f"({pct(result['success_rate'][a])})")
    lines.append(f"Pool: {len(pool):,} candidates ("
                 + ", ".join(f"{a} {n:,}" for a, n in result["by_attack"].items()) + ")")
    lines.append(stats_line(FOL_LABEL, result["fol_linf"]))
    lines.append(stats_line(GRAD_L2_LABEL, result["grad_l2"]))
    if artifact:
        lines.append(f"Stored as test set {artifact!r} in {target.folder}.")
    lines.append(f"Took {result['seconds']:.1f} s on {device}.")
    emit(args, result, "\n".join(lines))
    return 0


# --- fol --------------------------------------------------------------------------------------------------


def _fol_source(args, dataset, project):
    """What `fol` scores: {"kind": "split"|"pool"|"testset", "name", "split" (a test set), "x_adv" (pre-made
    inputs, for a stored pool), "x0", "eps", "loss_mode"}. A stored pool or fuzzer test set with a
    source index scores its own inputs against their clean inputs of the split it came from."""
    from workbench.core.labeling.labelled_sets import resolve

    if args.testset and args.split:
        raise error("--testset and --split both name what to score.", "Give one of them.")
    key = dataset.spec
    if not args.testset:
        name = args.split or "test"
        if with_subset(args, name) == name:
            return {"kind": "split", "name": f"{key}:{name}", "split": dataset.split(name)}
        test = resolve(project, with_subset(args, name), dataset, download=args.download)
        return {"kind": "testset", "name": test.name, "split": test}
    test = resolve(project, with_subset(args, args.testset), dataset, download=args.download)
    how = project.artifacts()[test.source.artifact]["provenance"] if test.source.kind == "stored" else {}
    if "source_index" in test.columns and how.get("split"):
        if how.get("dataset") and how["dataset"] != key:
            raise error(f"Test set {args.testset!r} was made from dataset {how['dataset']!r}, not {key!r}.",
                        f"Pass --data {how['dataset']}.")
        origin = dataset.split(how["split"])
        source = np.asarray(test.columns["source_index"], dtype=np.int64)
        if len(source) and (source.min() < 0 or source.max() >= len(origin)):
            raise error(f"Test set {args.testset!r} has source indices that do not fit {key}:{how['split']}.",
                        "It was made from other data; recompute it.")
        return {"kind": "pool", "name": args.testset, "split": test, "source_index": source,
                "origin": origin, "eps": how.get("eps"), "loss_mode": how.get("loss_mode"),
                "origin_name": f"{key}:{how['split']}"}
    return {"kind": "split" if test.kind == "split" else "testset", "name": test.name, "split": test}


def cmd_fol(args) -> int:
    from workbench.core.robustness.attacks import ATTACKS, attack_split
    from workbench.core.robustness.scores import score_inputs

    started = time.monotonic()
    model, dataset = load_model_and_data(args)
    target = ProjectTarget(args.project, write=False)  # read for its test sets; fol stores nothing there
    source = _fol_source(args, dataset, target.project)
    notes = notify(source["split"])
    attack = args.attack.lower()
    if attack not in ("none", *ATTACKS):
        raise error(f"Unknown attack {args.attack!r}.", "Use none, fgsm or pgd.")
    if source["kind"] == "pool":
        if attack != "none":
            raise error(f"Test set {source['name']!r} already holds perturbed inputs with their clean sources.",
                        "Score it as it is with --attack none.")
        stored_eps = source["eps"]
        if stored_eps is None:
            raise error(f"Test set {source['name']!r} does not record the eps that made it.", "Recompute it.")
        eps, eps_source = resolve_eps(args, dataset, stored_eps, f"Test set {source['name']!r}")
        loss_mode = check_loss_mode(args.loss_mode or source["loss_mode"] or "logits")
    else:
        eps, eps_source = resolve_eps(args, dataset)
        loss_mode = check_loss_mode(args.loss_mode or "logits")
    check_positive("--max-inputs", args.max_inputs)
    check_positive("--batch-size", args.batch_size, allow_none=False)
    split = source["split"]
    if len(split) == 0:
        raise error(f"Test set {source['name']!r} is empty.", "Choose a test set with inputs.")
    if args.out:
        check_creatable(Path(args.out).resolve().parent)
    rows = seeded_sample(len(split), args.max_inputs, args.seed)
    rows = np.arange(len(split)) if rows is None else rows

    def job(ctx):
        if source["kind"] == "pool":
            x_adv, labels = split.numpy(rows), split.labels[rows]
            x0 = source["origin"].numpy(source["source_index"][rows])
            attacked = None
        elif attack == "none":
            x_adv = x0 = split.numpy(rows)
            labels, attacked = split.labels[rows], None
        else:
            attacked = attack_split(ctx.stage(0, 2, attack), model, split, eps, attacks=(attack,), seed=args.seed,
                                    batch_size=args.batch_size, indices=rows, loss_mode=loss_mode,
                                    successful_only=False)
            x_adv, labels, x0 = attacked.images, attacked.labels, split.numpy(attacked.source_index)
        scored = score_inputs(ctx.stage(1, 2, "FOL") if attacked else ctx, model, x_adv, labels, x0=x0, eps=eps,
                              loss_mode=loss_mode, batch_size=args.batch_size)
        return scored, labels, attacked

    (scored, labels, attacked), device = run_job(args, job)
    predicted = scored["probs_matrix"].argmax(1)
    fol, grad = scored["fol_linf"], scored["grad_l2"]
    written = None
    if args.out:
        written = _write_fol_csv(args.out, rows, source, labels, predicted, fol, grad, scored["deepgini"])
    result = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": dataset.spec,
        "testset": source["name"], "kind": source["kind"], "inputs": len(labels),
        "testset_inputs": len(split), "attack": attack, "eps": eps, "eps_source": eps_source,
        "loss_mode": loss_mode, "seed": args.seed,
        "accuracy": float((predicted == labels).mean()),
        "attack_success_rate": None if attacked is None else float((predicted != labels).mean()),
        "fol_linf": stats(fol), "fol_linf_negative": int((fol < 0).sum()),
        "grad_l2": stats(grad), "grad_l2_label": GRAD_L2_LABEL,
        "clean_source": source.get("origin_name"), "csv": written, "notes": notes, "device": device,
        "seconds": round(time.monotonic() - started, 3),
    }
    what = {"none": "clean inputs (x' = x0, FOL∞ = ε‖g‖₁)", "fgsm": "FGSM adversarials", "pgd": "PGD adversarials"}
    lines = [f"{model.name} on {source['name']} ({result['inputs']:,} of {len(split):,} inputs), "
             + (f"stored inputs scored against their clean sources in {result['clean_source']}"
                if source["kind"] == "pool" else what[attack])
             + f"; eps {eps:g} ({eps_source}), loss {loss_mode}",
             f"accuracy on the scored inputs: {pct(result['accuracy'])}",
             stats_line(FOL_LABEL, result["fol_linf"]), stats_line(GRAD_L2_LABEL, result["grad_l2"])]
    if result["fol_linf_negative"]:
        lines.append(f"  {result['fol_linf_negative']:,} inputs have FOL∞ < 0: they lie outside the ε-ball of "
                     "their clean input")
    if written:
        lines.append(f"Per-input values written to {written}.")
    lines.append(f"Took {result['seconds']:.1f} s on {device}.")
    emit(args, result, "\n".join(lines))
    return 0


def _write_fol_csv(path, rows, source, labels, predicted, fol, grad, gini) -> str:
    import csv

    from workbench.core.project.store import atomic_path

    path = Path(path)
    origin = source.get("source_index")
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "source_index", "label", "prediction", "fol_linf", GRAD_L2_LABEL, "deepgini"])
        for k, i in enumerate(rows):
            w.writerow([int(i), int(origin[i]) if origin is not None else int(i), int(labels[k]),
                        int(predicted[k]), repr(float(fol[k])), repr(float(grad[k])), repr(float(gini[k]))])
    return str(path)


# --- select -----------------------------------------------------------------------------------------------


def cmd_select(args) -> int:
    from workbench.core.robustness.experiment import selection_scores
    from workbench.core.robustness.selection import FOL_KINDS, select

    started = time.monotonic()
    target = ProjectTarget(args.project, required=True, what="Selection from a stored pool")
    project = target.project
    strategy = parse_strategies(args.strategy, "--strategy")
    if len(strategy) != 1:
        raise error("select takes one strategy.", "Run it once per strategy.")
    strategy = strategy[0]
    budget = parse_budget(args.budget)
    options = {}
    if args.fol_kind is not None:
        if strategy not in FOL_STRATEGIES:
            raise error(f"--fol-kind applies to the FOL strategies ({', '.join(FOL_STRATEGIES)}), not to {strategy}.",
                        "Leave --fol-kind out.")
        if args.fol_kind not in FOL_KINDS:
            raise error(f"Unknown FOL kind {args.fol_kind!r}.", f"Use one of: {', '.join(FOL_KINDS)}.")
        options["fol_kind"] = args.fol_kind
    if args.k is not None:
        if strategy != "km-st":
            raise error("--k is the section count of km-st.", "Leave --k out, or use --strategy km-st.")
        check_positive("--k", args.k)
        options["k"] = args.k
    if args.compat:
        if strategy != "be-st":
            raise error("--compat applies to be-st.", "Leave --compat out, or use --strategy be-st.")
        options["compat"] = True
    pool = load_pool(project, args.pool)
    if len(pool) == 0:
        raise error(f"Pool {args.pool!r} is empty.", "Make a pool with candidates first (workbench attack).")
    chosen = select(strategy, selection_scores(pool), budget, seed=args.seed, **options)
    indices = np.asarray(chosen.indices, dtype=np.int64)
    picked = pool.subset(indices)
    kind = chosen.params.get("fol_kind") or "fol_linf"
    name = args.name or f"{args.pool}-{strategy}-{args.budget}"
    if name == args.pool:
        raise error(f"--name {name!r} would replace the pool it selects from.", "Choose another name.")
    save_pool(project, name, picked, selection=chosen.params, selected_from=args.pool,
              what=f"{strategy} selection of {args.budget} from {args.pool}", command=command_line(args))
    values = picked.scores.get(kind)
    result = {
        "pool": args.pool, "pool_size": len(pool), "strategy": strategy, "budget": args.budget,
        "selected": len(indices), "excluded_nan": chosen.excluded_nan, "seed": args.seed,
        "fol_kind": chosen.params.get("fol_kind"), "range_kind": kind,
        "range": stats(values) if values is not None else None,
        "fol_linf": stats(picked.scores["fol_linf"]) if "fol_linf" in picked.scores else None,
        "by_attack": picked.attack_counts(), "indices": indices.tolist(), "params": chosen.params,
        "artifact": name, "seconds": round(time.monotonic() - started, 3),
    }
    label = GRAD_L2_LABEL if kind == "grad_l2" else {"fol_linf": FOL_LABEL, "fosc_l2": "FOSC-L2"}[kind]
    r = result["range"]
    lines = [(f"{strategy}: selected {len(indices):,} of {len(pool):,} candidates in pool {args.pool!r} "
              f"(budget {args.budget}, seed {args.seed})"),
             (f"{label} of the selection: {r['min']:.4g} – {r['max']:.4g} (mean {r['mean']:.4g})"
              if r and r["n"] else f"{label}: no finite values"),
             "first indices: " + ", ".join(str(i) for i in indices[:20]) + (" …" if len(indices) > 20 else "")]
    if chosen.excluded_nan:
        lines.append(f"{chosen.excluded_nan:,} candidates with NaN scores were left out.")
    lines.append(f"Stored as test set {name!r} in {target.folder}.")
    emit(args, result, "\n".join(lines))
    return 0


# --- fuzz -------------------------------------------------------------------------------------------------


def cmd_fuzz(args) -> int:
    from workbench.core.project.staging import StagedProject
    from workbench.core.robustness.fuzzing import fuzz
    from workbench.core.robustness.pool import STORE_KEYS, fuzzer_candidates, merge_pools
    from workbench.core.testsets import save_testset

    started = time.monotonic()
    model, dataset = load_model_and_data(args)
    split = dataset.split(args.split)
    key = dataset.spec
    check_loss_mode(args.loss_mode)
    for option, value in (("--seeds", args.seeds), ("--time-budget", args.time_budget), ("--mutations", args.mutations),
                          ("--max-tests", args.max_tests), ("--lr", args.lr), ("--max-dist", args.max_dist),
                          ("--batch-size", args.batch_size)):
        check_positive(option, value)
    target = ProjectTarget(args.project, required=bool(args.join_pool), what="--join-pool")
    joined = None
    if args.join_pool:
        joined = load_pool(target.project, args.join_pool)
        check_pool_model(joined, model, args.join_pool)
        check_pool_dataset(joined, dataset, args.join_pool)
        if joined.params.get("split") and joined.params["split"] != args.split:
            raise error(f"Pool {args.join_pool!r} holds candidates of the {joined.params['split']} split; the "
                        f"fuzzer seeds come from {args.split}.", f"Pass --split {joined.params['split']}.")
        if "fol_linf" not in joined.scores or joined.params.get("eps") is None:
            raise error(f"Pool {args.join_pool!r} holds no FOL∞ scores to join.", "Join a pool made by workbench attack.")
        eps, eps_source = resolve_eps(args, dataset, joined.params["eps"], f"Pool {args.join_pool!r}")
        pool_mode = joined.params.get("loss_mode", "logits")
        if pool_mode != args.loss_mode:
            raise error(f"Pool {args.join_pool!r} was scored with loss mode {pool_mode}, the fuzzer uses "
                        f"{args.loss_mode}: their FOL values are not comparable.", f"Pass --loss-mode {pool_mode}.")
    else:
        eps, eps_source = resolve_eps(args, dataset)
    name = args.name or f"fuzz-{model.name}-{args.split}"
    merged_name = args.merged_name or (f"{args.join_pool}+{name}" if args.join_pool else None)
    if args.merged_name and not args.join_pool:
        raise error("--merged-name names the pool --join-pool makes.", "Add --join-pool NAME, or leave it out.")
    if args.join_pool and (merged_name == name or merged_name == args.join_pool):
        raise error("The merged pool needs a name of its own.", "Pass --merged-name.")

    def job(ctx):
        tests = fuzz(ctx.stage(0, 2, "fuzzing") if joined else ctx, model, split, eps=eps, n_seeds=args.seeds,
                     seed=args.seed, lr=args.lr, max_dist=args.max_dist, mutations_per_seed=args.mutations,
                     time_budget_s=args.time_budget, max_tests=args.max_tests, project_linf=args.project_linf,
                     compat=args.compat, batch_size=args.batch_size, loss_mode=args.loss_mode)
        merged = None
        if joined is not None and len(tests):
            candidates = fuzzer_candidates(ctx.stage(1, 2, "scoring the tests"), model, tests,
                                           split.numpy(tests.seed_index), eps, args.loss_mode, args.batch_size,
                                           what=f"fuzzer tests {name}")
            merged = merge_pools(joined, candidates)
        return tests, merged

    (tests, merged), device = run_job(args, job)
    p = tests.params
    warnings = []
    outside = int(len(tests) - np.sum(tests.inside_ball))
    if merged is not None and outside:
        warnings.append(f"{outside:,} of the {len(tests):,} joined tests lie outside the ε-ball of their seed, where "
                        "FOL∞ can be negative and ranks them as the strongest; fuzz with --project-linf to keep them "
                        "inside, or select with --fol-kind grad_l2")
    artifact = merged_artifact = None
    if target and len(tests):
        project = target.open(key)
        how = {"model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "split": args.split,
               "eps_source": eps_source, "command": command_line(args)}
        with StagedProject(project) as staged:  # the tests and the merged pool are committed together
            save_testset(staged, name, tests.to_arrays(), role="fuzz-tests",
                         **{k: v for k, v in p.items() if k not in how and k not in STORE_KEYS}, **how)
            artifact = name
            if merged is not None:
                merged_artifact = save_pool(staged, merged_name, merged, merged_from=[args.join_pool, name],
                                            **{k: v for k, v in how.items() if k != "eps_source"})
        record_model(project, args)
    result = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": key, "split": args.split,
        "eps": eps, "eps_source": eps_source, "tests": len(tests), "seeds_drawn": p["seeds_drawn"],
        "seeds_used": p["seeds_used"], "dropped_static": p["dropped_static"],
        "dropped_misclassified": p["dropped_misclassified"], "stop_reason": p["stop_reason"],
        "mutations_total": p["mutations_total"], "elapsed_s": p["elapsed_s"],
        "inside_ball": int(np.sum(tests.inside_ball)), "grad_l2": stats(tests.grad_l2), "grad_l2_label": GRAD_L2_LABEL,
        "fol_linf": stats(tests.fol_linf), "params": p, "artifact": artifact,
        "joined_pool": args.join_pool, "merged_pool": merged_artifact,
        "merged_candidates": None if merged is None else len(merged),
        "merged_by_attack": None if merged is None else merged.attack_counts(), "warnings": warnings,
        "device": device, "seconds": round(time.monotonic() - started, 3),
    }
    projection = "projected onto the ε-ball" if args.project_linf else "no L∞ projection"
    lines = [(f"{model.name} fuzzed from {key}:{args.split}: {len(tests):,} tests generated "
              f"(stopped: {p['stop_reason']}, {p['elapsed_s']:.1f} s, {p['mutations_total']:,} mutations)"),
             (f"seeds: {p['seeds_used']:,} used of {p['seeds_drawn']:,} drawn ({p['dropped_static']:,} dropped for "
              f"a vanishing gradient, {p['dropped_misclassified']:,} misclassified)"),
             (f"eps {eps:g} ({eps_source}), {projection}; {result['inside_ball']:,} of {len(tests):,} tests inside "
              "the ε-ball")]
    if len(tests):
        lines += [stats_line(GRAD_L2_LABEL, result["grad_l2"]), stats_line(FOL_LABEL, result["fol_linf"])]
    if artifact:
        lines.append(f"Stored as test set {artifact!r} in {target.folder}.")
    if merged_artifact:
        lines.append(f"Merged with pool {args.join_pool!r} into {merged_artifact!r}: {len(merged):,} candidates ("
                     + ", ".join(f"{a} {n:,}" for a, n in merged.attack_counts().items()) + ").")
    elif target and not len(tests):
        lines.append("No tests were generated; nothing was stored.")
    lines += [f"warning: {w}" for w in warnings]
    lines.append(f"Took {result['seconds']:.1f} s on {device}.")
    emit(args, result, "\n".join(lines))
    return 0
