"""`workbench uncertainty`: the softmax uncertainty scores (DeepGini, margin, least confidence, entropy) of the
inputs of any test set as they are (no attack), each summarised — mean, median, quantiles — and ranked: the most
uncertain inputs with their labels and predictions; optionally every input's scores as CSV.

Method: docs/methods/fol-and-selection.md#uncertainty-scores. The scores are computed by
`workbench.core.robustness.scores` (`softmax_probabilities`, `uncertainty_summary`), the same functions
the selection strategies use; nothing is stored in a project.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from workbench.cli.arguments import integer, output_file
from workbench.cli.common import (
    ProjectTarget,
    add_common,
    add_loading,
    add_model_data,
    add_subset_options,
    check_creatable,
    check_positive,
    emit,
    error,
    load_model_and_data,
    notify,
    parse_list,
    run_job,
    stats_line,
    with_subset,
)
from workbench.core.robustness.experiment_report import pct
from workbench.core.sampling import seeded_sample

#: How each score is named in the text report.
TITLES = {"deepgini": "DeepGini", "margin": "margin", "least_confidence": "least confidence", "entropy": "entropy"}


def add_parsers(sub) -> None:
    unc = sub.add_parser("uncertainty", help="softmax uncertainty of a test set's inputs (DeepGini, margin, least "
                                             "confidence, entropy): mean, median and quantiles, and the most "
                                             "uncertain inputs with their labels and predictions")
    add_model_data(unc)
    unc.add_argument("--testset", metavar="NAME", help="a project test set (a stored pool scores its stored inputs), "
                                                       "a split of --data, or a dataset name or path")
    unc.add_argument("--split", help="split of --data to score (default test)")
    unc.add_argument("--scores", default="deepgini,margin,least_confidence,entropy", metavar="LIST",
                     help="comma-separated: deepgini, margin, least_confidence, entropy (default all four)")
    unc.add_argument("--top", type=integer(0, 10**6), default=10, metavar="K",
                     help="list the K most uncertain inputs of each score (default 10)")
    unc.add_argument("--max-inputs", type=integer(1, 10**9), metavar="N", help="score a seeded sample of N inputs")
    unc.add_argument("--batch-size", type=integer(1, 65536), default=256)
    add_subset_options(unc)
    unc.add_argument("--out", metavar="CSV", type=output_file, help="write every input's scores to this CSV file")
    add_loading(unc)
    add_common(unc)
    unc.set_defaults(handler=cmd_uncertainty)


def _score_names(text: str) -> list[str]:
    from workbench.core.robustness.scores import UNCERTAINTY_SCORES

    names = [n.lower().replace("-", "_").replace(" ", "_") for n in parse_list(text, "--scores")]
    unknown = [n for n in names if n not in UNCERTAINTY_SCORES]
    if unknown:
        raise error(f"Unknown uncertainty score {unknown[0]!r}.", f"Use one of: {', '.join(UNCERTAINTY_SCORES)}.")
    return names


def cmd_uncertainty(args) -> int:
    from workbench.core.labeling.labelled_sets import resolve
    from workbench.core.robustness.scores import softmax_probabilities, uncertainty_summary

    started = time.monotonic()
    if args.testset and args.split:
        raise error("--testset and --split both name what to score.", "Give one of them.")
    scores = _score_names(args.scores)
    check_positive("--max-inputs", args.max_inputs)
    check_positive("--batch-size", args.batch_size, allow_none=False)
    if args.out:
        check_creatable(Path(args.out).resolve().parent)
    model, dataset = load_model_and_data(args)
    target = ProjectTarget(args.project, write=False)  # read for its test sets; nothing is stored there
    test = resolve(target.project, with_subset(args, args.testset or args.split or "test"), dataset, model=model,
                   download=args.download)
    notes = notify(test)
    if len(test) == 0:
        raise error(f"Test set {test.name!r} is empty.", "Choose a test set with inputs.")
    rows = seeded_sample(len(test), args.max_inputs, args.seed)
    rows = np.arange(len(test)) if rows is None else rows
    probs, device = run_job(args, lambda ctx: softmax_probabilities(ctx, model, test, rows, args.batch_size))
    labels = np.asarray(test.labels)[rows]
    summary = uncertainty_summary(probs, labels, index=rows, ids=test.ids[rows], top=args.top, scores=scores)
    written = _write_csv(args.out, rows, test.ids[rows], labels, probs, scores) if args.out else None
    result = {
        "model": model.name, "model_fingerprint": model.fingerprint(), "dataset": dataset.spec,
        "testset": test.name, "inputs": summary["inputs"], "testset_inputs": len(test), "seed": args.seed,
        "top": args.top, "accuracy": summary["accuracy"], "scores": summary["scores"], "csv": written,
        "notes": notes, "device": device, "seconds": round(time.monotonic() - started, 3),
    }
    emit(args, result, _text(result, list(dataset.class_names)))
    return 0


def _text(r: dict, class_names: list[str]) -> str:
    lines = [(f"{r['model']} on {r['testset']} ({r['inputs']:,} of {r['testset_inputs']:,} inputs, as they are); "
              f"accuracy {pct(r['accuracy'])}")]

    def name(k: int) -> str:
        return class_names[k] if 0 <= k < len(class_names) else str(k)

    for key, s in r["scores"].items():
        lines.append(stats_line(TITLES[key], s["stats"]))
        if not s["most_uncertain"]:
            continue
        order = "highest" if s["most_uncertain_first"] == "descending" else "lowest"
        rows = [(str(e["index"]), name(e["label"]), name(e["prediction"]), f"{e['value']:.4g}")
                for e in s["most_uncertain"]]
        widths = [max(len(h), *(len(row[i]) for row in rows))
                  for i, h in enumerate(("index", "label", "prediction", "value"))]
        lines.append(f"  {len(rows)} most uncertain ({order} {TITLES[key]} first):")
        lines.append("    " + "  ".join(h.rjust(w) for h, w in zip(("index", "label", "prediction", "value"), widths)))
        lines += ["    " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    if r["csv"]:
        lines.append(f"Per-input scores written to {r['csv']}.")
    lines.append(f"Took {r['seconds']:.1f} s on {r['device']}.")
    return "\n".join(lines)


def _write_csv(path, rows, ids, labels, probs, scores: list[str]) -> str:
    import csv

    from workbench.core.project.store import atomic_path
    from workbench.core.robustness.scores import UNCERTAINTY_SCORES

    path = Path(path)
    values = {name: UNCERTAINTY_SCORES[name](probs) for name in scores}
    predicted = probs.argmax(axis=1)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "id", "label", "prediction", *scores])
        for k, i in enumerate(rows):
            w.writerow([int(i), str(ids[k]), int(labels[k]), int(predicted[k]),
                        *(repr(float(values[name][k])) for name in scores)])
    return str(path)
