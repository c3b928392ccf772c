"""`workbench coverage` (issue item 5): every criterion through --json, the text report, --testset variants,
--per-class, project store and reuse, saved criterion states, the IDC fidelity properties, and bad input
ending in a clear message, exit 2 and no traceback. Runs the bundled lenet5-fashion on the vendored
2,000/1,000 Fashion-MNIST slice."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import assert_clean_failure, run_cli, run_json

from workbench.cli import EXIT_CANCELLED, EXIT_ERROR, main
from workbench.core.project.folder import Project

REPO = Path(__file__).resolve().parent.parent
SLICE = REPO / "tests" / "data" / "fashion-mnist-slice"
BASE = ["coverage", "--model", "lenet5-fashion", "--data", SLICE, "--device", "cpu"]
EVERY = "idc,nc,kmnc,nbc,snac,tknc,tknp,lsa,dsa,mdsa"
COUNTS = {"tknp", "mdsa"}  # counts without a denominator (MDSA uses the width variant of SC)


def save_npz(path, train, test, class_names, train_rows=None, test_rows=None):
    """An .npz dataset from (images, labels) pairs, optionally subset."""
    (xt, yt), (xs, ys) = train, test
    rows = slice(None) if train_rows is None else train_rows
    rows_test = slice(None) if test_rows is None else test_rows
    np.savez(path, x_train=xt[rows][:, 0], y_train=yt[rows], x_test=xs[rows_test][:, 0], y_test=ys[rows_test],
             class_names=np.array(class_names))
    return path


@pytest.fixture(scope="module")
def slice_arrays():
    from workbench.core.data.registry import load_dataset

    data = load_dataset(str(SLICE))
    train, test = data.split("train"), data.split("test")
    return (np.asarray(train.images), train.labels), (np.asarray(test.images), test.labels), list(data.class_names)


@pytest.fixture(scope="module")
def every_run(tmp_path_factory):
    """Every criterion with a project and saved states, --json, captured once for several tests."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    tmp = tmp_path_factory.mktemp("coverage")
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        rc = main([str(a) for a in [*BASE, "--criteria", EVERY, "--json", "--project", tmp / "project",
                                     "--save-state", tmp / "states"]])
    assert rc == 0, stderr.getvalue()
    return json.loads(stdout.getvalue()), tmp


# --- every criterion ----------------------------------------------------------------------------------

def test_every_criterion_reports_its_value_in_json(every_run):
    result, _ = every_run
    assert result["model"] == "lenet5-fashion" and result["layer"] == "fc2" and result["m"] == 6
    assert result["testset"] == "fashion-mnist-slice:test" and result["test_inputs"] == 1000
    assert result["train_inputs"] == 2000 and result["seed"] == 0 and result["device"] == "cpu"
    assert list(result["criteria"]) == EVERY.split(",")
    for name, r in result["criteria"].items():
        assert {"value", "percent", "covered", "total", "warnings", "curve", "identity", "reused"} <= set(r), name
        assert r["inputs"] == 1000 and r["reused"] is False and r["artifact"], name
        if name in COUNTS:
            assert r["value"] is None and r["total"] is None and r["covered"] > 0, name
        else:
            assert 0.0 <= r["value"] <= 1.0 and r["covered"] <= r["total"], name
            assert r["value"] == pytest.approx(r["covered"] / r["total"]) and r["percent"] == pytest.approx(
                100 * r["value"]), name
        covered = [point[1] for point in r["curve"]]
        assert covered == sorted(covered) and covered[-1] == r["covered"] and r["curve"][-1][0] == 1000, name
    c = result["criteria"]
    assert c["nc"]["total"] == 258 and c["kmnc"]["total"] == 258 * 1000 and c["nbc"]["total"] == 2 * 258
    assert c["nc"]["layers"] == {"conv1": 6, "pool1": 6, "conv2": 16, "pool2": 16, "fc1": 120, "fc2": 84, "fc3": 10}
    assert all(n.split("[")[0] in c["kmnc"]["layers"] for n in c["kmnc"]["never_coverable"])
    for name in ("lsa", "dsa", "mdsa"):
        assert c[name]["layers"] == ["fc2"] and c[name]["sa"]["inputs"] == 1000 and c[name]["sa"]["scored"] > 0
    assert c["lsa"]["sc"] == {"buckets": 1000, "upper": 2000.0, "width": None}
    assert c["dsa"]["sc"]["upper"] == 2.0 and c["mdsa"]["sc"]["width"] == 10.0
    assert isinstance(c["lsa"]["singular_classes"], dict)


