"""Label files: a study written as the GenAI-TIG benchmark's CSV or as JSON, and such a CSV read back.

The CSV has the benchmark's columns — `Image URL, ID, DATASET, TOOL, MUT_EXT, ITER, Expected,
Predicted, ASS 1 … ASS n, Misclass Human 1 … n, Valid Human 1 … n, Validity?, Label Preservation?`
— with the stable input id as the image URL; raters are numbered in the order they first answered. A file
has no generator column, so a study read back is grouped by TOOL (vae, gan, dm) and extent.
`Valid Human n` is 1 when rater n chose the invalid option (inverted, as the benchmark has it) and
`Misclass Human n` 1 when their answer is not the expected label. With more than two raters the
majority consensus follows in two more columns. The JSON holds everything: the study's settings,
the raters with their attention checks, each item with its answers (rater, answer, seconds, time)
and consensus, the agreement and the rates.

Reading a CSV (ours, or the benchmark's own files for any dataset: "Not a Digit", "not a real world
object", ImageNet class ids) recomputes consensus and agreement from the raters' answers and reports
every row whose `Validity?` or `Label Preservation?` the file states differently.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.labeling.answers import AnswerOptions, is_valid, keeps_label, parse_answer
from workbench.core.labeling.queue import rater_seed
from workbench.core.labeling.study import ALL, Study, StudyItem

EXPORT_FORMAT = "dl-workbench-labels-export"
EXPORT_VERSION = 1
_ASS = re.compile(r"^\s*ASS\s*(\d+)\s*$", re.IGNORECASE)


def _group_key(group) -> str:
    return "all" if group in (None, ALL) else f"{group[0]} {group[1]}".strip()


def _answer_cell(answer: str | None, options: AnswerOptions | None) -> str:
    if answer is None:
        return ""
    if answer.isdigit() or options is None:
        return answer
    return options.text(answer)


def csv_rows(study: Study, dataset: str = "", options: AnswerOptions | None = None) -> tuple[list[str], list[list]]:
    """The header and rows of the benchmark-shaped CSV of `study`."""
    n = len(study.raters)
    many = n > 2
    header = ["Image URL", "ID", "DATASET", "TOOL", "MUT_EXT", "ITER", "Expected", "Predicted",
              *(f"ASS {k}" for k in range(1, n + 1)), *(f"Misclass Human {k}" for k in range(1, n + 1)),
              *(f"Valid Human {k}" for k in range(1, n + 1)), "Validity?", "Label Preservation?",
              *(("Validity (majority)", "Label Preservation (majority)") if many else ())]
    rows = []
    for number, item in enumerate(study.items, 1):
        given = study.answers.get(item.input_id, {})
        answers = [given.get(r) for r in study.raters]
        c = study.consensus(item)
        rows.append([item.input_id, number, dataset, item.tool or item.generator, item.extent,
                     "" if item.generations is None else item.generations, item.expected,
                     "" if item.predicted is None else item.predicted,
                     *(_answer_cell(a, options) for a in answers),
                     *("" if a is None else int(not keeps_label(a, item.expected)) for a in answers),
                     *("" if a is None else int(not is_valid(a)) for a in answers),
                     c.validity, c.preservation,
                     *((c.validity_majority, c.preservation_majority) if many else ())])
    return header, rows


def export_csv(study: Study, path: str | Path, dataset: str = "", options: AnswerOptions | None = None) -> Path:
    header, rows = csv_rows(study, dataset, options)
    return _write(Path(path), lambda handle: _write_csv(handle, header, rows))


def _write_csv(handle, header, rows) -> None:
    writer = csv.writer(handle)
    writer.writerow(header)
    writer.writerows(rows)


def _write(path: Path, fill) -> Path:
    from workbench.core.project.store import atomic_text

    with atomic_text(path) as handle:
        fill(handle)
    return path


def percent_text(fraction) -> str:
    """A summary's rate as text: "81.2 %", or "—" where nothing was decided."""
    return "—" if fraction is None else f"{100 * fraction:.1f} %"


def study_summary(study: Study) -> dict:
    """Consensus counts, rates and agreement, overall and per generator and extent; proxies against
    humans; the raters' attention checks."""
    groups = [ALL, *(g for g in study.groups() if g != ("", ""))]
    out = {"raters": len(study.raters), "items": len(study.items), "groups": {}}
    for group in groups:
        items = study.items if group == ALL else [i for i in study.items if i.group == group]
        counts: dict[str, dict[str, int]] = {"validity": {}, "label preservation": {}}
        for item in items:
            c = study.consensus(item)
            counts["validity"][c.validity] = counts["validity"].get(c.validity, 0) + 1
            counts["label preservation"][c.preservation] = counts["label preservation"].get(c.preservation, 0) + 1
        out["groups"][_group_key(group)] = {
            "generator": "" if group == ALL else group[0], "extent": "" if group == ALL else group[1],
            "consensus": counts, "rates": study.rates(group),
            "agreement": {q: [a.as_dict() for a in found] for q, found in study.agreement(group).items()},
            "proxies": [{**p, "kappa": p["kappa"].as_dict()} for p in study.proxy_comparison(group)],
        }
    out["checks"] = [{"rater": c.rater, "answered": c.answered, "failed": c.failed, "flagged": c.flagged}
                     for c in study.checks()]
    return out


