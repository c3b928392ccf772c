"""`compare_testsets` end to end on real small sets: every figure checked against a direct computation
(coverage by the criterion itself, accuracy and FOL by the model), profiles stored and read back, the
bootstrap reproducible for a seed, validity-aware coverage, overlaps and the inputs only one set reaches,
the reports (HTML with its plots, CSV, JSON), and bad input."""

from __future__ import annotations

import csv
import html
import json
import re

import numpy as np
import pytest

from workbench.core.comparison.compare import compare_testsets
from workbench.core.comparison.items import covered_items
from workbench.core.comparison.report import DIFFERENCE_COLUMNS, verdict, write_csv, write_html, write_json
from workbench.core.coverage.measure import measure_coverage
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.project.folder import Project
from workbench.core.robustness.scores import score_inputs
from workbench.core.sampling import seeded_sample
from workbench.core.testsets import resolve, save_testset

CRITERIA = ("idc", "nc", "kmnc", "nbc", "snac", "tknc")
NAMES = ["test[first=120]", "test[misclassified]", "gen"]


@pytest.fixture(scope="module")
def setting(tmp_path_factory, fashion_tiny, lenet5_fashion):
    project = Project.create(tmp_path_factory.mktemp("compare") / "p", "fashion-tiny")
    test = fashion_tiny.split("test")
    rng = np.random.default_rng(0)
    x = np.clip(test.numpy(np.arange(40)) + rng.normal(0, 0.15, (40, 1, 28, 28)).astype(np.float32), 0, 1)
    arrays = {"x": x, "y": test.labels[:40].astype(np.int64), "generator": np.array(["vae-a", "gan-b"] * 20),
              "kind": np.array(["vae", "gan"] * 20), "extent": np.array(["high"] * 40),
              "predicted": test.labels[:40].astype(np.int64),
              "proxy_selforacle_invalid": np.arange(40) % 4 == 0, "proxy_daiv_invalid": np.arange(40) % 5 == 0}
    save_testset(project, "gen", arrays, role="generated", dataset="fashion-tiny")
    ctx = JobContext("cpu")
    comparison = compare_testsets(ctx, project, NAMES, lenet5_fashion, fashion_tiny, "fc2", 4, CRITERIA,
                                  resamples=200, seed=3, novelty_sample=150)
    return project, comparison


def test_every_figure_equals_a_direct_computation(setting, fashion_tiny, lenet5_fashion):
    project, comparison = setting
    ctx = JobContext("cpu")
    for summary in comparison.sets:
        testset = resolve(project, summary.name, fashion_tiny, model=lenet5_fashion)
        assert summary.size == len(testset)
        direct = measure_coverage(ctx, lenet5_fashion, fashion_tiny, "fc2", list(CRITERIA), test_split=testset, m=4,
                                  seed=3)
        for key in CRITERIA:
            assert summary.figures[key].covered == direct[key].value.covered, (summary.name, key)
            assert summary.figures[key].total == direct[key].value.total
        scores = score_inputs(ctx, lenet5_fashion, testset.numpy(), testset.labels, x0=testset.numpy(), eps=0.1)
        predictions = scores["probs_matrix"].argmax(axis=1)
        assert summary.figures["accuracy"].value == pytest.approx(np.mean(predictions == testset.labels))
        assert summary.misbehaviours == int(np.sum(predictions != testset.labels))
        assert summary.figures["fol_mean"].value == pytest.approx(float(np.mean(scores["fol_linf"])), rel=1e-6)
        assert summary.figures["fol_median"].value == pytest.approx(float(np.median(scores["fol_linf"])), rel=1e-6)
        # novelty: the nearest of the 150 sampled training inputs, by a plain loop over a few inputs
        sample = seeded_sample(400, 150, [0, 0x4E0E])  # the novelty sample does not depend on the seed
        train = fashion_tiny.split("train").numpy(sample).reshape(150, -1).astype(np.float64)
        profile = comparison.profiles[summary.name]
        for i in range(5):
            x = testset.numpy(np.array([i])).reshape(1, -1).astype(np.float64)
            nearest = min(float(np.sqrt(((row - x) ** 2).sum())) for row in train)
            assert profile.novelty[i] == pytest.approx(nearest, rel=1e-4, abs=1e-4)
        for figure in summary.figures.values():
            if figure.low is not None:
                assert figure.low <= figure.high
    misclassified = comparison.sets[1]
    assert misclassified.figures["accuracy"].value == 0.0


