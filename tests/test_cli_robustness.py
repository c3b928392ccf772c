"""The robustness commands (attack, fol, select, fuzz, retrain, converge, experiment robot): their JSON fields
and plausible values, the text reports, what --project stores and reading it back, and bad input ending in a
clear message, exit 2 and nothing stored. Runs the tiny digits-net on scikit-learn digits, in-process."""

from __future__ import annotations

import csv
import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest
import torch
from cli_helpers import assert_clean_failure, run_cli

from workbench.cli import main
from workbench.core.models.model_io import load_model, save_checkpoint
from workbench.core.project.folder import Project
from workbench.core.robustness.fuzzing import STOP_REASONS
from workbench.core.robustness.pool import load_pool, save_pool
from workbench.core.robustness.runs import load_run

EPS = "0.1"
POOL = "pool-digits-net-train-eps0.1"


def _main_json(*argv) -> dict:
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        rc = main([str(a) for a in [*argv, "--json"]])
    assert rc == 0, stderr.getvalue()
    return json.loads(stdout.getvalue())


@pytest.fixture(scope="module")
def attacked(digits_model_file, tmp_path_factory):
    """`workbench attack` on 300 training digits with a new project, run once: (result, project folder)."""
    folder = tmp_path_factory.mktemp("robustness") / "project"
    result = _main_json("attack", "--model", digits_model_file, "--data", "digits", "--eps", EPS, "--max-inputs", 300,
                        "--device", "cpu", "--project", folder)
    return result, folder


def _base(model_file, command: str) -> list:
    return [command, "--model", model_file, "--data", "digits", "--device", "cpu"]


def _snapshot(folder) -> dict:
    return {n: e["file"] for n, e in Project.open(folder).artifacts().items()}


# --- attack ------------------------------------------------------------------------------------------------

def test_attack_json_counts_rates_and_fol(attacked):
    r, _ = attacked
    assert r["model"] == "digits-net" and r["dataset"] == "digits" and r["split"] == "train"
    assert r["eps"] == 0.1 and r["eps_source"] == "--eps" and r["attacks"] == ["fgsm", "pgd"]
    assert r["attacked_inputs"] == 300 and r["split_inputs"] == 1438 and r["seed"] == 0
    for a in ("fgsm", "pgd"):
        assert r["attempted"][a] == 300 and 0 < r["succeeded"][a] <= r["attempted"][a]
        assert r["success_rate"][a] == pytest.approx(r["succeeded"][a] / 300)
    assert r["succeeded"]["pgd"] >= r["succeeded"]["fgsm"]  # ten projected steps beat one
    assert r["candidates"] == sum(r["succeeded"].values()) == sum(r["by_attack"].values())
    fol, grad = r["fol_linf"], r["grad_l2"]
    assert fol["n"] == grad["n"] == r["candidates"]
    assert fol["min"] >= -1e-5 and fol["min"] <= fol["median"] <= fol["max"]  # FOL∞ ≥ 0 inside the ball
    assert grad["min"] > 0 and r["grad_l2_label"] == "grad-L2 (RobOT fuzzer FOL)"
    assert r["artifact"] == POOL and r["device"] == "cpu"


def test_attack_stores_a_pool_that_loads_back(attacked):
    r, folder = attacked
    project = Project.open(folder)
    pool = load_pool(project, POOL)
    assert len(pool) == r["candidates"] and pool.images.shape[1:] == (1, 8, 8)
    assert pool.params["eps"] == 0.1 and pool.params["dataset"] == "digits" and pool.params["split"] == "train"
    assert pool.params["model"] == "digits-net" and "role" not in pool.params  # store keys stay in the file
    assert project.load_artifact(POOL, kind="testset").provenance["role"] == "candidate-pool"
    assert "workbench attack" in pool.params["command"]
    assert np.mean(pool.scores["fol_linf"]) == pytest.approx(r["fol_linf"]["mean"], rel=1e-6)
    assert POOL in [t["name"] for t in project.testsets]


def test_a_dataset_without_a_preset_is_attacked_with_the_budget_for_its_kind_of_images(capsys, digits_model_file):
    rc, out, err = run_cli(capsys, *_base(digits_model_file, "attack"), "--attacks", "fgsm", "--max-inputs", 20)
    assert rc == 0, err
    assert "eps 0.1 (default for grey images (digits has no preset))" in out


