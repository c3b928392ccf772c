"""`workbench compare` and `workbench combine`: test sets side by side, and set algebra on them.

`compare` runs the core comparison (`core/comparison/compare.py`): every figure of every set with a
bootstrap interval, every pairwise difference marked supported or not, what each set adds, and a
report as self-contained HTML, CSV or JSON. `combine` stores the union, intersection or difference
of sets, or the inputs of one set that add new items, as a new test set with its recipe.
"""

from __future__ import annotations

import sys
from pathlib import Path

from workbench.cli.arguments import integer, real, text
from workbench.cli.common import add_common, add_loading, emit, error, load_model_and_data, parse_list, run_job


def add_parsers(sub) -> None:
    compare = sub.add_parser("compare", help="compare test sets: coverage, accuracy, FOL, novelty and validity with "
                                             "bootstrap intervals, what each set adds, and a report")
    compare.add_argument("--testsets", required=True, metavar="A,B[,…]", type=text("test sets"),
                         help="two or more test sets: splits, stored sets, generated sets, subsets (NAME[rule])")
    compare.add_argument("--model", required=True, metavar="MODEL", type=text("model"),
                         help="bundled model name or a path")
    compare.add_argument("--data", metavar="NAME", type=text("dataset"),
                         help="the dataset the criteria are fitted on (default: the project's first)")
    compare.add_argument("--layer", metavar="LAYER", help="IDC's layer (default: the last Conv/Linear before the "
                                                          "output layer)")
    compare.add_argument("--m", type=integer(1, 20), default=6, help="IDC's important neurons (default 6)")
    compare.add_argument("--criteria", default="idc,nc,kmnc,nbc,snac,tknc", metavar="LIST",
                         help="criteria to compare by (default idc,nc,kmnc,nbc,snac,tknc)")
    compare.add_argument("--resamples", type=integer(10, 100_000), default=1000,
                         help="bootstrap and size-matched resamples (default 1000)")
    compare.add_argument("--eps", type=real(0, 10, low_open=True), default=0.1,
                         help="FOL∞'s ε (default 0.1)")
    compare.add_argument("--novelty-sample", type=integer(1, 10**7), default=10_000,
                         help="training inputs the novelty distance is measured to (a seeded sample; default 10000)")
    compare.add_argument("--report", metavar="FILE.html", type=text("report"), help="write the HTML report")
    compare.add_argument("--csv", metavar="FILE.csv", type=text("CSV file"), help="write the figures as CSV")
    compare.add_argument("--out-json", metavar="FILE.json", type=text("JSON file"), help="write everything as JSON")
    add_loading(compare)
    add_common(compare)
    compare.set_defaults(handler=cmd_compare)

    combine = sub.add_parser("combine", help="store the union, intersection or difference of test sets, or the "
                                             "inputs of a set that add new coverage items, as a new test set")
    combine.add_argument("operation", choices=["union", "intersection", "difference", "adds-new"],
                         help="union, intersection, difference (of the first set minus the others), or adds-new")
    combine.add_argument("--testsets", required=True, metavar="A,B[,…]", type=text("test sets"),
                         help="the operands, in order (adds-new: the set first, then those it is compared with)")
    combine.add_argument("--name", required=True, metavar="NAME", type=text("name"), help="the new test set's name")
    combine.add_argument("--model", metavar="MODEL", type=text("model"), help="adds-new: the model")
    combine.add_argument("--data", metavar="NAME", type=text("dataset"), help="adds-new: the dataset")
    combine.add_argument("--criterion", default="idc", help="adds-new: the criterion whose items count (default idc)")
    combine.add_argument("--layer", metavar="LAYER", help="adds-new: IDC's layer")
    combine.add_argument("--m", type=integer(1, 20), default=6, help="adds-new: IDC's m (default 6)")
    add_loading(combine)
    add_common(combine)
    combine.set_defaults(handler=cmd_combine)


def _project(args, needed: bool):
    from workbench.core.project.folder import Project

    if args.project:
        return Project.open(args.project)
    if needed:
        raise error("Test sets are stored in a project.", "Add --project DIR.")
    return None


def _model_and_data(args, project):
    if not args.data:
        if project is None or not project.datasets:
            raise error("No dataset to fit the criteria on.", "Add --data NAME (or --project DIR).")
        args.data = project.datasets[0]
    return load_model_and_data(args)


