"""`workbench uncertainty`: DeepGini, margin, least confidence and entropy of a test set's inputs, summarised
and ranked, checked against a brute-force numpy softmax of the tiny digits-net; the text report, the CSV,
subsets and project test sets, and bad input ending in a clear message and exit 2. Runs in-process."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from cli_helpers import assert_clean_failure, run_cli, run_json

from workbench.core.models.model_io import load_model
from workbench.core.project.folder import Project

SCORES = ("deepgini", "margin", "least_confidence", "entropy")


def _base(model_file) -> list:
    return ["uncertainty", "--model", model_file, "--data", "digits", "--device", "cpu"]


def _brute_force(model_file, images: np.ndarray) -> dict[str, np.ndarray]:
    """Each score from a numpy softmax of the model's logits, written out from the formulas."""
    with torch.no_grad():
        z = load_model(model_file).module(torch.from_numpy(images)).double().numpy()
    e = np.exp(z - z.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    top2 = np.sort(p, axis=1)[:, -2:]
    plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return {"deepgini": 1 - (p ** 2).sum(axis=1), "margin": top2[:, 1] - top2[:, 0],
            "least_confidence": 1 - p.max(axis=1), "entropy": -plogp.sum(axis=1), "prediction": p.argmax(axis=1)}


def test_summary_and_ranking_match_a_brute_force_softmax(capsys, tmp_path, digits_model_file, digits):
    out_csv = tmp_path / "u.csv"
    r = run_json(capsys, *_base(digits_model_file), "--max-inputs", 90, "--top", 7, "--out", out_csv)
    assert r["testset"] == "digits:test" and r["inputs"] == 90 and r["testset_inputs"] == 359 and r["top"] == 7
    assert list(r["scores"]) == list(SCORES) and r["notes"] == [] and r["csv"] == str(out_csv)
    with open(out_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    index = np.array([int(row["index"]) for row in rows])
    assert len(rows) == 90 and len(set(index)) == 90 and list(rows[0]) == ["index", "id", "label", "prediction",
                                                                           *SCORES]
    test = digits.split("test")
    expected = _brute_force(digits_model_file, test.numpy(index))
    labels = test.labels[index]
    assert r["accuracy"] == pytest.approx(np.mean(expected["prediction"] == labels))
    for name in SCORES:
        values, s = expected[name], r["scores"][name]
        np.testing.assert_allclose([float(row[name]) for row in rows], values, rtol=1e-6, atol=1e-9)
        assert s["stats"]["n"] == 90
        for key, want in (("mean", values.mean()), ("median", np.median(values)), ("min", values.min()),
                          ("max", values.max()), ("q05", np.quantile(values, 0.05)),
                          ("q25", np.quantile(values, 0.25)), ("q75", np.quantile(values, 0.75)),
                          ("q95", np.quantile(values, 0.95)), ("sd", values.std())):
            assert s["stats"][key] == pytest.approx(want, rel=1e-6, abs=1e-9), (name, key)
        # the 7 most uncertain: margin lowest first, the others highest first
        ascending = name == "margin"
        assert s["most_uncertain_first"] == ("ascending" if ascending else "descending")
        ranked = np.sort(values) if ascending else np.sort(values)[::-1]
        listed = s["most_uncertain"]
        assert len(listed) == 7
        np.testing.assert_allclose([e["value"] for e in listed], ranked[:7], rtol=1e-6, atol=1e-9)
        for e in listed:
            k = int(np.flatnonzero(index == e["index"])[0])
            assert e["value"] == pytest.approx(values[k], rel=1e-6, abs=1e-9)
            assert (e["label"], e["prediction"]) == (int(labels[k]), int(expected["prediction"][k]))
            assert e["id"] == f"digits:test#{e['index']}"


def test_text_report_lists_the_most_uncertain_inputs(capsys, digits_model_file):
    rc, out, err = run_cli(capsys, *_base(digits_model_file), "--split", "train", "--first", 40, "--top", 3)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("digits-net on digits:train[first=40] (40 of 40 inputs, as they are); accuracy ")
    for title, order in (("DeepGini", "highest"), ("margin", "lowest"), ("least confidence", "highest"),
                         ("entropy", "highest")):
        assert any(line.startswith(f"{title}: mean ") and " median " in line and "q95" in line for line in lines)
        assert f"  3 most uncertain ({order} {title} first):" in lines
    header = lines.index("  3 most uncertain (lowest margin first):") + 1
    assert lines[header].split() == ["index", "label", "prediction", "value"]
    assert all(int(lines[header + k].split()[0]) < 40 for k in (1, 2, 3))  # indices of the 40 inputs


def test_chosen_scores_a_project_test_set_and_no_list(capsys, tmp_path, digits_model_file, digits):
    project = Project.create(tmp_path / "p", "digits")
    test = digits.split("test")
    project.save_artifact("testset", "few", {"x": test.numpy(np.arange(12)), "y": test.labels[:12]},
                          how="twelve inputs")
    r = run_json(capsys, *_base(digits_model_file), "--project", project.folder, "--testset", "few",
                 "--scores", "margin,entropy", "--top", 0)
    assert r["testset"] == "few" and r["inputs"] == 12 and list(r["scores"]) == ["margin", "entropy"]
    assert all(not s["most_uncertain"] for s in r["scores"].values())
    expected = _brute_force(digits_model_file, test.numpy(np.arange(12)))
    assert r["scores"]["entropy"]["stats"]["mean"] == pytest.approx(expected["entropy"].mean(), rel=1e-9)


def test_a_file_without_a_test_split_is_scored_with_a_note_on_stderr(capsys, tmp_path, digits_model_file, digits):
    train = digits.split("train")
    path = tmp_path / "train-only.npz"
    np.savez(path, x_train=train.numpy(np.arange(15))[:, 0], y_train=train.labels[:15])
    rc, out, err = run_cli(capsys, *_base(digits_model_file), "--testset", path, "--top", 2, "--json")
    assert rc == 0, err
    r = json.loads(out)  # the note stays out of the JSON on stdout
    note = f"test set '{path}' has no test split, so its train split (15 inputs, the only one it has) is used"
    assert r["inputs"] == 15 and r["notes"][0].startswith(note) and f"note: {note}" in err
    expected = _brute_force(digits_model_file, train.numpy(np.arange(15)))
    assert r["scores"]["deepgini"]["stats"]["max"] == pytest.approx(expected["deepgini"].max(), rel=1e-6)


@pytest.mark.parametrize("extra, words", [
    (["--scores", "deepgini,variance"], ["Unknown uncertainty score 'variance'", "least_confidence"]),
    (["--scores", "margin,margin"], ["--scores names an item twice"]),
    (["--testset", "test", "--split", "train"], ["--testset and --split both name what to score"]),
    (["--testset", "nowhere"], ["No test set 'nowhere'"]),
    (["--first", "3", "--class", "1"], ["--first and --class both choose a subset"]),
    (["--top", "-1"], ["--top"]),
])
def test_bad_input_exits_2(capsys, digits_model_file, extra, words):
    rc, out, err = run_cli(capsys, *_base(digits_model_file), *extra)
    assert_clean_failure(rc, err, *words)
    assert out == ""