def test_attack_text_with_eps_preset(capsys, digits_model_file):
    rc, out, err = run_cli(capsys, *_base(digits_model_file, "attack"), "--eps-preset", "robot-mnist-eps",
                           "--attacks", "fgsm", "--max-inputs", 40)
    assert rc == 0, err
    assert "eps 0.3 (preset robot-mnist-eps)" in out and "fgsm:" in out and "pgd:" not in out
    assert "FOL∞ (FOSC): mean" in out and "grad-L2 (RobOT fuzzer FOL): mean" in out and "FOL-L2" not in out


# --- fol ---------------------------------------------------------------------------------------------------

def test_fol_of_clean_inputs_is_eps_times_l1_gradient(tmp_path, digits_model_file, digits):
    out_csv = tmp_path / "fol.csv"
    r = _main_json(*_base(digits_model_file, "fol"), "--eps", EPS, "--max-inputs", 60, "--out", out_csv)
    assert r["testset"] == "digits:test" and r["kind"] == "split" and r["attack"] == "none"
    assert r["inputs"] == 60 and r["testset_inputs"] == 359 and r["attack_success_rate"] is None
    assert 0.8 < r["accuracy"] <= 1.0 and r["fol_linf"]["min"] >= 0 and r["fol_linf_negative"] == 0
    with open(out_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 60 and r["csv"] == str(out_csv)
    assert list(rows[0]) == ["index", "source_index", "label", "prediction", "fol_linf",
                             "grad-L2 (RobOT fuzzer FOL)", "deepgini"]
    # x' = x0: FOL∞ = ε‖∇J‖₁, checked on the first rows against a hand-made gradient
    model = load_model(digits_model_file)
    idx = [int(row["index"]) for row in rows[:5]]
    test = digits.split("test")
    x = test.tensor(idx).requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(model.module(x), torch.from_numpy(test.labels[idx]), reduction="sum")
    (g,) = torch.autograd.grad(loss, x)
    expected = 0.1 * g.flatten(1).abs().sum(1)
    got = torch.tensor([float(row["fol_linf"]) for row in rows[:5]])
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-7)


def test_fol_of_a_file_without_a_test_split_says_which_split_it_scored(tmp_path, capsys, digits_model_file, digits):
    path = tmp_path / "train-only.npz"
    np.savez(path, x_train=digits.split("train").numpy(np.arange(12))[:, 0], y_train=digits.split("train").labels[:12])
    rc, out, err = run_cli(capsys, *_base(digits_model_file, "fol"), "--eps", EPS, "--testset", path, "--json")
    assert rc == 0, err
    note = f"test set '{path}' has no test split, so its train split (12 inputs, the only one it has) is used"
    assert f"note: {note}" in err and json.loads(out)["notes"][0].startswith(note)
    assert json.loads(out)["inputs"] == 12


def test_fol_with_pgd_and_on_a_stored_pool(attacked, capsys, digits_model_file):
    r, folder = attacked
    pgd = _main_json(*_base(digits_model_file, "fol"), "--eps", EPS, "--attack", "pgd", "--max-inputs", 50)
    assert pgd["attack"] == "pgd" and pgd["inputs"] == 50
    assert 0 <= pgd["attack_success_rate"] <= 1 and pgd["accuracy"] == pytest.approx(1 - pgd["attack_success_rate"])
    assert pgd["fol_linf"]["min"] >= -1e-5
    stored = _main_json(*_base(digits_model_file, "fol"), "--project", folder, "--testset", POOL)
    assert stored["kind"] == "pool" and stored["inputs"] == r["candidates"] and stored["eps"] == 0.1
    assert stored["clean_source"] == "digits:train" and stored["accuracy"] == 0.0  # successful adversarials only
    assert stored["fol_linf"]["mean"] == pytest.approx(r["fol_linf"]["mean"], rel=1e-5)
    rc, out, err = run_cli(capsys, *_base(digits_model_file, "fol"), "--project", folder, "--testset", POOL)
    assert rc == 0, err
    assert "scored against their clean sources in digits:train" in out and "grad-L2 (RobOT fuzzer FOL)" in out


# --- select ------------------------------------------------------------------------------------------------

