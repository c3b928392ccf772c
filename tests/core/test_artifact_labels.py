"""Readable labels of artifacts from their index entries, and exporting an artifact's files."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from workbench.core.artifact_labels import created_at, describe_artifact, kind_heading, layers_text, short_time
from workbench.core.errors import WorkbenchError

NOW = datetime(2025, 6, 12, 15, 30, tzinfo=timezone.utc).astimezone()


def entry(kind: str, **how) -> dict:
    made = NOW.replace(hour=14, minute=2)
    return {"kind": kind, "file": f"artifacts/{kind}/x.h5",
            "provenance": {"kind": kind, "created": made.strftime("%Y-%m-%dT%H:%M:%S%z"), **how}}


def test_the_time_is_as_short_as_it_can_be():
    assert short_time(NOW.replace(hour=14, minute=2), NOW) == "14:02"
    assert short_time(NOW - timedelta(days=40), NOW) == f"3 May {NOW:%H:%M}"
    assert short_time(NOW.replace(year=2023, month=11, day=3), NOW) == "3 Nov 2023"
    assert short_time(None, NOW) == ""


def test_each_kind_says_what_model_layer_set_and_when():
    fit = entry("coverage-fit", model="lenet5", dataset="fashion-mnist", criterion="idc",
                train={"dataset": "fashion-mnist", "split": "train", "images": 2000},
                state={"identity": {"criterion": "idc", "params": {"layer": "fc1", "m": 6}}})
    label = describe_artifact("coverage-fit-lenet5-idc-f8cf05cd", fit, now=NOW)
    assert label.title == "IDC m=6 · lenet5 · fc1 · fashion-mnist:train · 14:02"
    assert (label.heading, label.noun) == ("Coverage fits", "fitted coverage criterion")
    assert label.details[0] == "coverage-fit-lenet5-idc-f8cf05cd"
    assert "IDC fitted on fashion-mnist:train, 2,000 inputs, for lenet5" in label.details
    # The project's only model and dataset go unsaid in the title, never in the tooltip.
    short = describe_artifact("x", fit, only_model="lenet5", only_dataset="fashion-mnist", now=NOW)
    assert short.title == "IDC m=6 · fc1 · train · 14:02" and "for lenet5" in short.details[1]

    coverage = entry("coverage", model="lenet5", dataset="fashion-mnist", criterion="lsa",
                     identity={"params": {"layers": ["conv1", "pool1", "conv2", "fc1"]}},
                     test={"dataset": "fashion-mnist", "split": "test", "images": 1000, "measured": 874})
    assert describe_artifact("c", coverage, only_model="lenet5", only_dataset="fashion-mnist",
                             now=NOW).title == "LSC · 4 layers · test (874) · 14:02"
    evaluation = entry("evaluation", model="lenet5", dataset="fashion-mnist", split="test", accuracy=0.8873, n=1000)
    assert describe_artifact("e", evaluation, only_dataset="fashion-mnist", now=NOW).title == \
        "88.7 % on test · lenet5 · 14:02"
    importance = entry("importance", model="lenet5", dataset="fashion-mnist", split="train", layer="fc2",
                       rule={"conv": {"name": "lrp-0"}, "dense": {"name": "lrp-0"}, "maxpool": "winner"}, correct=1808)
    label = describe_artifact("i", importance, only_model="lenet5", only_dataset="fashion-mnist", now=NOW)
    assert label.title == "LRP-0 · fc2 · train · 14:02" and "1,808 correctly classified" in label.details[1]
    ablation = entry("ablation", model="lenet5", dataset="fashion-mnist", split="test", layer="fc2", mode="mean",
                     important_neurons=[1, 2, 3], baseline_accuracy=0.887, important_accuracy=0.5)
    label = describe_artifact("a", ablation, only_model="lenet5", only_dataset="fashion-mnist", now=NOW)
    assert label.title == "Top 3 set to mean · fc2 · test · 14:02" and "88.7 % → 50.0 %" in label.details[1]
    run = entry("robustness", what="experiment", model="lenet5", dataset="fashion-mnist", rows=[{}] * 12)
    assert describe_artifact("r", run, now=NOW).title == "Retraining (12 runs) · lenet5 · 14:02"


def test_unknown_kinds_and_bare_entries_fall_back_to_the_name():
    label = describe_artifact("my-plugin-result", {"kind": "saliency-map", "file": "artifacts/s/x.h5"}, now=NOW)
    assert (label.heading, label.title) == ("Saliency map", "my-plugin-result")
    assert kind_heading("coverage") == "Coverage"
    assert layers_text(["fc1", "fc2"]) == "fc1 + fc2" and layers_text("fc1") == "fc1" and layers_text(None) == ""


def test_export_copies_a_result_with_the_fit_it_needs(tmp_project, tmp_path):
    project = tmp_project
    project.save_artifact("coverage-fit", "fit", {"fit.a": np.arange(3)}, criterion="idc")
    project.save_artifact("coverage", "result", {"cover.b": np.arange(4)}, criterion="idc", fit_artifact="fit")
    assert project.needed_by("fit") == ["result"] and project.needed_by("result") == []
    written = project.export_artifact("result", tmp_path / "out")
    assert [p.name for p in written] == [p.name for p in project.artifact_files("result")]
    assert all(w.read_bytes() == a.read_bytes() for w, a in zip(written, project.artifact_files("result")))
    assert len(written) == 2 and not list((tmp_path / "out").glob(".*.tmp"))
    with pytest.raises(WorkbenchError, match="no result named"):
        project.export_artifact("gone", tmp_path / "out")
    project.settings["artifacts"]["outside"] = {"kind": "coverage", "file": "../../etc/passwd"}
    with pytest.raises(WorkbenchError, match="outside the project"):
        project.export_artifact("outside", tmp_path / "out")


def test_created_at_reads_the_stored_time_forms_and_refuses_the_rest():
    with_offset = created_at({"created": "2026-12-01T10:00:00+0000"})
    assert with_offset == datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    assert created_at({"created": "2026-12-01T10:00:00+01:00"}) == datetime(2026, 12, 1, 9, tzinfo=timezone.utc)
    naive = created_at({"created": "2026-12-01T10:00:00"})
    assert naive is not None and naive.tzinfo is not None and naive.replace(tzinfo=None) == datetime(2026, 12, 1, 10)
    for bad in ({"created": "yesterday"}, {"created": ""}, {"created": 17}, {}):
        assert created_at(bad) is None