def test_idc_reports_clusters_incc_and_the_covered_combinations(every_run):
    idc = every_run[0]["criteria"]["idc"]
    ks = idc["cluster_counts"]
    assert len(ks) == len(idc["neurons"]) == len(idc["centroids"]) == 6 and all(1 <= k <= 4 for k in ks)
    assert idc["incc"] == math.prod(ks) == idc["total"]
    assert sum(idc["k_histogram"].values()) == 6 and idc["k_histogram"].get("2", 0) >= 4
    relevance = idc["relevance"]
    assert relevance == sorted(relevance, reverse=True) and idc["layer"] == "fc2"
    combos = idc["covered_combinations"]
    assert len(combos) == idc["covered"] and sum(c["inputs"] for c in combos) == 1000
    codes = [c["code"] for c in combos]
    assert codes == sorted(set(codes))
    for combo in combos:
        assert all(0 <= i < k for i, k in zip(combo["clusters"], ks))
        assert combo["centroids"] == [idc["centroids"][j][i] for j, i in enumerate(combo["clusters"])]
        code = 0
        for i, k in zip(combo["clusters"], ks):  # mixed radix, the most important neuron most significant
            code = code * k + i
        assert code == combo["code"]
    assert all(c["centroids"] == sorted(c["centroids"]) for c in idc["clusters"])


# --- per layer and the activation point -------------------------------------------------------------------

ITEMS_PER_NEURON = {"nc": 1, "kmnc": 1000, "nbc": 2, "snac": 1, "tknc": 1}
POST = {"conv1": "relu1", "conv2": "relu2", "fc1": "relu3", "fc2": "relu4"}  # the ReLU after each layer


def test_per_layer_counts_sum_to_each_criterion_s_totals(every_run):
    c = every_run[0]["criteria"]
    for name, items in ITEMS_PER_NEURON.items():
        r = c[name]
        per_layer = r["per_layer"]
        assert list(per_layer) == list(r["layers"]) and r["point"] == "post", name
        assert sum(v["covered"] for v in per_layer.values()) == r["covered"], name
        assert sum(v["total"] for v in per_layer.values()) == r["total"], name
        for layer, v in per_layer.items():
            assert v["total"] == r["layers"][layer] * items and 0 <= v["covered"] <= v["total"], (name, layer)
            assert v["value"] == pytest.approx(v["covered"] / v["total"]), (name, layer)
    assert 0 < c["nc"]["per_layer"]["fc1"]["covered"] < c["nc"]["per_layer"]["fc1"]["total"]
    for name in ("idc", "tknp", "lsa", "dsa", "mdsa"):  # one layer, or items (patterns, SA) spanning the layers
        assert c[name]["per_layer"] is None, name
    assert c["idc"]["point"] == "post"


def _nc_by_hand(layers: list[str], point: str, first: int) -> dict[str, int]:
    """NC per layer of the first test inputs, from forward hooks: each input's layer tensor min-max scaled,
    conv channels averaged, covered above 0.75; "post" reads the ReLU after a layer."""
    import torch

    from workbench.core.data.registry import load_dataset
    from workbench.core.models.model_io import load_model

    module = load_model("lenet5-fashion").module.eval()
    x = load_dataset(str(SLICE)).split("test").tensor(slice(0, first))
    taken = {}
    hooks = [getattr(module, POST.get(name, name) if point == "post" else name).register_forward_hook(
        lambda _m, _i, out, name=name: taken.__setitem__(name, out.detach().double().numpy().copy()))
        for name in layers]
    with torch.no_grad():
        module(x)
    for hook in hooks:
        hook.remove()
    counts = {}
    for name in layers:
        raw = taken[name]
        flat = raw.reshape(len(raw), -1)
        lo, hi = flat.min(axis=1, keepdims=True), flat.max(axis=1, keepdims=True)
        assert (hi > lo).all()
        values = raw.mean(axis=(2, 3)) if raw.ndim == 4 else raw
        counts[name] = int(((values - lo) / (hi - lo) > 0.75).any(axis=0).sum())
    return counts