def test_select_stores_the_pick_as_a_test_set(attacked, capsys):
    r, folder = attacked
    sel = _main_json("select", "--project", folder, "--pool", POOL, "--strategy", "be-st", "--budget", "10%")
    n = math.floor(0.1 * r["candidates"])
    assert sel["selected"] == n == len(sel["indices"]) == len(set(sel["indices"])) and sel["pool_size"] == r["candidates"]
    assert sel["fol_kind"] == "fol_linf" and sel["artifact"] == f"{POOL}-be-st-10%"
    assert sel["range"]["min"] == pytest.approx(r["fol_linf"]["min"]) and \
        sel["range"]["max"] == pytest.approx(r["fol_linf"]["max"])  # BE-ST takes both ends
    project = Project.open(folder)
    picked = load_pool(project, sel["artifact"])
    pool = load_pool(project, POOL)
    assert len(picked) == n and np.array_equal(picked.images, pool.images[sel["indices"]])
    assert picked.params["selection"]["strategy"] == "be-st" and picked.params["selected_from"] == POOL
    km = _main_json("select", "--project", folder, "--pool", POOL, "--strategy", "km-st", "--budget", 20,
                    "--fol-kind", "grad_l2", "--seed", 3, "--name", "km20")
    assert km["selected"] == 20 and km["fol_kind"] == "grad_l2" and km["range_kind"] == "grad_l2"
    assert km["params"]["seed"] == 3 and len(load_pool(Project.open(folder), "km20")) == 20
    rc, out, err = run_cli(capsys, "select", "--project", folder, "--pool", POOL, "--strategy", "deepgini",
                           "--budget", 5, "--name", "gini5")
    assert rc == 0, err
    assert "deepgini: selected 5 of" in out and "first indices:" in out and "Stored as test set 'gini5'" in out


# --- fuzz --------------------------------------------------------------------------------------------------

def test_fuzz_stores_tests_and_joins_the_pool(attacked, digits_model_file):
    r, folder = attacked
    fz = _main_json(*_base(digits_model_file, "fuzz"), "--seeds", 5, "--time-budget", 5, "--project", folder,
                    "--join-pool", POOL, "--name", "fuzz5")
    assert fz["eps"] == 0.1 and fz["eps_source"].startswith("recorded in pool")  # the joined pool's ε
    assert fz["seeds_drawn"] == 5 and fz["seeds_used"] + fz["dropped_static"] + fz["dropped_misclassified"] == 5
    assert fz["stop_reason"] in STOP_REASONS and fz["tests"] > 0 and fz["artifact"] == "fuzz5"
    assert fz["grad_l2"]["n"] == fz["fol_linf"]["n"] == fz["tests"] and 0 <= fz["inside_ball"] <= fz["tests"]
    assert fz["grad_l2_label"] == "grad-L2 (RobOT fuzzer FOL)"
    project = Project.open(folder)
    tests = project.load_artifact("fuzz5", kind="testset")
    assert {"x", "y", "seed_index", "grad_l2", "fol_linf", "inside_ball"} <= set(tests.names)
    assert len(tests["y"]) == fz["tests"] and tests.provenance["stop_reason"] == fz["stop_reason"]
    merged = load_pool(project, fz["merged_pool"])
    assert fz["merged_pool"] == f"{POOL}+fuzz5" and len(merged) == r["candidates"] + fz["tests"]
    assert merged.attack_counts()["fuzz"] == fz["tests"] and fz["merged_by_attack"] == merged.attack_counts()
    if fz["inside_ball"] < fz["tests"]:
        assert "outside the ε-ball" in fz["warnings"][0]


# --- retrain, converge, experiment ----------------------------------------------------------------------------

def test_retrain_table_baseline_and_stored_run(attacked, digits_model_file):
    _, folder = attacked
    rt = _main_json(*_base(digits_model_file, "retrain"), "--strategy", "be-st,random,coverage-greedy", "--budget", "5%",
                    "--epochs", 1, "--project", folder, "--pool", POOL, "--report-inputs", 100, "--name", "rt")
    assert rt["eps"] == 0.1 and rt["checkpoint_mode"] == "clean" and rt["optimistic"] is False
    base = rt["baseline"]
    assert base["static_ae_accuracy"] == 0.0 and base["adaptive_inputs"] == 100  # 0 % by construction
    selectable = rt["setup"]["selectable"]
    assert rt["setup"]["heldout"] > 0 and selectable + rt["setup"]["heldout"] == rt["setup"]["pool"]["candidates"]
    assert [row["strategy"] for row in rt["rows"]] == ["be-st", "random", "coverage-greedy"]
    for row in rt["rows"]:
        assert row["selected"] == math.floor(0.05 * selectable) and row["budget"] == "5%" and row["seed"] == 0
        for key in ("static_ae_accuracy", "adaptive_robust_accuracy", "clean_accuracy"):
            assert 0.0 <= row[key] <= 1.0
        assert row["fol_mean"] > 0 and row["selected_fol_mean"] > 0 and row["best_epoch"] == 1
    stored = load_run(Project.open(folder), "rt")
    assert stored["what"] == "experiment" and len(stored["rows"]) == 3 and stored["params"]["pool"] == POOL
    assert stored["params"]["setup"]["baseline"]["static_ae_accuracy"] == 0.0


