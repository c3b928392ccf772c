"""The command line: info, train → evaluate round trip, --project, and bad input that ends in a clear
message with a non-zero exit and no traceback."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import assert_clean_failure, run_cli

from workbench.cli import EXIT_CANCELLED, EXIT_ERROR, main
from workbench.core.project.folder import Project

REPO = Path(__file__).resolve().parent.parent


# --- info -------------------------------------------------------------------------------------------------

def test_info_json_lists_datasets_models_device_and_versions(capsys):
    rc, out, err = run_cli(capsys, "info", "--json")
    assert rc == 0, err
    info = json.loads(out)
    datasets = {d["name"]: d for d in info["datasets"]}
    assert {"fashion-mnist", "mnist-5k", "digits"} <= set(datasets)
    assert datasets["digits"]["available"] is True
    for d in datasets.values():
        assert d["available"] or d["install"], f"{d['name']} is unavailable without an install line"
    models = {m["name"]: m for m in info["models"]}
    assert {"lenet5-fashion", "advertorch-lenet5-clean", "advertorch-lenet5-adv"} <= set(models)
    assert models["lenet5-fashion"]["available"] and models["lenet5-fashion"]["arch"] == "lenet5"
    assert info["cuda_available"] == torch.cuda.is_available()
    assert info["device"] == ("CPU" if not torch.cuda.is_available() else info["device"])
    assert info["device"].startswith("CUDA") == torch.cuda.is_available()
    assert info["versions"]["torch"] == torch.__version__
    assert {"workbench", "numpy", "h5py", "python"} <= set(info["versions"])
    assert isinstance(info["plugins"], list) and info["user_plugin_folder"]


def test_info_text(capsys):
    rc, out, _ = run_cli(capsys, "info")
    assert rc == 0
    assert "Datasets:" in out and "Bundled models:" in out and "Device:" in out and "digits" in out


# --- train → evaluate round trip ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """`workbench train --model lenet5 --data <slice> --epochs 1 --out tmp/x.pt --json`, run once."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    tmp = tmp_path_factory.mktemp("cli")
    slice_dir = REPO / "tests" / "data" / "fashion-mnist-slice"
    out_path = tmp / "tmp" / "x.pt"
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        rc = main(["train", "--model", "lenet5", "--data", str(slice_dir), "--epochs", "1",
                   "--out", str(out_path), "--json", "--device", "cpu"])
    assert rc == 0, stderr.getvalue()
    return {"card": json.loads(stdout.getvalue()), "path": out_path, "slice": slice_dir, "tmp": tmp}


def test_train_writes_a_checkpoint_and_card(trained):
    card, path = trained["card"], trained["path"]
    assert path.exists() and path.with_suffix(".json").exists()
    assert card["path"] == str(path)
    assert card["arch"] == "lenet5" and card["epochs"] == 1 and card["seed"] == 0
    assert card["input_shape"] == [1, 28, 28] and len(card["class_names"]) == 10
    assert len(card["history"]) == 1 and 0.1 < card["test_accuracy"] <= 1.0
    assert card["command"].startswith("workbench train --model lenet5")  # how it was made
    side = json.loads(path.with_suffix(".json").read_text())
    assert side["test_accuracy"] == card["test_accuracy"]
    saved = torch.load(path, weights_only=True)  # the checkpoint needs no pickle
    assert saved["arch"] == "lenet5"


def test_evaluate_the_trained_checkpoint_reproduces_its_accuracy(trained, capsys):
    rc, out, err = run_cli(capsys, "evaluate", "--model", trained["path"], "--data", trained["slice"], "--json")
    assert rc == 0, err
    result = json.loads(out)
    assert result["accuracy"] == trained["card"]["test_accuracy"]
    assert result["n"] == 1000 and result["split"] == "test"
    confusion = np.array(result["confusion"])
    assert confusion.shape == (10, 10) and confusion.sum() == 1000
    assert np.trace(confusion) / 1000 == pytest.approx(result["accuracy"])
    assert result["per_class_accuracy"] == pytest.approx(trained["card"]["per_class_accuracy"])
    assert result["model_info"]["arch"] == "lenet5" and result["model_info"]["format"] == "checkpoint"
    assert "predictions" not in result