@pytest.mark.parametrize("preset, point, measured", [("deepimportance", None, "post"), ("deepimportance", "pre", "pre"),
                                                     ("nlc", None, "pre"), ("nlc", "post", "post")])
def test_point_sets_where_the_preset_s_layers_are_read(capsys, preset, point, measured):
    extra = ["--point", point] if point else []
    r = run_json(capsys, *BASE, "--criteria", "nc", "--first", "30", "--preset", preset, *extra)
    nc = r["criteria"]["nc"]
    assert nc["point"] == measured and r["point"] == (point or "post")  # the IDC/SA layer's point
    layers = list(nc["layers"])
    assert layers == (["conv1", "pool1", "conv2", "pool2", "fc1", "fc2", "fc3"] if preset == "deepimportance"
                      else ["conv1", "conv2", "fc1", "fc2", "fc3"])
    by_hand = _nc_by_hand(layers, measured, 30)
    assert {name: v["covered"] for name, v in nc["per_layer"].items()} == by_hand
    assert by_hand != _nc_by_hand(layers, "pre" if measured == "post" else "post", 30)  # the point matters here
    rc, out, err = run_cli(capsys, *BASE, "--criteria", "nc", "--first", "30", "--preset", preset, *extra)
    assert rc == 0, err
    line = next(line for line in out.splitlines() if line.startswith("NC "))
    assert line.endswith(f"({preset} preset, {nc['neurons']} neurons"
                         + (f", {measured}-activation)" if point and point != ("pre" if preset == "nlc" else "post")
                            else ")"))
    first = nc["per_layer"][layers[0]]
    assert f"  per layer: {layers[0]} {first['covered']} / {first['total']} (" in out


def test_text_output_prints_percent_and_counts(capsys):
    argv = [*BASE, "--criteria", "idc,nc,tknp,mdsa", "--max-inputs", "300"]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 0, err
    result = run_json(capsys, *argv)["criteria"]
    idc, nc = result["idc"], result["nc"]
    lines = out.splitlines()
    assert lines[0].startswith("lenet5-fashion on fashion-mnist-slice:test (300 test inputs)")
    assert f"IDC   {idc['percent']:.1f} % — {idc['covered']} / {idc['incc']}   (layer fc2, m = 6)" in lines
    assert f"NC    {nc['percent']:.1f} % — {nc['covered']} / 258   (deepimportance preset, 258 neurons)" in lines
    assert f"TKNP  {result['tknp']['covered']} patterns" in out
    assert f"MDSA  {result['mdsa']['covered']} distinct SA buckets of width 10" in out
    assert "  important neurons   " + ", ".join(map(str, idc["neurons"])) in lines
    assert f"  clusters per neuron {', '.join(map(str, idc['cluster_counts']))}   |INCC| = {idc['incc']}" in lines
    first = idc["covered_combinations"][0]
    assert re.search(rf"^    {''.join(map(str, first['clusters']))}: {first['inputs']}\b", out, re.MULTILINE)
    assert re.search(r"^Took \d+\.\d s on cpu\.$", out, re.MULTILINE)


# --- per class, test sets, project -----------------------------------------------------------------------