def export_json(study: Study, path: str | Path, rows=(), settings: dict | None = None, dataset: str = "",
                options: AnswerOptions | None = None, raters: list[dict] | None = None) -> Path:
    """The whole study as JSON; `rows` are the store's current rows (for seconds and times)."""
    by_item: dict[str, list[dict]] = {}
    for row in rows:
        by_item.setdefault(row.input_id, []).append(
            {"rater": row.rater, "answer": row.answer, "seconds": row.seconds, "created": row.created,
             "mode": row.mode, "check_class": row.check_class})
    items = []
    for item in study.items:
        c = study.consensus(item)
        items.append({"id": item.input_id, "index": item.index, "expected": item.expected,
                      "generator": item.generator, "tool": item.tool, "extent": item.extent,
                      "generations": item.generations, "predicted": item.predicted, "proxies": item.proxies,
                      "answers": by_item.get(item.input_id, [dict(rater=r, answer=a) for r, a in
                                                             study.answers.get(item.input_id, {}).items()]),
                      "consensus": {"validity": c.validity, "label_preservation": c.preservation,
                                    "validity_majority": c.validity_majority,
                                    "label_preservation_majority": c.preservation_majority, "raters": c.raters}})
    checks = [a for row_list in by_item.values() for a in row_list if a.get("check_class") is not None]
    document = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "testset": study.name, "dataset": dataset,
                "settings": {**(settings or {}), "options": options.as_dict() if options else None,
                             "min_raters": study.min_raters},
                "raters": raters or [{"name": r, "order_seed": rater_seed(int((settings or {}).get("seed", 0)), r)}
                                     for r in study.raters], "items": items,
                "attention_checks": checks, "summary": study_summary(study)}
    return _write(Path(path), lambda handle: json.dump(document, handle, indent=1, default=str))


# --- reading a CSV ----------------------------------------------------------------------------------------

@dataclass
class ImportedStudy:
    """A label CSV read back: the study its answers make, and the rows whose stated consensus differs."""

    study: Study
    dataset: str
    mismatches: list[dict] = field(default_factory=list)  # row, column, stated, recomputed
    rows: int = 0


def _column(header: list[str], *names: str) -> str | None:
    lowered = {h.strip().lower(): h for h in header}
    return next((lowered[n.lower()] for n in names if n.lower() in lowered), None)


def import_csv(path: str | Path, min_raters: int = 2) -> ImportedStudy:
    """Read a benchmark-shaped label CSV; see the module docstring."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = list(reader.fieldnames or [])
            records = list(reader)
    except FileNotFoundError:
        raise WorkbenchError(f"No label file {path}.", "Check the path.") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise WorkbenchError(f"Cannot read the label file {path}: {exc}.", "Give a CSV file in UTF-8.") from exc
    raters = sorted(((int(m[1]), h) for h in header if (m := _ASS.match(h))), key=lambda t: t[0])
    expected_col = _column(header, "Expected", "Expected_label(X)", "Expected label")
    if not raters or expected_col is None:
        missing = [what for what, ok in (("ASS 1 … ASS n", raters), ("Expected", expected_col)) if not ok]
        raise WorkbenchError(f"{path.name} is not a label file: it has no {' and no '.join(missing)} column.",
                             "Give a CSV with the benchmark's columns (Image URL, ID, …, ASS 1, ASS 2, …, "
                             "Validity?, Label Preservation?).")
    cols = {k: _column(header, *names) for k, names in {
        "url": ("Image URL", "Image", "Filename"), "id": ("ID",), "dataset": ("DATASET",), "tool": ("TOOL", "Tool"),
        "extent": ("MUT_EXT", "Mutation_extent"), "iter": ("ITER", "Iteration"),
        "predicted": ("Predicted", "Predicted_label(Y)"), "validity": ("Validity?",),
        "preservation": ("Label Preservation?",)}.items()}
    names = [f"rater {k}" for k, _ in raters]
    items, answers, datasets = [], {}, []
    for number, record in enumerate(records, 1):
        get = (lambda key: (record.get(cols[key]) or "").strip() if cols[key] else "")
        input_id = get("url") or get("id") or f"row {number}"
        if input_id in answers:
            input_id = f"{input_id} (row {number})"
        expected = parse_answer(record.get(expected_col) or "")
        if expected is None:
            raise WorkbenchError(f"Row {number} of {path.name} has no expected label.",
                                 "Every row needs its Expected class.")
        iteration = get("iter")
        items.append(StudyItem(input_id, expected, number - 1, get("tool"), get("tool"), get("extent"),
                               int(float(iteration)) if _is_number(iteration) else None,
                               parse_answer(get("predicted")) if get("predicted") else None))
        answers[input_id] = {name: a for name, (_, h) in zip(names, raters)
                             if (a := parse_answer(record.get(h) or "")) is not None}
        datasets.append(get("dataset"))
    study = Study.from_answers(path.stem, items, names, answers, min_raters)
    mismatches = []
    for number, (item, record) in enumerate(zip(items, records), 1):
        c = study.consensus(item)
        for key, recomputed in (("validity", c.validity), ("preservation", c.preservation)):
            if cols[key] is None:
                continue
            stated = (record.get(cols[key]) or "").strip()
            if _consensus_text(stated) != recomputed:
                mismatches.append({"row": number, "id": item.input_id, "column": cols[key], "stated": stated,
                                   "recomputed": recomputed})
    dataset = ", ".join(dict.fromkeys(d for d in datasets if d))
    return ImportedStudy(study, dataset, mismatches, len(records))


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))  # "nan" or "inf" in ITER is no iteration count
    except ValueError:
        return False


def _consensus_text(text: str) -> str:
    lowered = text.strip().lower()
    return {"yes": "yes", "no": "no", "n/a": "N/A", "na": "N/A", "": "N/A", "pending": "pending"}.get(lowered, text)