def test_evaluate_text_output(trained, capsys):
    rc, out, _ = run_cli(capsys, "evaluate", "--model", trained["path"], "--data", trained["slice"])
    assert rc == 0
    assert "accuracy" in out and "Confusion matrix" in out and "Ankle boot" in out


def test_evaluate_with_project_stores_an_artifact(trained, tmp_path, capsys):
    project_dir = tmp_path / "proj"
    rc, out, err = run_cli(capsys, "evaluate", "--model", trained["path"], "--data", trained["slice"],
                           "--json", "--project", project_dir)
    assert rc == 0, err
    result = json.loads(out)
    project = Project.open(project_dir)
    assert project.problems == []
    assert project.testsets[0]["split"] == "test"
    (name, entry), = project.artifacts("evaluation").items()
    art = project.load_artifact(name)
    np.testing.assert_array_equal(art["confusion"], np.array(result["confusion"]))
    assert len(art["predictions"]) == 1000
    how = art.provenance
    assert how["accuracy"] == result["accuracy"] and how["split"] == "test" and how["device"] == "cpu"
    assert how["model"] == "x" and len(how["model_fingerprint"]) == 16 and "torch" in how["versions"]
    assert any(m["spec"] == str(trained["path"]) for m in project.models)


def test_train_into_a_project(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "train", "--model", "digits-net", "--data", "digits", "--epochs", "2",
                           "--project", tmp_path / "p", "--json")
    assert rc == 0, err
    card = json.loads(out)
    path = Path(card["path"])
    assert path.parent == tmp_path / "p" / "models" and path.exists()
    project = Project.open(tmp_path / "p")
    assert project.datasets == ["digits"]
    # stored relative to the project folder, so the folder can move
    assert any(m["spec"] == "models/" + path.name and project.model_spec(m) == str(path) for m in project.models)


def test_pickled_model_needs_trust_file(tmp_path, digits_model, capsys):
    torch.save(digits_model.module, tmp_path / "full.pt")
    rc, _, err = run_cli(capsys, "evaluate", "--model", tmp_path / "full.pt", "--data", "digits")
    assert_clean_failure(rc, err, "pickled", "--trust-file")
    rc, out, err = run_cli(capsys, "evaluate", "--model", tmp_path / "full.pt", "--data", "digits",
                           "--trust-file", "--json")
    assert rc == 0, err
    assert json.loads(out)["model_info"]["format"] == "pickle (trusted)"


# --- cancellation -----------------------------------------------------------------------------------------

def test_cancelled_training_writes_no_checkpoint(tmp_path, capsys, monkeypatch):
    from workbench.core.execution.jobs import JobContext

    real = JobContext.progress
    calls = []

    def progress(self, done, total, message=""):
        calls.append(done)
        if len(calls) == 3:  # the user presses Ctrl+C / Cancel during the third batch
            self.cancel()
        return real(self, done, total, message)

    monkeypatch.setattr(JobContext, "progress", progress)
    out_path = tmp_path / "models" / "never.pt"
    rc, _, err = run_cli(capsys, "train", "--model", "digits-net", "--data", "digits", "--epochs", "3",
                         "--out", out_path)
    assert rc == EXIT_CANCELLED
    assert "cancelled" in err and "Traceback" not in err
    assert not out_path.exists() and not out_path.with_suffix(".json").exists()
    assert not out_path.parent.exists() or list(out_path.parent.iterdir()) == []
    assert len(calls) == 3


# --- bad input ----------------------------------------------------------------------------------------------

def _idx(path: Path, array: np.ndarray):
    code = 0x08
    path.write_bytes(bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
                     + array.astype(np.uint8).tobytes())


def _idx_dir(root: Path, n_images=10, n_labels=10) -> Path:
    root.mkdir()
    _idx(root / "t10k-images-idx3-ubyte", np.zeros((n_images, 8, 8)))
    _idx(root / "t10k-labels-idx1-ubyte", np.arange(n_labels) % 10)
    return root