def test_retrain_paper_mode_saves_the_model(tmp_path, capsys, digits_model_file):
    out = tmp_path / "retrained.pt"
    rc, text, err = run_cli(capsys, *_base(digits_model_file, "retrain"), "--eps", EPS, "--strategy", "km-st",
                            "--budget", 20, "--epochs", 1, "--pool-inputs", 150, "--report-inputs", 60,
                            "--checkpoint", "paper", "--out", out)
    assert rc == 0, err
    assert "optimistic (checkpoint chosen on test data)" in text and "static AE acc" in text and "original" in text
    model = load_model(out)
    card = model.info.card
    assert card["fine_tuned_from"] == "digits-net" and card["strategy"] == "km-st" and card["selected"] == 20
    assert card["optimistic"] is True and card["checkpoint_mode"] == "paper" and "workbench retrain" in card["command"]
    assert model.fingerprint() != load_model(digits_model_file).fingerprint()


def test_converge_rounds_and_stored_run(tmp_path, capsys, digits_model_file):
    folder = tmp_path / "project"
    rc, out, err = run_cli(capsys, *_base(digits_model_file, "converge"), "--eps", EPS, "--rounds", 2, "--epochs", 1,
                           "--pool-inputs", 100, "--report-inputs", 60, "--project", folder)
    assert rc == 0, err
    assert "round 0: static AE 0.0 %" in out and "stopped after round" in out
    run = load_run(Project.open(folder), "converge-digits-net")
    assert run["what"] == "convergence" and run["params"]["stop_reason"] in (
        "requirement met", "FOL plateau", "rounds used up")
    cv = _main_json(*_base(digits_model_file, "converge"), "--eps", EPS, "--rounds", 1, "--epochs", 1,
                    "--pool-inputs", 100, "--report-inputs", 60, "--strategy", "be-st", "--budget", "50%",
                    "--requirement", 0.9)
    rounds = cv["rounds"]
    assert [row["round"] for row in rounds] == [0, 1] and rounds[0]["static_ae_accuracy"] == 0.0
    assert rounds[0]["selected"] == rounds[0]["pool_size"] // 2
    assert cv["stop_reason"] == "rounds used up" and cv["met"] is (rounds[-1]["static_ae_accuracy"] > 0.9)
    assert cv["fp_test"]["candidates"] > 0 and cv["artifact"] is None


def test_experiment_robot_writes_csv_markdown_and_json(tmp_path, digits_model_file):
    out = tmp_path / "exp"
    r = _main_json("experiment", "robot", "--model", digits_model_file, "--data", "digits", "--device", "cpu",
                   "--eps", EPS, "--strategies", "be-st,random", "--budgets", "5%,10%", "--seeds", "0", "--epochs", 1,
                   "--pool-inputs", 200, "--report-inputs", 60, "--out", out)
    assert r["seeds"] == [0] and r["budgets"] == ["5%", "10%"] and len(r["rows"]) == 4
    assert r["baseline"]["static_ae_accuracy"] == 0.0
    assert set(r["tables"]["static_ae_accuracy"]) == {"be-st", "random"}
    cell = r["tables"]["adaptive_robust_accuracy"]["be-st"]["5%"]
    assert cell["runs"] == 1 and cell["sd"] == 0.0 and 0 <= cell["mean"] <= 1
    with open(out / "robot_experiment.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and {"strategy", "budget", "seed", "static_ae_accuracy", "adaptive_robust_accuracy",
                               "static_ae_accuracy_pgd"} <= set(rows[0])
    md = (out / "robot_experiment.md").read_text()
    assert "| strategy | 5% | 10% |" in md and "## Protocol" in md and "fp_test" in md and "eps (L∞): 0.1" in md
    assert "seeded sample of 200 training inputs" in md and "baseline (original model)" in md
    saved = json.loads((out / "robot_experiment.json").read_text())
    assert len(saved["rows"]) == 4 and saved["params"]["model"] == "digits-net"
    assert r["files"]["md"] == str(out / "robot_experiment.md")


# --- bad input ---------------------------------------------------------------------------------------------

