"""`workbench importance` (issue item 7): JSON fields, the text report, the gallery PNGs, project reuse,
and bad input ending in a clear message, exit 2 and no traceback. Runs the bundled lenet5-fashion on the
vendored 2,000/1,000 Fashion-MNIST slice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import assert_clean_failure, run_cli

from workbench.cli import EXIT_CANCELLED, EXIT_ERROR, main
from workbench.core.project.folder import Project

REPO = Path(__file__).resolve().parent.parent
SLICE = REPO / "tests" / "data" / "fashion-mnist-slice"
BASE = ["importance", "--model", "lenet5-fashion", "--data", SLICE, "--device", "cpu"]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One full run with --per-class, a gallery and a project, captured once for several tests."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    tmp = tmp_path_factory.mktemp("importance")
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        rc = main([str(a) for a in [*BASE, "--layer", "fc2", "--per-class", "--json", "--gallery", "76",
                                     "--out", tmp / "gallery", "--k", "4", "--project", tmp / "project"]])
    assert rc == 0, stderr.getvalue()
    return json.loads(stdout.getvalue()), tmp


def test_json_reports_relevance_top_m_conservation_and_ablation(first_run):
    result, _ = first_run
    assert result["model"] == "lenet5-fashion" and result["layer"] == "fc2" and result["neurons"] == 84
    assert result["inputs"] == 2000 and 1500 < result["correct"] <= 2000
    relevance = np.array(result["relevance"])
    assert relevance.shape == (84,) and result["ranking"] == np.argsort(-relevance, kind="stable").tolist()
    assert result["m"] == 6 and result["top_m"] == result["ranking"][:6]
    assert result["top_m_relevance"] == pytest.approx(relevance[result["top_m"]].tolist())
    assert result["rule"]["dense"]["name"] == "lrp-0" and result["neuron_definition"]["point"] == "post"

    conservation = result["conservation"]
    assert conservation["error"] < 1e-6
    assert conservation["start_total"] == pytest.approx(conservation["layer_total"] + conservation["absorbed_total"],
                                                        rel=1e-6)
    assert set(conservation["absorbed"]) == {"fc3"} and 0.9 < conservation["layer_share"] < 1.1

    ablation = result["ablation"]
    assert ablation["important_neurons"] == result["top_m"] and ablation["m"] == 6 and ablation["mode"] == "zero"
    assert ablation["split"] == "test" and ablation["inputs"] == 1000 and ablation["draws"] == 5
    assert len(ablation["random_accuracies"]) == len(ablation["random_neurons"]) == 5
    assert ablation["downstream_layer"] == "fc3"
    assert ablation["important_drop"] == pytest.approx(ablation["baseline_accuracy"] - ablation["important_accuracy"])
    assert ablation["important_hurts_more"] is (ablation["important_drop"] > ablation["random_drop_mean"])
    assert result["reused"] == {"importance": False, "ablation": False}
    assert result["device"] == "cpu" and result["seconds"] > 0


def test_per_class_tops(first_run):
    result, _ = first_run
    per_class = result["per_class"]
    assert list(per_class["top_m"]) == ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                                        "Sneaker", "Bag", "Ankle boot"]
    assert sum(per_class["counts"].values()) == result["correct"] and per_class["empty_classes"] == []
    for name, top in per_class["top_m"].items():
        relevance = np.array(per_class["relevance"][name])
        assert top == np.argsort(-relevance, kind="stable")[:6].tolist()


def test_the_gallery_writes_pngs(first_run):
    from PIL import Image

    result, tmp = first_run
    gallery = result["gallery"]
    assert gallery["neuron"] == 76 and len(gallery["by_relevance"]) == len(gallery["by_activation"]) == 4
    files = [Path(f) for f in gallery["files"]]
    assert len(files) == 2 * (1 + 4) and all(f.parent == tmp / "gallery" and f.suffix == ".png" for f in files)
    for f in files:
        with Image.open(f) as image:
            assert image.format == "PNG" and image.size[0] >= 112
    scores = [item["score"] for item in gallery["by_relevance"]]
    assert scores == sorted(scores, reverse=True)
    assert (tmp / "gallery" / "gallery.json").exists()


def test_the_project_stores_and_the_second_run_reuses(first_run, capsys):
    result, tmp = first_run
    project = Project.open(tmp / "project")
    assert list(project.artifacts("importance")) == [result["artifacts"]["importance"]]
    assert list(project.artifacts("ablation")) == [result["artifacts"]["ablation"]]
    rc, out, err = run_cli(capsys, *BASE, "--layer", "fc2", "--per-class", "--project", tmp / "project")
    assert rc == 0, err
    assert "importance: reused from the project" in out and "ablation: reused from the project" in out
    assert "Top-6 neurons: " + ", ".join(str(n) for n in result["top_m"]) in out
    assert "conservation error" in out and "important neurons" in out
    rc, out, err = run_cli(capsys, *BASE, "--layer", "fc2", "--per-class", "--project", tmp / "project", "--json")
    again = json.loads(out)
    assert again["reused"] == {"importance": True, "ablation": True}
    assert again["relevance"] == result["relevance"] and again["ablation"]["random_accuracies"] == \
        result["ablation"]["random_accuracies"]


def test_a_damaged_stored_result_is_computed_again_with_a_note(capsys, tmp_path):
    import h5py

    command = (*BASE, "--layer", "fc1", "--ablation", "off", "--max-inputs", "300", "--project", tmp_path / "p",
               "--json")
    rc, out, err = run_cli(capsys, *command)
    first = json.loads(out)
    project = Project.open(tmp_path / "p")
    (name, entry), = project.artifacts("importance").items()
    with h5py.File(project.artifact_path(entry), "r+") as f:  # text where the neuron ranking was
        ranking = f["ranking"][()]
        del f["ranking"]
        f["ranking"] = np.array([b"first"] * len(ranking))
    rc, out, err = run_cli(capsys, *command)
    again = json.loads(out)  # stdout stays JSON
    assert rc == 0 and again["relevance"] == first["relevance"] and not again["reused"]["importance"]
    assert "note: " in err and name in err and "computed again" in err and "Traceback" not in err
    rc, out, err = run_cli(capsys, *command)
    assert rc == 0 and json.loads(out)["reused"]["importance"] and "note:" not in err  # it was replaced


def test_other_layers_rules_and_mean_ablation(capsys):
    rc, out, err = run_cli(capsys, *BASE, "--layer", "conv2", "--rule", "epsilon", "--epsilon", "0.1", "--m", "4",
                           "--ablation", "mean", "--draws", "2", "--max-inputs", "500", "--json")
    assert rc == 0, err
    result = json.loads(out)
    assert result["neurons"] == 16 and len(result["top_m"]) == 4 and result["inputs"] == 500
    assert result["rule"]["conv"] == {"name": "epsilon", "bias_in_denominator": True, "epsilon": 0.1}
    assert result["ablation"]["mode"] == "mean" and result["ablation"]["downstream_layer"] == "fc1"
    assert result["conservation"]["error"] < 1e-6 and set(result["conservation"]["absorbed"]) == {"fc3", "fc2", "fc1"}
    rc, out, err = run_cli(capsys, *BASE, "--layer", "fc1", "--ablation", "off", "--max-inputs", "300", "--json")
    assert rc == 0, err and json.loads(out)["ablation"] is None


# --- bad input -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, words", [
    (["--layer", "fc9"], ["no layer 'fc9'", "Valid layers: conv1, relu1", "fc3"]),
    (["--layer", "fc2", "--m", "85"], ["m = 85 is larger than the 84 neurons of layer 'fc2'"]),
    (["--layer", "conv1", "--m", "7"], ["larger than the 6 neurons of layer 'conv1'"]),
    (["--layer", "fc2", "--gallery", "84", "--out", "somewhere"], ["no neuron 84"]),
    (["--layer", "fc2", "--gallery", "3"], ["--gallery NEURON and --out DIR go together"]),
    (["--layer", "fc2", "--m", "0"], ["--m must be at least 1"]),
    (["--layer", "fc2", "--rule", "deep-taylor"], ["Unknown LRP rule 'deep-taylor'"]),
    (["--layer", "fc2", "--epsilon", "0.2"], ["--epsilon applies to the epsilon rule"]),
    (["--layer", "fc2", "--split", "validation"], ["no split 'validation'"]),
])
def test_bad_requests_exit_2_without_a_traceback(capsys, tmp_path, extra, words):
    rc, out, err = run_cli(capsys, *BASE, *extra, "--project", tmp_path / "p")
    assert_clean_failure(rc, err, *words)
    assert out == ""
    assert not (tmp_path / "p").exists() or Project.open(tmp_path / "p").artifacts() == {}


def test_a_layer_lrp_cannot_handle_is_named_with_the_models_layers(capsys, tmp_path, isolated_plugins):
    from torch import nn

    from workbench.core.models.architectures import Architecture, register_architecture
    from workbench.core.models.model_io import save_checkpoint

    def build(num_classes=10):
        return nn.Sequential(OrderedDict([("conv1", nn.Conv2d(1, 2, 5)), ("norm", nn.LocalResponseNorm(2)),
                                          ("relu1", nn.ReLU()), ("flatten", nn.Flatten()),
                                          ("fc1", nn.Linear(2 * 24 * 24, num_classes))]))

    register_architecture(Architecture("lrn-net", build, (1, 28, 28)))
    path = tmp_path / "lrn.pt"
    save_checkpoint(path, build().eval(), "lrn-net", {"name": "lrn", "class_names": [str(i) for i in range(10)],
                                                      "input_shape": [1, 28, 28]})
    rc, _, err = run_cli(capsys, "importance", "--model", path, "--data", SLICE, "--layer", "fc1")
    assert_clean_failure(rc, err, "layer 'norm' (LocalResponseNorm)",
                         "The model's layers: conv1 (Conv2d), norm (LocalResponseNorm), relu1 (ReLU)")


def test_nan_relevance_names_the_first_offending_layer(capsys, tmp_path):
    from workbench.core.models.model_io import load_model, save_checkpoint

    model = load_model("lenet5-fashion")
    model.module.fc1.weight.data[3, 7] = float("nan")
    path = tmp_path / "broken.pt"
    save_checkpoint(path, model.module, "lenet5", {"name": "broken", "class_names": model.info.class_names,
                                                   "input_shape": [1, 28, 28]})
    rc, _, err = run_cli(capsys, "importance", "--model", path, "--data", SLICE, "--layer", "conv2", "--device", "cpu",
                         "--json")
    assert_clean_failure(rc, err, "NaN", "'fc1'")


def test_a_class_without_correctly_classified_inputs_is_reported_empty(capsys, tmp_path):
    """Labels rearranged so that no image labelled 'Bag' is classified as a bag."""
    from workbench.core.data.registry import load_dataset
    from workbench.core.models.model_io import load_model

    data = load_dataset(str(SLICE))
    model = load_model("lenet5-fashion")
    train = data.split("train")
    with torch.no_grad():
        predicted = model.module(train.tensor()).argmax(1).numpy()
    labels = train.labels.copy()
    bag = data.class_names.index("Bag")
    labels[(labels == bag) & (predicted == bag)] = (bag + 1) % 10  # now wrong, and no correct bag is left
    path = tmp_path / "no-bags.npz"
    np.savez(path, x_train=np.asarray(train.images), y_train=labels, x_test=np.asarray(data.split("test").images),
             y_test=data.split("test").labels, class_names=np.array(data.class_names))
    rc, out, err = run_cli(capsys, "importance", "--model", "lenet5-fashion", "--data", path, "--layer", "fc2",
                           "--per-class", "--ablation", "off", "--device", "cpu")
    assert rc == 0, err
    assert "class Bag: empty — no correctly classified inputs" in out
    rc, out, err = run_cli(capsys, "importance", "--model", "lenet5-fashion", "--data", path, "--layer", "fc2",
                           "--per-class", "--ablation", "off", "--device", "cpu", "--json")
    per_class = json.loads(out)["per_class"]
    assert per_class["empty_classes"] == ["Bag"] and per_class["top_m"]["Bag"] == [] and per_class["counts"]["Bag"] == 0


def test_a_cancelled_run_stores_nothing(capsys, tmp_path, monkeypatch):
    """Ctrl+C during the ablation, after importance finished: the project keeps no artifact at all."""
    from workbench.core.execution.jobs import JobContext

    real = JobContext.progress

    def progress(self, done, total, message=""):
        if message.startswith("ablation") and done > 0:
            raise KeyboardInterrupt
        return real(self, done, total, message)

    monkeypatch.setattr(JobContext, "progress", progress)
    rc, out, err = run_cli(capsys, *BASE, "--layer", "fc2", "--project", tmp_path / "p", "--gallery", "1",
                           "--out", tmp_path / "gallery")
    assert rc == EXIT_CANCELLED and "cancelled" in err and "Traceback" not in err
    assert Project.open(tmp_path / "p").artifacts() == {}
    assert not (tmp_path / "gallery").exists()


def test_a_real_process_end_to_end(tmp_path):
    script = Path(sys.executable).parent / "workbench"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "workbench"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HOME": str(tmp_path), "WORKBENCH_PLUGIN_PATH": ""}
    proc = subprocess.run(command + [str(a) for a in [*BASE, "--layer", "fc2", "--max-inputs", "500", "--json"]],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    result = json.loads(proc.stdout)
    assert result["conservation"]["error"] < 1e-6 and result["ablation"]["inputs"] == 1000
    proc = subprocess.run(command + [str(a) for a in [*BASE, "--layer", "nope"]], capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == EXIT_ERROR and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