def _bad_data(tmp_path: Path, kind: str) -> Path:
    x = np.zeros((10, 8, 8), np.uint8)
    y = np.arange(10) % 10
    if kind == "idx-magic":
        root = _idx_dir(tmp_path / "idx")
        raw = bytearray((root / "t10k-images-idx3-ubyte").read_bytes())
        raw[1] = 9
        (root / "t10k-images-idx3-ubyte").write_bytes(bytes(raw))
        return root
    if kind == "idx-truncated":
        root = _idx_dir(tmp_path / "idx")
        raw = (root / "t10k-images-idx3-ubyte").read_bytes()
        (root / "t10k-images-idx3-ubyte").write_bytes(raw[:-64])
        return root
    if kind == "idx-count":
        return _idx_dir(tmp_path / "idx", 10, 9)
    path = tmp_path / f"{kind}.npz"
    arrays = {
        "npz-pickle": dict(x=np.array([{"a": 1}] * 10, dtype=object), y=y),
        "npz-keys": dict(pictures=x, y=y),
        "npz-range": dict(x=np.full((10, 8, 8), 3.5), y=y),
        "npz-negative": dict(x=x, y=y - 1),
        "npz-label-range": dict(x=x, y=y, class_names=np.array(list("abc"))),
        "npz-empty": dict(x=x[:0], y=y[:0]),
    }[kind]
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("kind, words", [
    ("idx-magic", ["magic"]),
    ("idx-truncated", ["truncated"]),
    ("idx-count", ["10 images", "9 labels"]),
    ("npz-pickle", ["pickled"]),
    ("npz-keys", ["pictures", "expected x and y"]),
    ("npz-range", ["[0, 1]", "3.5"]),
    ("npz-negative", ["negative class -1"]),
    ("npz-label-range", ["class 9", "3 classes"]),
    ("npz-empty", ["holds no images"]),
])
def test_unreadable_dataset_files(tmp_path, capsys, digits_model_file, kind, words):
    data = _bad_data(tmp_path, kind)
    rc, _, err = run_cli(capsys, "evaluate", "--model", digits_model_file, "--data", data)
    assert_clean_failure(rc, err, *words)
    err_lines = err.splitlines()
    assert len(err_lines) >= 2 and err_lines[1].startswith("  ")  # a hint follows the message


def _bad_model(tmp_path: Path, kind: str, digits_model) -> tuple[Path, list[str]]:
    path = tmp_path / f"{kind}.pt"
    if kind == "missing":
        return path, []
    if kind == "truncated":
        torch.save(digits_model.module.state_dict(), path)
        path.write_bytes(path.read_bytes()[:300])
    elif kind == "random":
        path.write_bytes(b"\x13" + np.random.default_rng(0).bytes(5000))
    elif kind == "wrong-keys":
        state = dict(digits_model.module.state_dict())
        state["fc1.weight"] = torch.zeros(32, 99)
        del state["fc2.bias"]
        torch.save(state, path)
    elif kind == "nan":
        state = {k: torch.full_like(v, float("nan")) for k, v in digits_model.module.state_dict().items()}
        torch.save(state, path)
    elif kind == "classes":
        from workbench.core.models.architectures import get_architecture

        torch.save(get_architecture("digits-net").build(3).state_dict(), path)
    elif kind == "shape":
        from workbench.core.models.architectures import get_architecture

        torch.save(get_architecture("lenet1").build(10).state_dict(), path)
        return path, ["--arch", "lenet1"]
    return path, ["--arch", "digits-net"]


@pytest.mark.parametrize("kind, words", [
    ("missing", ["No model file", "missing.pt"]),
    ("truncated", ["truncated.pt", "is a zip archive", "cut off or damaged", "copy or export it again"]),
    ("random", ["random.pt", "is not a PyTorch file"]),
    ("wrong-keys", ["do not fit", "missing in file: fc2.bias", "fc1.weight: file (32, 99) vs model (32, 128)"]),
    ("nan", ["NaN"]),
    ("classes", ["(3,) scores", "10 classes"]),
    ("shape", ["(1, 28, 28)", "(1, 8, 8)"]),
])
def test_bad_model_files(tmp_path, capsys, digits_model, kind, words):
    path, extra = _bad_model(tmp_path, kind, digits_model)
    rc, _, err = run_cli(capsys, "evaluate", "--model", path, "--data", "digits", *extra)
    assert_clean_failure(rc, err, *words)


