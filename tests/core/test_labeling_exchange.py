"""Label files: our CSV and JSON exports, the CSV read back, the benchmark's own files for other datasets
(their stated consensus recomputed), and files that are not label files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from workbench.core.data.class_names import FASHION_CLASSES
from workbench.core.errors import WorkbenchError
from workbench.core.labeling.answers import DIFFERENT, INVALID, options_for
from workbench.core.labeling.exchange import (
    EXPORT_FORMAT,
    csv_rows,
    export_csv,
    export_json,
    import_csv,
)
from workbench.core.labeling.label_store import FILE, LabelStore
from workbench.core.labeling.study import Study, StudyItem

NAME = "gen"
FASHION = options_for(FASHION_CLASSES)
BENCHMARK_HEADER = ["Image URL", "ID", "DATASET", "TOOL", "MUT_EXT", "ITER", "Expected", "Predicted", "ASS 1",
                    "ASS 2", "Misclass Human 1", "Misclass Human 2", "Valid Human 1", "Valid Human 2", "Validity?",
                    "Label Preservation?"]


def no_nan(text: str):
    raise ValueError(f"{text} is not JSON")


def make_items(n: int) -> list[StudyItem]:
    tools = ("vae", "gan", "dm")
    return [StudyItem(f"gen/{i:03d}", str(i % 10), i, f"{tools[i % 3]}-model", tools[i % 3],
                      ("small", "large")[i % 2], 10 * i, str((i * 7) % 10),
                      {"SelfOracle": i % 4 != 0, "DAIV": i % 5 != 0,
                       "oracle classifier": ("preserved", "changed", "uncertain")[i % 3]})
            for i in range(n)]


def labelled(store: LabelStore, items: list[StudyItem], raters: list[str], seed: int = 0) -> None:
    """Answers of every kind: the expected class, another class, invalid, a different item, and gaps."""
    rng = np.random.default_rng(seed)
    for item in items:
        for r, rater in enumerate(raters):
            if r > 0 and rng.random() < 0.1:
                continue  # a rater who did not see it: some items stay pending
            choice = rng.random()
            if choice < 0.5:
                answer = item.expected
            elif choice < 0.7:
                answer = str((int(item.expected) + 1 + r) % 10)
            elif choice < 0.9:
                answer = INVALID
            else:
                answer = DIFFERENT
            store.answer(NAME, item.input_id, rater, answer, session="s", seconds=float(r + 1))


@pytest.fixture
def study2(tmp_path) -> tuple[Study, list]:
    items = make_items(60)
    with LabelStore(tmp_path / FILE) as store:
        labelled(store, items, ["ann", "ben"])
        store.answer(NAME, "test:5", "ann", "5", session="s", check_class=5)  # an attention check
        rows = store.current(NAME)
    return Study(NAME, items, rows), rows


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


# ---------------------------------------------------------------- our own files


@pytest.mark.parametrize("options", [FASHION, None], ids=["answer texts", "stored answers"])
def test_export_then_import_gives_back_the_study(tmp_path, study2, options):
    study, _ = study2
    path = export_csv(study, tmp_path / "labels.csv", "fashion-mnist", options)
    imported = import_csv(path)
    assert imported.mismatches == []
    assert imported.rows == len(study.items)
    assert imported.dataset == "fashion-mnist"
    again = imported.study
    assert again.raters == ["rater 1", "rater 2"]
    assert len(again.items) == len(study.items)
    names = dict(zip(study.raters, again.raters))
    for item, back in zip(study.items, again.items):
        assert (back.input_id, back.expected, back.predicted, back.extent, back.generations, back.tool) == \
            (item.input_id, item.expected, item.predicted, item.extent, item.generations, item.tool)
        assert again.answers[back.input_id] == {names[r]: a for r, a in study.answers.get(item.input_id, {}).items()}
        assert again.consensus(back) == study.consensus(item)
    assert again.rates() == study.rates()
    for question, found in study.agreement().items():
        assert [a.value for a in again.agreement()[question]] == pytest.approx([a.value for a in found])
    decided = [c for c in study.consensuses() if c.decided]
    assert 0 < len(decided) < len(study.items)  # the file had pending rows too


def test_the_exported_csv_has_the_benchmark_columns(tmp_path, study2):
    study, _ = study2
    records = read_csv(export_csv(study, tmp_path / "labels.csv", "fashion-mnist", FASHION))
    assert list(records[0]) == BENCHMARK_HEADER
    texts = {r["ASS 1"] for r in records} | {r["ASS 2"] for r in records}
    assert "Not a clothing item" in texts and "A different clothing item" in texts
    for record, item in zip(records, study.items):
        assert record["Image URL"] == item.input_id and record["TOOL"] == item.tool
        assert record["Expected"] == item.expected and record["DATASET"] == "fashion-mnist"
        for k, rater in enumerate(study.raters, 1):
            answer = study.answers.get(item.input_id, {}).get(rater)
            if answer is None:
                assert record[f"ASS {k}"] == record[f"Valid Human {k}"] == record[f"Misclass Human {k}"] == ""
            else:
                assert record[f"Valid Human {k}"] == ("1" if answer == INVALID else "0")  # inverted, as published
                assert record[f"Misclass Human {k}"] == ("0" if answer == item.expected else "1")
        c = study.consensus(item)
        assert (record["Validity?"], record["Label Preservation?"]) == (c.validity, c.preservation)
    assert [r["ID"] for r in records] == [str(k) for k in range(1, len(records) + 1)]


def test_a_three_rater_export_has_the_majority_columns(tmp_path):
    items = make_items(40)
    with LabelStore(tmp_path / FILE) as store:
        labelled(store, items, ["a", "b", "c"], seed=5)
        study = Study(NAME, items, store.current(NAME))
    header, rows = csv_rows(study)
    assert header[-4:] == ["Validity?", "Label Preservation?", "Validity (majority)",
                           "Label Preservation (majority)"]
    assert "ASS 3" in header and "Valid Human 3" in header and "Misclass Human 3" in header
    for row, item in zip(rows, items):
        c = study.consensus(item)
        assert row[-2:] == [c.validity_majority, c.preservation_majority]
    assert {row[-2] for row in rows} >= {"yes"}
    path = export_csv(study, tmp_path / "three.csv")
    imported = import_csv(path)
    assert imported.mismatches == [] and imported.study.raters == ["rater 1", "rater 2", "rater 3"]
    assert [imported.study.consensus(i) for i in imported.study.items] == study.consensuses()
    # two raters: no majority columns
    assert "Validity (majority)" not in csv_rows(Study.from_answers(NAME, items, ["a", "b"], {}))[0]


def test_export_json_holds_items_answers_consensus_and_agreement(tmp_path, study2):
    study, rows = study2
    path = export_json(study, tmp_path / "labels.json", rows, {"seed": 3, "check_every": 10}, "fashion-mnist",
                       FASHION)
    document = json.loads(path.read_text(encoding="utf-8"), parse_constant=no_nan)
    assert document["format"] == EXPORT_FORMAT and document["testset"] == NAME
    assert document["dataset"] == "fashion-mnist"
    assert document["settings"]["seed"] == 3 and document["settings"]["min_raters"] == 2
    assert document["settings"]["options"]["answers"][-1] == {"answer": DIFFERENT, "text": "A different clothing item"}
    assert [r["name"] for r in document["raters"]] == study.raters
    assert [i["id"] for i in document["items"]] == [i.input_id for i in study.items]
    for entry, item in zip(document["items"], study.items):
        given = study.answers.get(item.input_id, {})
        assert {a["rater"]: a["answer"] for a in entry["answers"]} == given
        assert all(a["seconds"] in (1.0, 2.0) and a["created"] for a in entry["answers"])
        c = study.consensus(item)
        assert entry["consensus"] == {"validity": c.validity, "label_preservation": c.preservation,
                                      "validity_majority": c.validity_majority,
                                      "label_preservation_majority": c.preservation_majority, "raters": c.raters}
        assert entry["proxies"] == item.proxies and entry["generations"] == item.generations
    assert [c["answer"] for c in document["attention_checks"]] == ["5"]
    summary = document["summary"]
    assert summary["raters"] == 2 and summary["items"] == 60
    overall = summary["groups"]["all"]
    assert set(overall["agreement"]) == {"validity", "label match", "answer"}
    assert [a["measure"] for a in overall["agreement"]["validity"]] == ["Cohen's κ", "Krippendorff's α"]
    assert overall["rates"] == study.rates()
    assert {p["proxy"] for p in overall["proxies"]} == {"SelfOracle", "DAIV", "oracle classifier"}
    assert set(summary["groups"]) == {"all", *(f"{g} {e}" for g, e in study.groups())}
    assert summary["checks"] == [{"rater": "ann", "answered": 1, "failed": 0, "flagged": False},
                                 {"rater": "ben", "answered": 0, "failed": 0, "flagged": False}]


def test_export_json_without_store_rows_uses_the_answers(tmp_path):
    items = make_items(3)
    study = Study.from_answers(NAME, items, ["a", "b"], {items[0].input_id: {"a": "0", "b": INVALID}})
    document = json.loads(export_json(study, tmp_path / "x.json").read_text(), parse_constant=no_nan)
    assert document["items"][0]["answers"] == [{"rater": "a", "answer": "0"}, {"rater": "b", "answer": INVALID}]
    assert document["items"][1]["answers"] == [] and document["items"][1]["consensus"]["validity"] == "pending"
    assert document["summary"]["groups"]["all"]["rates"]["decided"] == 1


def test_a_failed_export_leaves_no_half_file(tmp_path):
    study = Study.from_answers(NAME, make_items(2), ["a", "b"], {})
    with pytest.raises(WorkbenchError, match="does not exist"):
        export_csv(study, tmp_path / "missing" / "x.csv")
    target = tmp_path / "x.json"
    target.write_text("old")
    looped: dict = {}
    looped["self"] = looped
    with pytest.raises(ValueError, match="Circular"):
        export_json(study, target, settings=looped)  # fails while the file is being written
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


# ---------------------------------------------------------------- the benchmark's files for other datasets


def benchmark_file(path: Path, dataset: str, rows: list[tuple], header=BENCHMARK_HEADER, encoding="utf-8") -> Path:
    """rows: (expected, predicted, answer 1, answer 2, stated validity, stated preservation)."""
    with open(path, "w", newline="", encoding=encoding) as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for k, (expected, predicted, one, two, validity, preservation) in enumerate(rows, 1):
            misclass = ["" if a == "" else int(a.strip() not in (expected, f"{expected}.0")) for a in (one, two)]
            invalid = ["" if a == "" else int(a.lower().startswith("not")) for a in (one, two)]
            writer.writerow([f"https://example.org/{dataset}/{k}.png", k, dataset, ("vae", "gan", "dm")[k % 3],
                             ("low", "high")[k % 2], k * 5, expected, predicted, one, two, *misclass, *invalid,
                             validity, preservation])
    return path


# Each stated consensus below was worked out by hand from the two answers and the benchmark's rules.
MNIST = [
    ("3", "5", "3", "3", "Yes", "Yes"),  # both valid, both the expected digit
    ("3", "8", "Not a Digit", "Not a Digit", "No", "N/A"),  # both invalid
    ("5", "6", "5", "6", "Yes", "N/A"),  # both valid, one kept the label
    ("7", "1", "Not a Digit", "1", "N/A", "No"),  # one invalid, the other another digit
    ("8", "3", "Not a Digit", "8", "N/A", "N/A"),  # one invalid, the other the expected digit
    ("2", "4", "4", "9", "Yes", "No"),  # both valid, neither the expected digit
    ("0", "6", "0.0", "0", "Yes", "Yes"),  # a spreadsheet's 0.0 is digit 0
    ("9", "4", "4", "4", "Yes", "No"),
]
CIFAR10 = [
    ("1", "9", "1", "1", "Yes", "Yes"),
    ("4", "3", "not a real world object", "not a real world object", "No", "N/A"),
    ("6", "2", "not a real world object", "3", "N/A", "No"),
    ("9", "1", "9", "8", "Yes", "N/A"),
    ("0", "8", "0", "not a real world object", "N/A", "N/A"),
    ("5", "3", "3", "3", "Yes", "No"),
]
IMAGENET = [
    ("963", "964", "963", "963", "Yes", "Yes"),
    ("963", "762", "A different real-world object", "963", "Yes", "N/A"),  # a different object is valid
    ("417", "416", "A different real-world object", "A different real-world object", "Yes", "No"),
    ("417", "1", "not a real world object", "A different real-world object", "N/A", "No"),
    ("22", "21", "not a real world object", "not a real world object", "No", "N/A"),
    ("22", "23", "not a real world object", "22", "N/A", "N/A"),
    ("963", "500", "964", "A different real-world object", "Yes", "No"),
    ("1", "0", "1", "2", "Yes", "N/A"),
]


@pytest.mark.parametrize("dataset, rows", [("MNIST", MNIST), ("CIFAR-10", CIFAR10), ("ImageNet", IMAGENET)])
def test_the_benchmarks_files_for_other_datasets_recompute_to_their_stated_consensus(tmp_path, dataset, rows):
    imported = import_csv(benchmark_file(tmp_path / f"{dataset}.csv", dataset, rows))
    assert imported.mismatches == []
    assert imported.rows == len(rows) and imported.dataset == dataset
    study = imported.study
    stated = [(v.lower(), p.lower()) for *_, v, p in rows]
    assert [(c.validity.lower(), c.preservation.lower()) for c in study.consensuses()] == stated
    assert [i.expected for i in study.items] == [r[0] for r in rows]
    assert [i.predicted for i in study.items] == [r[1] for r in rows]
    assert [i.tool for i in study.items] == [("vae", "gan", "dm")[k % 3] for k in range(1, len(rows) + 1)]
    assert [i.generations for i in study.items] == [5 * k for k in range(1, len(rows) + 1)]
    assert study.items[0].input_id == f"https://example.org/{dataset}/1.png"
    answers = {a for given in study.answers.values() for a in given.values()}
    assert INVALID in answers
    if dataset == "ImageNet":
        assert {"963", DIFFERENT} <= answers
    # every valid misbehaviour counted: all raters valid and the expected label, the model wrong
    assert study.rates()["valid_misbehaviours"] == sum(1 for v, p in stated if (v, p) == ("yes", "yes"))
    assert study.agreement()["validity"][0].items == len(rows)


def test_a_wrong_stated_consensus_is_one_mismatch_naming_its_row(tmp_path):
    rows = list(MNIST)
    rows[3] = rows[3][:4] + ("Yes", rows[3][5])  # row 4 states Validity? yes; the answers give N/A
    imported = import_csv(benchmark_file(tmp_path / "mnist.csv", "MNIST", rows))
    assert imported.mismatches == [{"row": 4, "id": "https://example.org/MNIST/4.png", "column": "Validity?",
                                    "stated": "Yes", "recomputed": "N/A"}]
    rows = list(MNIST)
    rows[0] = rows[0][:5] + ("No",)
    (mismatch,) = import_csv(benchmark_file(tmp_path / "mnist2.csv", "MNIST", rows)).mismatches
    assert (mismatch["row"], mismatch["column"], mismatch["recomputed"]) == (1, "Label Preservation?", "yes")


def test_other_spellings_of_the_benchmarks_columns(tmp_path):
    header = ["Filename", "ID", "DATASET", "Tool", "Mutation_extent", "Iteration", "Expected_label(X)",
              "Predicted_label(Y)", "ASS1", "ass 2", "Misclass Human 1", "Misclass Human 2", "Valid Human 1",
              "Valid Human 2", "Validity?", "Label Preservation?"]
    rows = [("3", "5", "3", "3", "yes", "yes"), ("3", "8", "Not a Digit", "Not a Digit", "NO", ""),
            ("5", "6", "5", "6", "yes", "na")]
    imported = import_csv(benchmark_file(tmp_path / "x.csv", "MNIST", rows, header, encoding="utf-8-sig"))
    assert imported.mismatches == []
    assert imported.study.raters == ["rater 1", "rater 2"]
    assert [i.tool for i in imported.study.items] == ["gan", "dm", "vae"]


def test_gaps_more_raters_and_odd_cells(tmp_path):
    header = ["Image URL", "Expected", "ITER", "ASS 3", "ASS 1", "ASS 2", "Validity?", "Label Preservation?"]
    path = tmp_path / "gaps.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerow(["a.png", "1", "nan", "1", "1", "", "yes", "yes"])  # rater 2 did not see it
        writer.writerow(["b.png", "2", "inf", "", "2", "", "pending", "pending"])  # one answer: pending
        writer.writerow(["a.png", "3", "", "not a digit", "3", "3", "N/A", "N/A"])  # a repeated URL
    imported = import_csv(path)
    assert imported.mismatches == []
    study = imported.study
    assert study.raters == ["rater 1", "rater 2", "rater 3"]  # in the order of their numbers
    assert [i.input_id for i in study.items] == ["a.png", "b.png", "a.png (row 3)"]
    assert [i.generations for i in study.items] == [None, None, None]
    assert study.answers["a.png (row 3)"] == {"rater 1": "3", "rater 2": "3", "rater 3": INVALID}
    assert study.consensus(study.items[1]).validity == "pending"
    assert import_csv(path, min_raters=1).mismatches[0]["row"] == 2  # now decided: "pending" is wrong


# ---------------------------------------------------------------- files that are not label files


def test_a_file_that_is_not_csv_is_refused(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(WorkbenchError, match="Cannot read the label file .*labels.csv"):
        import_csv(path)
    path.write_text('{"items": []}\n')
    with pytest.raises(WorkbenchError, match="labels.csv is not a label file"):
        import_csv(path)
    path.write_text("")
    with pytest.raises(WorkbenchError, match="not a label file"):
        import_csv(path)
    path.write_text("Image URL,Expected,ASS 1\n" + "x" * 200_000 + ",1,1\n")  # a cell past the csv module's limit
    with pytest.raises(WorkbenchError, match="Cannot read the label file"):
        import_csv(path)


def test_a_file_without_ass_or_expected_columns_is_refused(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("Image URL,Expected,Rater A,Rater B\nu,1,1,1\n")
    with pytest.raises(WorkbenchError, match=r"x.csv is not a label file: it has no ASS 1 … ASS n column\.") as e:
        import_csv(path)
    assert "ASS 1" in e.value.hint
    path.write_text("Image URL,Label,ASS 1,ASS 2\nu,1,1,1\n")
    with pytest.raises(WorkbenchError, match=r"it has no Expected column\."):
        import_csv(path)
    path.write_text("Image URL,Label\nu,1\n")
    with pytest.raises(WorkbenchError, match="no ASS 1 … ASS n and no Expected column"):
        import_csv(path)


def test_a_row_without_an_expected_label_is_refused(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("Image URL,Expected,ASS 1,ASS 2\nu1,1,1,1\nu2,,1,1\n")
    with pytest.raises(WorkbenchError, match="Row 2 of x.csv has no expected label"):
        import_csv(path)
    path.write_text("Image URL,Expected,ASS 1,ASS 2\nu1,1,1,1\nu2\n")  # a short row
    with pytest.raises(WorkbenchError, match="Row 2 of x.csv has no expected label"):
        import_csv(path)


def test_a_missing_file_or_a_folder_is_refused(tmp_path):
    with pytest.raises(WorkbenchError, match=f"No label file {tmp_path / 'nowhere.csv'}"):
        import_csv(tmp_path / "nowhere.csv")
    with pytest.raises(WorkbenchError, match="Cannot read the label file"):
        import_csv(tmp_path)
