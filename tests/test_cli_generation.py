"""`workbench train-generator` and `workbench generators`: train, read the card, resume, a plugin's kind,
and bad input that ends in a clear message."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_clean_failure, run_cli, run_json

SLICE = "tests/data/fashion-mnist-slice"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """`workbench train-generator --generator vae --preset small --epochs 1 …`, run once."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from workbench.cli import main

    out = tmp_path_factory.mktemp("cli") / "vae"
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        rc = main(["train-generator", "--generator", "vae", "--data", SLICE, "--preset", "small", "--epochs", "1",
                   "--out", str(out), "--classifier", "lenet5-fashion", "--acceptance-samples", "50",
                   "--device", "cpu", "--json"])
    assert rc == 0, stderr.getvalue()
    return out, json.loads(stdout.getvalue())


def test_train_generator_writes_a_folder_with_its_card(trained):
    out, card = trained
    assert card["kind"] == "vae" and card["epochs"] == 1 and card["complete"] and card["path"] == str(out)
    assert card["config"] == {"h_dim": 512, "z_dim": 32} and card["preset"] == "small"
    assert card["seed_acceptance"]["classifier"] == "lenet5-fashion" and card["seed_acceptance"]["n"] == 50
    assert card["latent_range"]["n"] == 1000 and card["latent_range"]["range"] > 0
    assert "train-generator" in card["command"] and isinstance(card["warnings"], list)
    assert (out / "generator.json").is_file() and (out / "weights.safetensors").is_file()


def test_generators_reads_a_folder_and_resume_trains_on(trained, capsys):
    out, _ = trained
    shown = run_json(capsys, "generators", out)
    assert shown["kind"] == "vae" and shown["latent_dim"] == 32 and shown["epochs"] == 1
    rc, text, err = run_cli(capsys, "generators", out)
    assert rc == 0 and "Latent range" in text and "Seed acceptance by lenet5-fashion" in text
    resumed = run_json(capsys, "train-generator", "--generator", "vae", "--data", SLICE, "--out", out, "--resume",
                       "--epochs", "2", "--classifier", "none", "--device", "cpu")
    assert resumed["epochs"] == 2 and len(resumed["loss_curve"]) == 2 and resumed["seed_acceptance"] is None


def test_generators_lists_the_kinds_with_a_plugins(capsys):
    listed = run_json(capsys, "generators")
    kinds = {k["name"]: k for k in listed["kinds"]}
    assert {"vae", "gan", "diffusion"} <= set(kinds) and not kinds["vae"]["plugin"]
    assert kinds["tiny-cvae"]["plugin"]  # plugins/example_generator.py of this checkout


def test_a_plugins_kind_trains_from_the_command_line(tmp_path, capsys):
    card = run_json(capsys, "train-generator", "--generator", "tiny-cvae", "--data", SLICE, "--preset", "small",
                    "--epochs", "1", "--out", tmp_path / "cvae", "--classifier", "none", "--device", "cpu")
    assert card["kind"] == "tiny-cvae" and card["complete"]


@pytest.mark.parametrize("argv, words", [
    (["--generator", "flow", "--data", SLICE], ["Unknown generator kind 'flow'", "vae, conv-vae, gan, diffusion"]),
    (["--generator", "gan", "--data", "digits"], ["28×28"]),
    (["--generator", "vae", "--data", SLICE, "--preset", "huge"], ["no preset 'huge'"]),
    (["--generator", "vae", "--data", "digits", "--classifier", "lenet5-fashion"], ["lenet5-fashion", "(1, 28, 28)"]),
    (["--generator", "vae", "--data", SLICE, "--epochs", "0"], ["--epochs"]),
])
def test_bad_input_is_a_clear_message(argv, words, tmp_path, capsys):
    rc, _, err = run_cli(capsys, "train-generator", *argv, "--out", tmp_path / "g", "--device", "cpu")
    assert_clean_failure(rc, err, *words)
    assert not (tmp_path / "g").exists()


def test_an_existing_generator_is_left_alone(trained, capsys):
    out, _ = trained
    before = (out / "generator.json").read_text()
    rc, _, err = run_cli(capsys, "train-generator", "--generator", "vae", "--data", SLICE, "--out", out)
    assert_clean_failure(rc, err, "holds a generator already", "--resume")
    assert (out / "generator.json").read_text() == before
    rc, _, err = run_cli(capsys, "generators", out / "absent")
    assert_clean_failure(rc, err, "No generator folder")


def test_generate_searches_each_generator_and_prints_the_summary(capsys):
    """The latent search from the command line on the bundled mnist-5k generators (a few seeds, a short budget)."""
    rc, out, err = run_cli(capsys, "generate", "--generator", "vae-mnist-5k,gan-mnist-5k", "--model", "lenet5-mnist5k",
                           "--data", "mnist-5k", "--seeds", "4", "--budget", "5", "--device", "cpu", "--json")
    assert rc == 0, err
    runs = json.loads(out)["runs"]
    assert [r["generator"] for r in runs] == ["vae-mnist-5k", "gan-mnist-5k"]
    for run in runs:
        assert run["seeds"] == 4 and 0 <= run["misbehaviours"] <= run["kept"] <= 4
        assert len(run["seeds_detail"]) == run["kept"] and run["params"]["budget"] == 5
        assert all(1 <= s["generations"] <= 5 and s["found"] == (s["best_margin"] < 0) for s in run["seeds_detail"])
    rc, out, err = run_cli(capsys, "generate", "--generator", "vae-mnist-5k", "--model", "lenet5-mnist5k",
                           "--data", "mnist-5k", "--seeds", "2", "--budget", "2")
    assert rc == 0 and "seeds kept" in out and "vae-mnist-5k" in out
    rc, out, err = run_cli(capsys, "generate", "--generator", "no-such", "--model", "lenet5-mnist5k", "--data",
                           "mnist-5k", "--seeds", "2")
    assert rc == 2 and "No generator folder" in err and "Traceback" not in err


def test_a_generator_kind_picks_the_datas_bundled_one(capsys, monkeypatch):
    rc, out, err = run_cli(capsys, "generate", "--generator", "gan,vae", "--model", "lenet5-mnist5k", "--data",
                           "mnist-5k", "--seeds", "2", "--budget", "2", "--device", "cpu", "--json")
    assert rc == 0, err
    assert [r["generator"] for r in json.loads(out)["runs"]] == ["gan-mnist-5k", "vae-mnist-5k"]
    rc, _, err = run_cli(capsys, "generate", "--generator", "diffusion", "--model", "lenet5-mnist5k", "--data",
                         "mnist-5k", "--seeds", "2")
    assert_clean_failure(rc, err, "mnist-5k has no bundled diffusion generator", "gan-mnist-5k (gan)",
                         "train-generator --generator diffusion")
    from workbench.core.generation import storage

    twice = storage.bundled_generators() + [{**e, "name": e["name"] + "-copy"} for e in storage.bundled_generators()]
    monkeypatch.setattr(storage, "bundled_generators", lambda: twice)
    rc, _, err = run_cli(capsys, "generate", "--generator", "vae", "--model", "lenet5-mnist5k", "--data", "mnist-5k",
                         "--seeds", "2")
    assert_clean_failure(rc, err, "mnist-5k has 2 bundled vae generators: vae-mnist-5k, vae-mnist-5k-copy")