@pytest.mark.parametrize("argv, words", [
    (["evaluate", "--model", "{model}", "--data", "no-such-data"], ["no-such-data"]),
    (["evaluate", "--model", "lenet5-fashion", "--data", "digits"], ["(1, 28, 28)", "(1, 8, 8)"]),
    (["evaluate", "--model", "{model}", "--data", "digits", "--device", "toaster"], ["toaster"]),
    (["evaluate", "--model", "{model}", "--data", "digits", "--split", "valid"], ["no split 'valid'"]),
    (["train", "--model", "lenet5", "--data", "digits", "--epochs", "1", "--out", "{out}"], ["(1, 28, 28)"]),
    (["train", "--model", "no-such-arch", "--data", "digits", "--out", "{out}"], ["Unknown architecture"]),
    (["train", "--model", "digits-net", "--data", "digits", "--epochs", "0", "--out", "{out}"], ["epochs"]),
])
def test_bad_arguments(capsys, tmp_path, digits_model_file, argv, words):
    out = tmp_path / "m.pt"
    argv = [a.format(model=digits_model_file, out=out) for a in argv]
    rc, _, err = run_cli(capsys, *argv)
    assert_clean_failure(rc, err, *words)
    assert not out.exists()


def test_damaged_project_json(tmp_path, capsys, digits_model_file):
    project = Project.create(tmp_path / "p", "digits")
    project.add_model("something")  # leaves a .bak
    (tmp_path / "p" / "project.json").write_text("{ this is not json")
    rc, _, err = run_cli(capsys, "evaluate", "--model", digits_model_file, "--data", "digits",
                         "--project", tmp_path / "p")
    assert_clean_failure(rc, err, "project.json", "damaged", "project.json.bak")
    assert (tmp_path / "p" / "project.json").read_text() == "{ this is not json"  # nothing touched


def test_damaged_artifact_does_not_block_new_results(tmp_path, capsys, digits_model_file):
    project = Project.create(tmp_path / "p", "digits")
    entry = project.save_artifact("scores", "old", {"x": np.arange(3)})
    (tmp_path / "p" / entry["file"]).write_bytes(b"\x89HDF garbage")
    rc, _, err = run_cli(capsys, "evaluate", "--model", digits_model_file, "--data", "digits",
                         "--project", tmp_path / "p", "--json")
    assert rc == 0, err
    reopened = Project.open(tmp_path / "p")
    assert reopened.find_artifact("evaluation") is not None
    assert any(p.startswith("old:") for p in reopened.problems)


def test_broken_plugin_is_reported_and_the_cli_still_works(tmp_path, capsys, monkeypatch, isolated_plugins,
                                                           digits_model_file):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "broken.py").write_text("def register(registry):\n    return 1 / 0\n")
    (folder / "typo.py").write_text("def register(registry\n")
    monkeypatch.setenv("WORKBENCH_PLUGIN_PATH", str(folder))
    rc, out, err = run_cli(capsys, "evaluate", "--model", digits_model_file, "--data", "digits", "--json")
    assert rc == 0, err
    assert json.loads(out)["accuracy"] > 0.8
    rc, out, err = run_cli(capsys, "info", "--json")
    assert rc == 0, err
    reports = {p["name"]: p for p in json.loads(out)["plugins"]}
    assert reports["broken"]["ok"] is False and "ZeroDivisionError" in reports["broken"]["error"]
    assert reports["typo"]["ok"] is False and "SyntaxError" in reports["typo"]["error"]
    rc, out, _ = run_cli(capsys, "info")
    assert "✗ broken: ZeroDivisionError" in out


# --- a real process ----------------------------------------------------------------------------------------

def _workbench_command() -> list[str]:
    script = Path(sys.executable).parent / "workbench"
    return [str(script)] if script.exists() else [sys.executable, "-m", "workbench"]


def _run(argv, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HOME": str(tmp_path), "WORKBENCH_PLUGIN_PATH": ""}
    return subprocess.run(_workbench_command() + [str(a) for a in argv], capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp_path)


def test_real_process_bad_file_exits_cleanly(tmp_path):
    bad = tmp_path / "garbage.pt"
    bad.write_bytes(b"\x00not a model at all" * 100)
    proc = _run(["evaluate", "--model", bad, "--data", "digits"], tmp_path)
    assert proc.returncode == EXIT_ERROR
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and "garbage.pt" in proc.stderr
    assert proc.stdout == ""


def test_real_process_evaluate_json(tmp_path, digits_model_file):
    proc = _run(["evaluate", "--model", digits_model_file, "--data", "digits", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    result = json.loads(proc.stdout)
    assert result["model"] == "digits-net" and result["n"] == 359 and result["accuracy"] > 0.85
