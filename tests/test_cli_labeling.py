"""`workbench label-stats`, `label-export` and `label-import` on a project labelled by three raters, the
human-validated subsets as test sets (listed and resolved by name), and bad input that ends in a clear
message and a non-zero exit, never a traceback."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from cli_helpers import assert_clean_failure, run_cli, run_json

from workbench.core.labeling.label_store import open_store
from workbench.core.labeling.labelled_sets import list_testsets, resolve
from workbench.core.labeling.project_studies import prepare_study, start_session
from workbench.core.project.folder import Project
from workbench.core.testsets import save_testset

N = 20
NAME = "gen"


def answers_of(rater: str, item, k: int) -> str:
    """ann keeps the label everywhere; bob calls every third item invalid; cy gives the model's label on
    every fourth."""
    if rater == "ann":
        return item.expected
    if rater == "bob":
        return "invalid" if k % 3 == 0 else item.expected
    return item.predicted if k % 4 == 0 else item.expected


@pytest.fixture(scope="module")
def project(tmp_path_factory, fashion_slice, slice_dir):
    folder = tmp_path_factory.mktemp("labelled") / "project"
    project = Project.create(folder, str(slice_dir))
    test = fashion_slice.split("test")
    labels = test.labels[:N].astype(np.int64)
    predicted = (labels + 1) % 10
    predicted[-4:] = labels[-4:]  # not misbehaviours: not items
    arrays = {"x": test.numpy()[:N], "y": labels, "generator": np.array(["vae-a", "gan-b"] * (N // 2)),
              "kind": np.array(["vae", "gan"] * (N // 2)), "extent": np.array(["high"] * N),
              "generations": np.arange(N, dtype=np.int64), "predicted": predicted,
              "proxy_selforacle_invalid": np.arange(N) % 5 == 0, "proxy_daiv_invalid": np.zeros(N, bool),
              "proxy_oracle_verdict": np.array(["preserved"] * N)}
    save_testset(project, NAME, arrays, role="generated", dataset=str(slice_dir))
    setup = prepare_study(project, NAME)
    with open_store(project) as store:
        for rater in ("ann", "bob", "cy"):
            s = start_session(project, store, setup, rater)
            k = 0
            while not s.done:
                entry = s.entry
                given = answers_of(rater, s.items[entry.index], k) if entry.kind == "item" else None
                s.answer(str(s.check_class(entry)) if entry.kind == "check" else given)
                k += 1
    return Project.open(folder), setup


def test_label_stats_counts_what_the_raters_said(capsys, project):
    folder, setup = project[0].folder, project[1]
    out = run_json(capsys, "label-stats", "--project", folder, "--testset", NAME)
    assert out["raters"] == 3 and out["items"] == 16 == len(setup.items)
    overall = out["groups"]["all"]
    # By hand: bob's invalid on items k = 0, 3, 6, … of his queue makes those N/A; all others valid and kept.
    assert overall["rates"]["decided"] == 16
    validity = overall["consensus"]["validity"]
    assert validity.get("no", 0) == 0 and validity["yes"] + validity["N/A"] == 16
    assert [a["measure"] for a in overall["agreement"]["validity"]] == ["Fleiss' κ", "Krippendorff's α"]
    assert {p["proxy"] for p in overall["proxies"]} == {"SelfOracle", "DAIV", "oracle classifier"}
    assert {c["rater"]: c["flagged"] for c in out["checks"]} == {"ann": False, "bob": False, "cy": False}
    rc, text, _ = run_cli(capsys, "label-stats", "--project", folder, "--testset", NAME)
    assert rc == 0 and "Fleiss' κ" in text and "proxy SelfOracle" in text and "vae-a high" in text


def test_export_then_import_recomputes_the_same_consensus(capsys, project, tmp_path):
    folder = project[0].folder
    path = tmp_path / "labels.csv"
    run_json(capsys, "label-export", "--project", folder, "--testset", NAME, "--out", path)
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 16 and "ASS 3" in rows[0] and "Validity (majority)" in rows[0]
    imported = run_json(capsys, "label-import", path)
    assert imported["mismatches"] == [] and imported["rows"] == 16
    stats = run_json(capsys, "label-stats", "--project", folder, "--testset", NAME)
    assert imported["groups"]["all"]["consensus"] == stats["groups"]["all"]["consensus"]
    agreement = imported["groups"]["all"]["agreement"]
    assert agreement == stats["groups"]["all"]["agreement"]
    # A consensus cell changed by hand is found.
    rows[2]["Validity?"] = "no" if rows[2]["Validity?"] != "no" else "yes"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    changed = run_json(capsys, "label-import", path)
    assert [(m["row"], m["column"]) for m in changed["mismatches"]] == [(3, "Validity?")]
    rc, text, _ = run_cli(capsys, "label-import", path)
    assert rc == 0 and "row 3" in text and "differ" in text
    # JSON: everything, answers with their times.
    out = tmp_path / "labels.json"
    run_json(capsys, "label-export", "--project", folder, "--testset", NAME, "--out", out)
    document = json.loads(out.read_text())
    assert len(document["items"]) == 16 and len(document["raters"]) == 3
    assert all(len(i["answers"]) == 3 and all(a["seconds"] is not None for a in i["answers"])
               for i in document["items"])
    assert document["attention_checks"] and document["settings"]["check_every"] == 10


def test_human_validated_subsets_are_test_sets(project):
    project_, setup = project
    listed = {i.name for i in list_testsets(project_)}
    assert {f"{NAME}[valid]", f"{NAME}[valid-preserving]", f"{NAME}[valid-misbehaviours]"} <= listed
    with open_store(project_) as store:
        current = store.current(NAME)
    by_item: dict[str, list[str]] = {}
    for row in current:
        if row.check_class is None:
            by_item.setdefault(row.input_id, []).append(row.answer)
    parent = resolve(project_, NAME)
    expected_valid = [i for i in range(N) if parent.ids[i] in by_item and "invalid" not in by_item[parent.ids[i]]]
    valid = resolve(project_, f"{NAME}[valid]")
    assert valid.columns["parent_index"].tolist() == expected_valid
    kept = [i for i in expected_valid if all(a == str(parent.labels[i]) for a in by_item[parent.ids[i]])]
    assert resolve(project_, f"{NAME}[valid-preserving]").columns["parent_index"].tolist() == kept
    # Every item is a misbehaviour, so valid misbehaviours are the valid, label-preserving items.
    assert resolve(project_, f"{NAME}[valid-misbehaviours]").columns["parent_index"].tolist() == kept


def test_bad_input_is_refused_clearly(capsys, project, tmp_path):
    folder = project[0].folder
    rc, _, err = run_cli(capsys, "label-stats", "--testset", NAME)
    assert_clean_failure(rc, err, "--project")
    rc, _, err = run_cli(capsys, "label-stats", "--project", folder, "--testset", "nothing-like-it")
    assert_clean_failure(rc, err, "No test set")
    rc, _, err = run_cli(capsys, "label-stats", "--project", folder, "--testset", f"{folder}:nope")
    assert rc != 0 and "Traceback" not in err
    rc, _, err = run_cli(capsys, "label-export", "--project", folder, "--testset", NAME, "--out", tmp_path / "x.txt")
    assert_clean_failure(rc, err, "F.csv or F.json")
    rc, _, err = run_cli(capsys, "label-export", "--project", folder, "--testset", NAME,
                         "--out", tmp_path / "missing" / "x.csv")
    assert_clean_failure(rc, err, "does not exist")
    for content, words in ((b"\xff\xfe\x00garbage", "Cannot read"), (b"a,b\n1,2\n", "not a label file"),
                           (b"ASS 1,ASS 2\nDigit 1,Digit 2\n", "Expected")):
        bad = tmp_path / "bad.csv"
        bad.write_bytes(content)
        rc, _, err = run_cli(capsys, "label-import", bad)
        assert_clean_failure(rc, err, words)
    rc, _, err = run_cli(capsys, "label-import", tmp_path / "absent.csv")
    assert_clean_failure(rc, err, "No label file")
    # A damaged store is reported by every command and left as it was.
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(folder, copy)
    store = copy / "labels.sqlite"
    for extra in ("labels.sqlite-wal", "labels.sqlite-shm"):
        (copy / extra).unlink(missing_ok=True)
    store.write_bytes(b"not a database at all" * 100)
    before = store.read_bytes()
    rc, _, err = run_cli(capsys, "label-stats", "--project", copy, "--testset", NAME)
    assert_clean_failure(rc, err, "damaged", "left untouched")
    assert store.read_bytes() == before