def _check_out(path: str | None, suffix: str, option: str) -> Path | None:
    if path is None:
        return None
    out = Path(path).expanduser()
    if out.suffix.lower() != suffix:
        raise error(f"{option} {out.name!r} should end in {suffix}.", f"Name the file e.g. comparison{suffix}.")
    if not out.parent.is_dir():
        raise error(f"The folder {out.parent} does not exist.", f"Create it first, or choose another {option}.")
    return out


def cmd_compare(args) -> int:
    from workbench.core.comparison.compare import compare_testsets
    from workbench.core.comparison.report import table_rows, write_csv, write_html, write_json

    names = parse_list(args.testsets, "--testsets")
    outputs = {"html": _check_out(args.report, ".html", "--report"), "csv": _check_out(args.csv, ".csv", "--csv"),
               "json": _check_out(args.out_json, ".json", "--out-json")}
    project = _project(args, needed=False)
    model, dataset = _model_and_data(args, project)
    comparison, _ = run_job(args, lambda ctx: compare_testsets(
        ctx, project, names, model, dataset, args.layer, args.m, parse_list(args.criteria, "--criteria"),
        args.resamples, args.seed, args.eps, args.novelty_sample))
    data = comparison.to_dict()
    for note in comparison.notes:  # on stderr, so --json output stays clean
        print(f"note: {note}", file=sys.stderr, flush=True)
    if outputs["html"]:
        write_html(comparison, outputs["html"])
    if outputs["csv"]:
        write_csv(data, outputs["csv"])
    if outputs["json"]:
        write_json(data, outputs["json"])
    header, rows = table_rows(data)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [f"Comparison for {model.name} (IDC on {data['settings']['layer']}, m = {args.m}; 95 % bootstrap "
             f"intervals over {args.resamples} resamples, seed {args.seed}):"]
    lines += ["  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in [header, *rows]]
    supported = sum(d["supported"] for d in data["differences"])
    reversed_ = [d for d in data["differences"] if d.get("reversed")]
    lines.append(f"{supported} of {len(data['differences'])} pairwise differences are supported by their 95 % "
                 "intervals (coverage of sets of different sizes: size-matched draws).")
    lines += [f"  reversed: {data['figures'].get(d['figure'], d['figure'])}, {d['a']} − {d['b']}: "
              f"{d['difference']:+.3f} observed, interval [{d['low']:+.3f}, {d['high']:+.3f}]"
              + (f" at {d['size_matched']['size']} inputs each" if d.get("size_matched") else "") for d in reversed_]
    for criterion, overlap in data["overlaps"].items():
        lines.append(f"  {criterion}: items only one set covers — "
                     + ", ".join(f"{n} {c}" for n, c in overlap["only"].items()))
    lines += [f"Wrote {path}" for path in outputs.values() if path]
    emit(args, data, "\n".join(lines))
    return 0


def cmd_combine(args) -> int:
    from workbench.core.comparison.set_algebra import recipe, save_combination, save_new_items
    from workbench.core.labeling.labelled_sets import resolve

    project = _project(args, needed=True)
    names = parse_list(args.testsets, "--testsets")
    if args.operation == "adds-new":
        from workbench.core.comparison.compare import compare_testsets

        if not args.model:
            raise error("adds-new measures coverage, so it needs the model.", "Add --model MODEL.")
        model, dataset = _model_and_data(args, project)
        comparison, _ = run_job(args, lambda ctx: compare_testsets(ctx, project, names, model, dataset, args.layer,
                                                                   args.m, [args.criterion], resamples=10))
        first = comparison.names()[0]
        run_job(args, lambda ctx: save_new_items(project, comparison, first, args.name, args.criterion))
        how = f"{first} adding new {args.criterion} items beyond {', '.join(comparison.names()[1:])}"
    else:
        testsets = [resolve(project, name) for name in names]
        run_job(args, lambda ctx: save_combination(project, args.name, args.operation, testsets))
        how = recipe(args.operation, names)
    stored = resolve(project.__class__.open(project.folder), args.name)
    emit(args, {"name": args.name, "recipe": how, "size": len(stored), "ids": stored.ids.tolist()[:10]},
         f"Stored {args.name} = {how}: {len(stored):,} inputs.")
    return 0