def test_per_class_reports_each_class_and_the_mean(capsys):
    result = run_json(capsys, *BASE, "--criteria", "idc,nc,lsa", "--per-class", "--m", "4", "--max-inputs", "400")
    idc = result["criteria"]["idc"]
    assert result["per_class"] is True and result["route"] == "label"
    assert list(idc["per_class"]) == list(idc["classes"]) and len(idc["classes"]) == 10
    assert idc["value"] == pytest.approx(np.mean([v["value"] for v in idc["per_class"].values()]))
    for name, model in idc["classes"].items():
        assert len(model["neurons"]) == 4 and model["incc"] == math.prod(model["cluster_counts"])
        assert model["covered"] == idc["per_class"][name]["covered"] == len(model["covered_combinations"])
    assert sum(v["covered"] for v in idc["per_class"].values()) == idc["covered"]
    assert len(result["criteria"]["nc"]["per_class"]) == 10 and len(result["criteria"]["lsa"]["per_class"]) > 0
    nc = result["criteria"]["nc"]  # per layer, counts summed over the classes as the totals are
    assert sum(v["covered"] for v in nc["per_layer"].values()) == nc["covered"]
    assert sum(v["total"] for v in nc["per_layer"].values()) == nc["total"] == 10 * 258
    rc, out, err = run_cli(capsys, *BASE, "--criteria", "idc", "--per-class", "--m", "4", "--max-inputs", "400")
    assert rc == 0, err
    assert f"{idc['percent']:.1f} % mean of 10 classes — {idc['covered']} / {idc['total']} summed" in out
    assert "    Trouser        " in out and "      clusters per neuron " in out