def test_validity_aware_coverage_counts_the_valid_inputs_only(setting, fashion_tiny, lenet5_fashion):
    project, comparison = setting
    gen = next(s for s in comparison.sets if s.name == "gen")
    assert gen.validity == "proxy"
    valid = ~((np.arange(40) % 4 == 0) | (np.arange(40) % 5 == 0))
    assert gen.valid_inputs == int(valid.sum())
    assert gen.figures["validity"].value == pytest.approx(valid.mean())
    items = comparison.profiles["gen"].items["idc"]
    assert gen.figures["idc_valid"].covered == len(covered_items(items, np.flatnonzero(valid)))
    assert gen.figures["idc_valid"].covered <= gen.figures["idc"].covered
    assert "idc_valid" not in comparison.sets[0].figures  # a split has no validity judgement


def test_overlaps_and_the_inputs_only_one_set_reaches(setting):
    _, comparison = setting
    for criterion in CRITERIA:
        covered = {n: set(covered_items(p.items[criterion]).tolist()) for n, p in comparison.profiles.items()}
        overlap = comparison.overlaps[criterion]
        assert sum(overlap["membership"].values()) == len(set.union(*covered.values()))
        for summary in comparison.sets:
            others = set.union(*(c for n, c in covered.items() if n != summary.name))
            only = covered[summary.name] - others
            assert overlap["only"][summary.name] == len(only)
            rows = summary.unique_inputs[criterion]
            items = comparison.profiles[summary.name].items[criterion]
            expected = [i for i in range(items.shape[0]) if set(items[i].indices.tolist()) & only]
            assert rows.tolist() == expected


def test_profiles_are_stored_and_read_back_and_the_bootstrap_is_reproducible(setting, fashion_tiny,
                                                                             lenet5_fashion):
    project, first = setting
    again = compare_testsets(JobContext("cpu"), Project.open(project.folder), NAMES, lenet5_fashion, fashion_tiny,
                             "fc2", 4, CRITERIA, resamples=200, seed=3, novelty_sample=150)
    assert all(s.profile_reused for s in again.sets) and not any(s.profile_reused for s in first.sets)
    assert all(s.figures_reused for s in again.sets) and not any(s.figures_reused for s in first.sets)
    assert json.dumps(again.to_dict()["sets"][0]["figures"]) == json.dumps(first.to_dict()["sets"][0]["figures"])
    assert again.to_dict()["differences"] == first.to_dict()["differences"]
    other = compare_testsets(JobContext("cpu"), project, NAMES, lenet5_fashion, fashion_tiny, "fc2", 4, CRITERIA,
                             resamples=200, seed=4, novelty_sample=150)
    assert other.sets[0].figures["accuracy"].low != first.sets[0].figures["accuracy"].low or \
        other.sets[0].figures["nc"].low != first.sets[0].figures["nc"].low


def test_differences_are_marked_by_their_intervals(setting):
    _, comparison = setting
    for d in comparison.to_dict()["differences"]:
        assert d["low"] <= d["high"]
        if d["supported"]:
            assert (d["low"] > 0 and d["difference"] > 0) or (d["high"] < 0 and d["difference"] < 0)
        assert not (d["supported"] and d["reversed"])
        if d["figure"] in CRITERIA and "size_matched" in d:
            matched = d["size_matched"]
            assert matched["size"] == min(s.size for s in comparison.sets if s.name in (d["a"], d["b"]))


