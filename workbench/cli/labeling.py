"""`workbench label-stats`, `label-export` and `label-import`: what raters said about a test set.

The labelling itself happens in the GUI's Labelling view; these commands read the project's label
store (never writing it) or a label CSV: consensus, agreement, rates per generator and extent, and
the validity proxies against the human consensus (docs/methods/labelling.md).
"""

from __future__ import annotations

from pathlib import Path

from workbench.cli.arguments import text
from workbench.cli.common import add_common, emit, error


def add_parsers(sub) -> None:
    stats = sub.add_parser("label-stats", help="consensus, agreement, rates and proxies against humans for a "
                                               "labelled test set")
    stats.add_argument("--testset", required=True, metavar="NAME", type=text("test set"),
                       help="the labelled test set (e.g. a generated set)")
    add_common(stats, seed=False)
    stats.set_defaults(handler=cmd_label_stats)

    export = sub.add_parser("label-export", help="write a test set's labels as the benchmark's CSV or as JSON")
    export.add_argument("--testset", required=True, metavar="NAME", type=text("test set"), help="the labelled test set")
    export.add_argument("--out", required=True, metavar="FILE", type=text("output file"),
                        help="F.csv (the benchmark's columns) or F.json (everything)")
    add_common(export, seed=False)
    export.set_defaults(handler=cmd_label_export)

    read = sub.add_parser("label-import", help="read a label CSV (ours or the benchmark's), recompute consensus and "
                                               "agreement, and check the file's consensus columns")
    read.add_argument("file", metavar="F.csv", type=text("label file"), help="the CSV to read")
    read.add_argument("--min-raters", type=int, default=2, help="answers an item needs for a consensus (default 2)")
    read.add_argument("--json", action="store_true", help="print machine-readable results")
    read.set_defaults(handler=cmd_label_import)


def _study(args):
    from workbench.core.labeling.project_studies import load_study
    from workbench.core.project.folder import Project

    if not args.project:
        raise error("Labels live in a project.", "Add --project DIR (the folder the Labelling view saved to).")
    project = Project.open(args.project)
    setup, study = load_study(project, args.testset)
    if not study.raters:
        raise error(f"No one has labelled {setup.name!r} yet.", "Label it in the Labelling view: workbench gui "
                                                                 f"--project {args.project} --view labelling.")
    return project, setup, study


def cmd_label_stats(args) -> int:
    from workbench.core.labeling.exchange import study_summary

    _, setup, study = _study(args)
    summary = study_summary(study)
    emit(args, {"testset": setup.name, **summary}, summary_text(f"Labels of {setup.name}", summary))
    return 0


def cmd_label_export(args) -> int:
    from workbench.core.labeling.exchange import export_csv, export_json
    from workbench.core.labeling.label_store import read_store

    out = Path(args.out).expanduser()
    if out.suffix.lower() not in (".csv", ".json"):
        raise error(f"Cannot tell what to write from {out.name!r}.", "Name the file F.csv or F.json.")
    if not out.parent.is_dir():
        raise error(f"The folder {out.parent} does not exist.", "Create it first, or choose another --out.")
    project, setup, study = _study(args)
    dataset = setup.testset.source.dataset
    if out.suffix.lower() == ".csv":
        export_csv(study, out, dataset, setup.options)
    else:
        with read_store(project) as store:
            rows = store.current(setup.name)
        export_json(study, out, rows, setup.settings, dataset, setup.options)
    emit(args, {"testset": setup.name, "path": str(out), "items": len(study.items), "raters": study.raters},
         f"Wrote the labels of {setup.name} ({len(study.items)} items, {len(study.raters)} raters) to {out}")
    return 0


def cmd_label_import(args) -> int:
    from workbench.core.labeling.exchange import import_csv, study_summary

    imported = import_csv(args.file, min_raters=args.min_raters)
    summary = study_summary(imported.study)
    lines = [summary_text(f"Labels in {Path(args.file).name} ({imported.rows} rows"
                          + (f", {imported.dataset}" if imported.dataset else "") + ")", summary)]
    if imported.mismatches:
        lines.append(f"  {len(imported.mismatches)} consensus cells of the file differ from the recomputed ones:")
        lines += [f"    row {m['row']} ({m['id']}): {m['column']} says {m['stated']!r}, recomputed {m['recomputed']!r}"
                  for m in imported.mismatches[:20]]
        if len(imported.mismatches) > 20:
            lines.append(f"    … and {len(imported.mismatches) - 20} more (--json lists them all)")
    else:
        lines.append("  The file's Validity? and Label Preservation? columns equal the recomputed consensus.")
    emit(args, {"file": str(args.file), "rows": imported.rows, "dataset": imported.dataset,
                "mismatches": imported.mismatches, **summary}, "\n".join(lines))
    return 0


def _counts(counts: dict) -> str:
    order = ("yes", "no", "N/A", "pending")
    return " · ".join(f"{k} {counts[k]}" for k in (*order, *sorted(set(counts) - set(order))) if k in counts)


def _agreement_text(found: list[dict]) -> str:
    parts = []
    for a in found:
        value = "n/a" if a["value"] is None else f"{a['value']:.2f}"
        raw = "—" if a["raw"] is None else f"{a['raw']:.2f}"
        parts.append(f"{a['measure']} {value} (raw {raw}, {a['items']} items)")
    return "; ".join(parts) or "needs two raters"


def summary_text(title: str, summary: dict) -> str:
    """The summary of `study_summary` as lines for the terminal."""
    from workbench.core.labeling.exchange import percent_text

    lines = [f"{title}: {summary['raters']} raters, {summary['items']} items"]
    for key, group in summary["groups"].items():
        r = group["rates"]
        lines.append(f"{'All items' if key == 'all' else key}: {r['items']} items, {r['decided']} with a consensus")
        lines.append(f"  validity            {_counts(group['consensus']['validity'])}")
        lines.append(f"  label preservation  {_counts(group['consensus']['label preservation'])}")
        lines.append(f"  valid {percent_text(r['valid_rate'])} · valid and label-preserving "
                     f"{percent_text(r['preservation_rate'])} · valid misbehaviours {r['valid_misbehaviours']}")
        for question, found in group["agreement"].items():
            lines.append(f"  agreement on {question}: {_agreement_text(found)}")
        for p in group["proxies"]:
            c = p["confusion"]
            kappa = p["kappa"]["value"]
            lines.append(f"  proxy {p['proxy']} against the human {p['judges']} consensus: accuracy "
                         f"{percent_text(p['accuracy'])}, κ {'n/a' if kappa is None else f'{kappa:.2f}'} on {p['items']} "
                         f"items (proxy/human yes/yes {c['yes/yes']}, yes/no {c['yes/no']}, no/yes {c['no/yes']}, "
                         f"no/no {c['no/no']}" + (f"; {p['uncertain']} uncertain" if p["uncertain"] else "") + ")")
    for check in summary.get("checks", []):
        if check["answered"]:
            verdict = f"failed {check['failed']} — flagged" if check["flagged"] else "all passed"
            lines.append(f"Attention checks of {check['rater']}: {check['answered']} answered, {verdict}")
    return "\n".join(lines)