def test_testset_variants(capsys, tmp_path, slice_arrays):
    train, test, names = slice_arrays
    project = tmp_path / "p"
    first = run_json(capsys, *BASE, "--criteria", "nc", "--max-inputs", "50", "--project", project)
    assert first["testset"] == "fashion-mnist-slice:test"
    # a split of --data, and DATASET:SPLIT naming it
    assert run_json(capsys, *BASE, "--criteria", "nc", "--testset", "train", "--max-inputs", "40")["testset"] == \
        "fashion-mnist-slice:train"
    by_path = run_json(capsys, *BASE, "--criteria", "nc", "--testset", f"{SLICE}:train", "--max-inputs", "40")
    assert by_path["testset"] == "fashion-mnist-slice:train" and by_path["test_inputs"] == 40
    # the project's test set by its name, and a test set the project holds as an artifact
    named = Project.open(project).testsets[0]["name"]
    assert run_json(capsys, *BASE, "--criteria", "nc", "--testset", named, "--project", project,
                    "--max-inputs", "50")["criteria"]["nc"]["reused"] is True
    Project.open(project).save_artifact("testset", "shifted", {"x": test[0][:30] // 2, "y": test[1][:30]},
                                        how="darkened copies")
    shifted = run_json(capsys, *BASE, "--criteria", "nc,idc", "--testset", "shifted", "--project", project)
    assert shifted["testset"] == "shifted" and shifted["test_inputs"] == 30
    # a dataset path whose images fit the model: its test split
    path = save_npz(tmp_path / "mine.npz", train, test, names, np.arange(10), np.arange(25))
    mine = run_json(capsys, *BASE, "--criteria", "nc,dsa", "--testset", path)
    assert mine["testset"] == str(path) and mine["test_inputs"] == 25


def test_a_file_with_only_a_train_split_is_measured_with_a_note_on_stderr(capsys, tmp_path, slice_arrays):
    _, test, names = slice_arrays
    path = tmp_path / "train-only.npz"
    np.savez(path, x_train=test[0][:40, 0], y_train=test[1][:40], class_names=np.array(names))
    rc, out, err = run_cli(capsys, *BASE, "--criteria", "nc", "--testset", path, "--json")
    assert rc == 0, err
    result = json.loads(out)  # stdout holds the JSON alone
    note = f"test set '{path}' has no test split, so its train split (40 inputs, the only one it has) is used"
    assert result["test_inputs"] == 40 and len(result["notes"]) == 1 and result["notes"][0].startswith(note)
    assert f"note: {note}; name it as {path}:train" in err
    rc, out, err = run_cli(capsys, *BASE, "--criteria", "nc", "--testset", path, "--first", "10")
    assert rc == 0 and "note: " in err and "note: " not in out and "(10 test inputs)" in out
    named = run_json(capsys, *BASE, "--criteria", "nc", "--testset", f"{path}:train")
    assert named["notes"] == [] and named["test_inputs"] == 40


def test_labels_in_a_column_are_measured_and_evaluated_like_a_vector(capsys, tmp_path, slice_arrays):
    train, test, names = slice_arrays
    flat = save_npz(tmp_path / "flat.npz", train, test, names, np.arange(10), np.arange(60))
    column = tmp_path / "column.npz"
    np.savez(column, x_train=train[0][:10, 0], y_train=train[1][:10, None], x_test=test[0][:60, 0],
             y_test=test[1][:60, None], class_names=np.array(names))
    assert np.load(column)["y_test"].shape == (60, 1)
    by_label = ["--criteria", "nc,tknc", "--per-class"]  # routed by label, so the labels must be read right
    want, got = (run_json(capsys, *BASE, *by_label, "--testset", path)["criteria"] for path in (flat, column))
    for name in ("nc", "tknc"):
        assert got[name]["per_class"] == want[name]["per_class"] and got[name]["covered"] == want[name]["covered"]
    evaluated = [run_json(capsys, "evaluate", "--model", "lenet5-fashion", "--data", path, "--device", "cpu")
                 for path in (flat, column)]
    assert evaluated[0]["n"] == evaluated[1]["n"] == 60
    assert evaluated[0]["accuracy"] == evaluated[1]["accuracy"] and evaluated[0]["confusion"] == evaluated[1]["confusion"]


def test_the_project_stores_and_the_second_run_reuses(every_run, capsys):
    result, tmp = every_run
    project = Project.open(tmp / "project")
    stored = project.artifacts("coverage")
    assert sorted(stored) == sorted(r["artifact"] for r in result["criteria"].values())
    assert len(project.artifacts("coverage-fit")) == 7  # nc, tknc, tknp need no fit
    assert len(project.artifacts("importance")) == 1 and project.models[0]["name"] == "lenet5-fashion"
    again = run_json(capsys, *BASE, "--criteria", EVERY, "--project", tmp / "project")
    for name, r in again["criteria"].items():
        first = result["criteria"][name]
        assert r["reused"] is True and r["artifact"] == first["artifact"], name
        assert (r["value"], r["covered"], r["total"]) == (first["value"], first["covered"], first["total"]), name
    assert again["criteria"]["idc"]["covered_combinations"] == result["criteria"]["idc"]["covered_combinations"]
    assert len(Project.open(tmp / "project").artifacts()) == len(project.artifacts())
    rc, out, _ = run_cli(capsys, *BASE, "--criteria", "idc,kmnc", "--project", tmp / "project")
    assert rc == 0 and "reused from the project: idc, kmnc" in out


def test_a_saved_state_is_used_and_one_from_another_model_or_layer_is_refused(every_run, capsys, tmp_path):
    result, tmp = every_run
    states = tmp / "states"
    assert sorted(p.name for p in states.iterdir()) == sorted(f"{n}.h5" for n in EVERY.split(","))
    same = run_json(capsys, *BASE, "--criteria", "idc,kmnc", "--state", states / "idc.h5",
                    "--state", states / "kmnc.h5")
    for name in ("idc", "kmnc"):
        assert same["criteria"][name]["covered"] == result["criteria"][name]["covered"]
    before = {p.name: p.read_bytes() for p in states.iterdir()}
    rc, out, err = run_cli(capsys, "coverage", "--model", "lenet4-fashion", "--data", SLICE, "--criteria", "kmnc",
                           "--state", states / "kmnc.h5", "--project", tmp_path / "p")
    assert_clean_failure(rc, err, "The saved kmnc state was made for a different setup", "model: saved")
    assert out == "" and Project.open(tmp_path / "p").artifacts() == {}
    rc, out, err = run_cli(capsys, *BASE, "--layer", "fc1", "--criteria", "idc", "--state", states / "idc.h5")
    assert_clean_failure(rc, err, "The saved idc state was made for a different setup", 'layer: saved "fc2"')
    rc, _, err = run_cli(capsys, *BASE, "--criteria", "nc", "--state", states / "idc.h5")
    assert_clean_failure(rc, err, "holds a saved idc state, which --criteria does not ask for")
    assert {p.name: p.read_bytes() for p in states.iterdir()} == before  # nothing saved was touched


def test_fidelity_idc_falls_as_m_grows_and_is_deterministic_for_a_seed(capsys, tmp_path):
    """IDC's expected behaviour (docs/methods/idc.md#expected-behaviour) on the slice: IDC(m+1) ≤ IDC(m)
    on a fixed test set, and a fixed seed gives the same clusters and combinations (a fresh project, so
    nothing is reused)."""
    runs = {m: run_json(capsys, *BASE, "--m", m, "--project", tmp_path / "a")["criteria"]["idc"]
            for m in (6, 8, 10, 12)}
    fractions = [runs[m]["value"] for m in (6, 8, 10, 12)]
    assert fractions == sorted(fractions, reverse=True) and fractions[0] > 2 * fractions[-1]
    assert [runs[m]["neurons"] for m in (6, 8, 10)] == [runs[12]["neurons"][:m] for m in (6, 8, 10)]
    assert runs[12]["k_histogram"].get("2", 0) >= 9  # silhouette picks k = 2 for most neurons
    again = run_json(capsys, *BASE, "--m", 8, "--project", tmp_path / "b")["criteria"]["idc"]
    assert again["reused"] is False
    for field in ("neurons", "centroids", "covered_combinations", "value"):
        assert again[field] == runs[8][field], field
    other_seed = run_json(capsys, *BASE, "--m", 8, "--seed", 3)["criteria"]["idc"]
    assert other_seed["identity"]["params"]["seed"] == 3 and other_seed["neurons"] == runs[8]["neurons"]


# --- warnings that are not errors -----------------------------------------------------------------------------

def test_a_layer_with_constant_activations_is_a_warning(capsys, tmp_path):
    from workbench.core.models.model_io import load_model, save_checkpoint

    model = load_model("lenet5-fashion")
    model.module.fc2.weight.data.zero_()
    model.module.fc2.bias.data.fill_(-1.0)  # fc2 after its ReLU is 0 for every input
    path = tmp_path / "dead.pt"
    save_checkpoint(path, model.module, "lenet5", {"name": "dead", "class_names": model.info.class_names,
                                                   "input_shape": [1, 28, 28]})
    argv = ["coverage", "--model", path, "--data", SLICE, "--criteria", "idc,kmnc", "--max-inputs", "100"]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 0, err
    assert "warning: layer 'fc2': 84 of 84 neurons had one constant value" in out
    assert "cannot tell inputs apart" in out and "IDC   100.0 % — 1 / 1" in out
    result = run_json(capsys, *argv)["criteria"]
    assert {f"fc2[{i}]" for i in range(84)} <= set(result["kmnc"]["never_coverable"])
    assert result["idc"]["cluster_counts"] == [1] * 6
    assert [c["reason"] for c in result["idc"]["clusters"]] == ["few-values"] * 6


def test_a_singular_lsa_density_is_reported(capsys, tmp_path, slice_arrays):
    train, test, names = slice_arrays
    labels = train[1]
    few_bags = np.concatenate([np.flatnonzero(labels == c)[:5 if c == 8 else 200] for c in range(10)])
    path = save_npz(tmp_path / "few-bags.npz", train, test, names, few_bags, np.arange(300))
    result = run_json(capsys, "coverage", "--model", "lenet5-fashion", "--data", path, "--criteria", "lsa")
    lsa = result["criteria"]["lsa"]
    assert "Bag" in lsa["singular_classes"] and 0 <= lsa["value"] <= 1
    assert any("class 8 has a singular density" in w for w in lsa["warnings"])
    three_each = np.concatenate([np.flatnonzero(labels == c)[:3] for c in range(10)])
    path = save_npz(tmp_path / "three-each.npz", train, test, names, three_each, np.arange(50))
    rc, _, err = run_cli(capsys, "coverage", "--model", "lenet5-fashion", "--data", path, "--criteria", "lsa")
    assert_clean_failure(rc, err, "LSA: the density of every class's training activation traces is singular")


# --- bad input -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, words", [
    (["--criteria", "idc,nc,foo"], ["Unknown coverage criterion 'foo'",
                                    "Valid criteria: idc, nc, kmnc, nbc, snac, tknc, tknp, lsa, dsa, mdsa"]),
    (["--layer", "fc9"], ["no layer 'fc9'", "Valid layers: conv1, relu1, pool1, conv2", "fc2, relu4, fc3"]),
    (["--criteria", "nc", "--layers", "fc1,nope"], ["no layer 'nope'", "Valid layers: conv1"]),
    (["--layer", "fc3", "--m", "11"], ["m = 11 is larger than the 10 neurons of layer 'fc3'", "between 1 and 10"]),
    (["--layer", "conv1", "--m", "7"], ["larger than the 6 neurons of layer 'conv1'"]),
    (["--m", "0"], ["--m must be at least 1"]),
    (["--testset", "digits"], ["test set's images have shape (1, 8, 8)", "(1, 28, 28)"]),
    (["--testset", "validation"], ["No test set 'validation'", "train, test"]),
    (["--split", "validation"], ["no split 'validation'"]),
    (["--criteria", "kmnc", "--option", "kmnc.sections=3"], ["'kmnc' has no option(s) sections", "Its options: k"]),
    (["--criteria", "kmnc", "--option", "nc.threshold=0.5"], ["which --criteria does not ask for"]),
    (["--criteria", "nc", "--preset", "dnn-tip"], ["dnn-tip preset measures the layers you name"]),
])
def test_bad_requests_exit_2_without_a_traceback(capsys, tmp_path, extra, words):
    rc, out, err = run_cli(capsys, *BASE, *extra, "--project", tmp_path / "p")
    assert_clean_failure(rc, err, *words)
    assert out == ""
    assert not (tmp_path / "p").exists() or Project.open(tmp_path / "p").artifacts() == {}