def test_the_reports(setting, tmp_path):
    _, comparison = setting
    data = comparison.to_dict()
    page = write_html(comparison, tmp_path / "r.html").read_text()
    assert len(re.findall(r'<img alt="[a-z]+" src="data:image/png;base64,', page)) == 4
    assert all(name in page for name in NAMES) and "Provenance" in page and "model_fingerprint" in page
    rows = list(csv.reader(open(write_csv(data, tmp_path / "r.csv"), newline="")))
    assert rows[0][:4] == ["set", "figure", "title", "value"]
    assert any(r[:2] == ["gen", "idc"] for r in rows)
    document = json.loads(write_json(data, tmp_path / "r.json").read_text())
    assert [s["name"] for s in document["sets"]] == comparison.names() == ["fashion-tiny:test[first=120]",
                                                                          "fashion-tiny:test[misclassified]", "gen"]


def test_the_differences_table_puts_each_verdict_beside_its_interval(setting, tmp_path):
    """The HTML report's Differences table (and the Compare view's, built from the same rows): the columns
    in `DIFFERENCE_COLUMNS` order, and each row's verdict is its own difference's, read from the page."""
    _, comparison = setting
    differences = comparison.to_dict()["differences"]
    page = write_html(comparison, tmp_path / "r.html").read_text()
    table = re.search(r"<h2>Differences</h2>.*?<table>(.*?)</table>", page, re.S).group(1)
    header = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table)]
    cells = [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", row)]
             for row in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
    assert header == list(DIFFERENCE_COLUMNS) == ["figure", "sets", "difference", "95 % interval", "supported",
                                                  "size-matched"]
    assert len(cells) == len(differences) > 0
    for row, d in zip(cells, differences):
        assert row[1] == f"{d['a']} − {d['b']}" and row[4] == verdict(d)
        assert row[3].startswith("—" if d["low"] is None else "[")
        assert ("drawn to" if d.get("size_matched") else "—") in row[5]


def test_bad_input_is_refused(setting, fashion_tiny, lenet5_fashion):
    project, _ = setting
    ctx = JobContext("cpu")
    for names, words in ((["gen"], "two or more"), (["gen", "gen"], "twice"), (["gen", "nothing"], "No test set")):
        with pytest.raises(WorkbenchError, match=words):
            compare_testsets(ctx, project, names, lenet5_fashion, fashion_tiny, "fc2", 4, CRITERIA, resamples=50)
    with pytest.raises(WorkbenchError, match="Cannot compare by"):
        compare_testsets(ctx, project, NAMES, lenet5_fashion, fashion_tiny, "fc2", 4, ("lsa",), resamples=50)
    with pytest.raises(WorkbenchError, match="resamples"):
        compare_testsets(ctx, project, NAMES, lenet5_fashion, fashion_tiny, "fc2", 4, CRITERIA, resamples=2)


def test_human_labels_give_the_validity_and_label_preservation_rates(setting, fashion_tiny, lenet5_fashion):
    from workbench.core.labeling.label_store import open_store

    project, _ = setting
    gen = resolve(project, "gen", fashion_tiny)
    with open_store(project) as store:  # two raters on the first 10 inputs: valid and kept, valid and another
        store.update_study("gen", {"all_inputs": True})  # the set has no misbehaviours: label every input
        for i in range(10):  # class, or invalid, by turns
            for rater, answer in (("a", str(gen.labels[i])), ("b", [str(gen.labels[i]), str((gen.labels[i] + 1) % 10),
                                                                     "invalid"][i % 3])):
                store.answer("gen", str(gen.ids[i]), rater, answer, session="s")
    comparison = compare_testsets(JobContext("cpu"), project, ["test[first=120]", "gen"], lenet5_fashion,
                                  fashion_tiny, "fc2", 4, ("idc",), resamples=100, novelty_sample=150)
    summary = comparison.sets[1]
    # with all_inputs, all 40 inputs are items; 10 are decided
    assert summary.validity == "human"
    valid = [i for i in range(10) if i % 3 != 2]  # both raters valid
    kept = [i for i in range(10) if i % 3 == 0]  # both chose the label
    assert summary.figures["validity"].value == pytest.approx(len(valid) / 10)
    assert summary.figures["preservation"].value == pytest.approx(len(kept) / 10)
    assert summary.valid_inputs == len(valid)