def _nan_model(tmp_path, digits_model_file):
    model = load_model(digits_model_file)
    for p in model.module.parameters():
        p.data.fill_(float("nan"))
    path = tmp_path / "nan.pt"
    save_checkpoint(path, model.module, "digits-net", {"name": "nan", "class_names": model.info.class_names,
                                                       "input_shape": [1, 8, 8]})
    return path


@pytest.mark.parametrize("case, words", [
    ("eps-too-big", ["outside the data range (0, 1]"]),
    ("eps-zero", ["outside the data range"]),
    ("nan-model", ["NaN"]),
    ("budget-too-big", ["larger than the pool"]),
    ("unknown-strategy", ["Unknown selection strategy 'best'"]),
    ("coverage-strategy", ["needs neuron coverage"]),
    ("empty-pool", ["empty"]),
    ("no-labels", ["holds no labels"]),
    ("not-a-pool", ["no pool named"]),
    ("out-with-many-runs", ["one retrained model"]),
    ("retrain-budget-too-big", ["larger than the"]),
    ("fuzz-eps-mismatch", ["was made with eps=0.1"]),
    ("bad-requirement", ["not an accuracy"]),
])
def test_bad_input_exits_2_and_stores_nothing(case, words, attacked, tmp_path, capsys, digits_model_file):
    _, folder = attacked
    fresh = tmp_path / "new-project"
    project = Project.open(folder)
    if case == "empty-pool":
        save_pool(project, "empty", load_pool(project, POOL).subset([]))
    if case == "no-labels":
        project.save_artifact("testset", "unlabelled", {"x": np.zeros((3, 1, 8, 8), np.float32)})
    before = _snapshot(folder)
    m = digits_model_file
    argv = {
        "eps-too-big": [*_base(m, "attack"), "--eps", "1.5", "--project", fresh],
        "eps-zero": [*_base(m, "fol"), "--eps", "0"],
        "nan-model": [*_base(_nan_model(tmp_path, m), "attack"), "--eps", EPS, "--max-inputs", 10, "--project", fresh],
        "budget-too-big": ["select", "--project", folder, "--pool", POOL, "--strategy", "random", "--budget", 100000],
        "unknown-strategy": ["select", "--project", folder, "--pool", POOL, "--strategy", "best", "--budget", 5],
        "coverage-strategy": ["select", "--project", folder, "--pool", POOL, "--strategy", "coverage-greedy",
                              "--budget", 5],
        "empty-pool": ["select", "--project", folder, "--pool", "empty", "--strategy", "be-st", "--budget", 1],
        "no-labels": [*_base(m, "fol"), "--eps", EPS, "--project", folder, "--testset", "unlabelled"],
        "not-a-pool": ["select", "--project", folder, "--pool", "nothing", "--strategy", "be-st", "--budget", 1],
        "out-with-many-runs": [*_base(m, "retrain"), "--eps", EPS, "--strategy", "be-st,random", "--budget", "1%",
                               "--out", tmp_path / "x.pt"],
        "retrain-budget-too-big": [*_base(m, "retrain"), "--project", folder, "--pool", POOL, "--strategy", "be-st",
                                   "--budget", 100000, "--out", tmp_path / "x.pt"],
        "fuzz-eps-mismatch": [*_base(m, "fuzz"), "--eps", "0.2", "--seeds", 2, "--project", folder,
                              "--join-pool", POOL],
        "bad-requirement": [*_base(m, "converge"), "--eps", EPS, "--requirement", 2, "--project", fresh],
    }[case]
    rc, out, err = run_cli(capsys, *argv)
    assert_clean_failure(rc, err, *words)
    assert out == ""
    assert _snapshot(folder) == before and not fresh.exists() and not (tmp_path / "x.pt").exists()
    if case in ("empty-pool", "no-labels"):
        Project.open(folder).delete_artifact("empty" if case == "empty-pool" else "unlabelled")


def test_the_commands_are_listed_and_experiment_needs_a_protocol(capsys):
    from workbench.cli import build_parser

    parser = build_parser()
    text = parser.format_help()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("attack", "fol", "select", "fuzz", "retrain", "converge", "experiment"):
        assert command in text
        assert "--device" in subparsers[command].format_help() or command == "experiment"
    robot = next(a for a in subparsers["experiment"]._actions if a.dest == "protocol").choices["robot"]
    assert "--budgets" in robot.format_help() and "1%,2%,4%" in robot.format_help()
    rc, _, err = run_cli(capsys, "experiment")
    assert_clean_failure(rc, err, "experiment robot")