def test_a_test_set_with_other_classes_is_refused(capsys, tmp_path, slice_arrays):
    train, test, _ = slice_arrays
    rows = np.flatnonzero(test[1] < 3)[:20]
    path = save_npz(tmp_path / "three.npz", (train[0][:20], train[1][:20] % 3), (test[0], test[1]),
                    ["cat", "dog", "bird"], test_rows=rows)
    rc, out, err = run_cli(capsys, *BASE, "--testset", path, "--project", tmp_path / "p")
    assert_clean_failure(rc, err, "has classes cat, dog, bird (3)", "the model knows T-shirt/top")
    assert out == "" and not (tmp_path / "p").exists()


def test_a_cancelled_run_stores_nothing(capsys, tmp_path, monkeypatch):
    """Ctrl+C during the test pass, after importance and fitting: no artifact, no state file."""
    from workbench.core.execution.jobs import JobContext

    real = JobContext.progress

    def progress(self, done, total, message=""):
        if message == "coverage: test inputs" and done > 0:
            raise KeyboardInterrupt
        return real(self, done, total, message)

    monkeypatch.setattr(JobContext, "progress", progress)
    rc, _, err = run_cli(capsys, *BASE, "--criteria", "idc,kmnc", "--project", tmp_path / "p",
                           "--save-state", tmp_path / "states", "--batch-size", "200")
    assert rc == EXIT_CANCELLED and "cancelled" in err and "Traceback" not in err
    assert Project.open(tmp_path / "p").artifacts() == {}
    assert not (tmp_path / "states").exists()


def test_a_real_process_end_to_end(tmp_path):
    script = Path(sys.executable).parent / "workbench"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "workbench"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HOME": str(tmp_path), "WORKBENCH_PLUGIN_PATH": ""}
    proc = subprocess.run(command + [str(a) for a in [*BASE, "--criteria", "idc,nc,dsa", "--max-inputs", "200",
                                                       "--json"]],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    result = json.loads(proc.stdout)
    assert result["test_inputs"] == 200 and set(result["criteria"]) == {"idc", "nc", "dsa"}
    proc = subprocess.run(command + [str(a) for a in [*BASE, "--criteria", "lsa,nope"]], capture_output=True,
                          text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == EXIT_ERROR and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
