"""`workbench train-validators`, `workbench generate --project … --export …` and `workbench validity`: a
validator set trained from the command line on a tiny dataset, a generated set stored and exported, the
proxies' groups printed (and recounted from the validators themselves), and bad input that ends in a
clear message and a non-zero exit, never a traceback."""

from __future__ import annotations

import csv
import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest
from cli_helpers import assert_clean_failure, run_cli, run_json

from workbench.core.generation.generated import CSV_COLUMNS
from workbench.core.project.store import text_column

GENERATORS = "vae-fashion-mnist,gan-fashion-mnist"
NAME = "gen-set"
SEEDS, BUDGET = 5, 3


def quiet_main(*argv) -> tuple[int, str, str]:
    """`workbench.cli.main` for a module-scoped fixture (capsys is per test)."""
    from workbench.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        rc = main([str(a) for a in argv])
    return rc, stdout.getvalue(), stderr.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory, fashion_slice):
    """A tiny Fashion-MNIST as an NPZ (400 train, 200 test images) and 60 noise images as another domain."""
    root = tmp_path_factory.mktemp("data")
    train, test = fashion_slice.split("train"), fashion_slice.split("test")
    tiny = root / "tiny-fashion.npz"
    np.savez(tiny, x_train=np.asarray(train.images[:400]), y_train=train.labels[:400],
             x_test=np.asarray(test.images[:200]), y_test=test.labels[:200],
             class_names=np.array(fashion_slice.class_names))
    rng = np.random.default_rng(0)
    noise = root / "noise.npz"
    np.savez(noise, x=rng.integers(0, 256, (60, 1, 28, 28), dtype=np.uint8), y=rng.integers(0, 10, 60),
             class_names=np.array(fashion_slice.class_names))
    return {"tiny": tiny, "noise": noise, "root": root}


@pytest.fixture(scope="module")
def validators(files):
    """`workbench train-validators --epochs 1 --oracle-epochs 1` on the tiny NPZ against the noise."""
    out = files["root"] / "validators"
    rc, stdout, stderr = quiet_main("train-validators", "--data", files["tiny"], "--reference", files["noise"],
                                    "--out", out, "--epochs", "1", "--oracle-epochs", "1", "--device", "cpu", "--json")
    assert rc == 0, stderr
    return out, json.loads(stdout)


@pytest.fixture(scope="module")
def generated(files):
    """`workbench generate … --project DIR --name NAME --no-proxies --export DIR --json`, run once."""
    project, export = files["root"] / "project", files["root"] / "export"
    rc, stdout, stderr = quiet_main("generate", "--generator", GENERATORS, "--model", "lenet5-fashion",
                                    "--data", files["tiny"], "--seeds", SEEDS, "--budget", BUDGET,
                                    "--project", project, "--name", NAME, "--no-proxies", "--export", export,
                                    "--device", "cpu", "--json")
    assert rc == 0, stderr
    return project, export, json.loads(stdout)


def test_train_validators_from_the_command_line(validators, files, capsys):
    out, card = validators
    assert card["path"] == str(out) and card["dataset"] == str(files["tiny"]) and card["reference"] == str(files["noise"])
    assert (out / "validators.json").is_file() and (out / "oracle.pt").is_file()
    assert (out / "selforacle").is_dir() and (out / "daiv").is_dir()
    taus = list(card["selforacle"]["thresholds"].values())
    assert len(taus) == 7 and all(math.isfinite(t) and t > 0 for t in taus) and taus == sorted(taus)
    assert card["selforacle"]["n"] == 100 and math.isfinite(card["daiv"]["threshold"])
    assert card["oracle"]["epochs"] == 1 and card["checks"]["foreign"]["n"] == 60
    assert "train-validators" in card["command"]
    rc, _, err = run_cli(capsys, "train-validators", "--data", files["tiny"], "--reference", files["noise"],
                         "--out", out, "--epochs", "1", "--oracle-epochs", "1", "--device", "cpu")
    assert_clean_failure(rc, err, "not an empty folder")  # the set just trained is left as it is
    assert json.loads((out / "validators.json").read_text())["card"]["created"] == card["created"]


def test_generate_stores_the_set_and_exports_the_csv(generated, files):
    from workbench.core.data.registry import load_dataset
    from workbench.core.project.folder import Project
    from workbench.core.testsets import resolve

    project_dir, export, result = generated
    assert result["testset"] == NAME and result["partial"] is False
    summary = result["summary"]
    assert [row["generator"] for row in summary] == GENERATORS.split(",")
    for row, run in zip(summary, result["runs"]):
        assert row["seeds"] == SEEDS and row["searched"] == row["kept"] == run["kept"] <= SEEDS
        assert row["misbehaviours"] == sum(s["found"] for s in run["seeds_detail"]) and row["unfinished"] == 0
        assert "proxy_both_valid" not in row  # --no-proxies
        assert all(1 <= s["generations"] <= BUDGET and s["finished"] for s in run["seeds_detail"])
    total = sum(row["searched"] for row in summary)
    assert total >= 4
    # the stored test set
    project = Project.open(project_dir)
    how = project.artifacts("testset")[NAME]["provenance"]
    assert how["role"] == "generated" and how["model"] == "lenet5-fashion" and how["partial"] is False
    assert how["validators"] == "" and "generate" in how["command"]
    stored = resolve(project, NAME, load_dataset(str(files["tiny"])))
    assert len(stored) == total and not any(k.startswith("proxy_") for k in stored.columns)
    assert list(text_column(stored.columns["generator"])) == [
        name for run in result["runs"] for name in [run["generator"]] * len(run["seeds_detail"])]
    assert stored.labels.tolist() == [s["label"] for run in result["runs"] for s in run["seeds_detail"]]
    # the export: the benchmark's CSV and one PNG per input
    assert result["export"] == {"csv": str(export / "records.csv"), "images": total, "folder": str(export)}
    with open(export / "records.csv", newline="") as f:
        reader = csv.DictReader(f)
        records = list(reader)
    assert reader.fieldnames == list(CSV_COLUMNS) and len(records) == total
    assert sorted(p.name for p in export.glob("*.png")) == sorted(r["Filename"] for r in records)
    assert {r["Tool"] for r in records} == {"vae", "gan"} and {r["Mutation_extent"] for r in records} == {"high"}
    assert [int(r["Expected_label(X)"]) for r in records] == stored.labels.tolist()


def test_generate_prints_the_table_and_refuses_a_used_export_folder(files, tmp_path, capsys):
    used = tmp_path / "used"
    used.mkdir()
    (used / "mine.txt").write_text("keep")
    rc, out, err = run_cli(capsys, "generate", "--generator", "vae-fashion-mnist", "--model", "lenet5-fashion",
                           "--data", files["tiny"], "--seeds", "3", "--budget", "2", "--no-proxies",
                           "--export", used, "--device", "cpu")
    assert_clean_failure(rc, err, "not an empty folder")
    assert [p.name for p in used.iterdir()] == ["mine.txt"] and (used / "mine.txt").read_text() == "keep"
    rc, out, err = run_cli(capsys, "generate", "--generator", "vae-fashion-mnist", "--model", "lenet5-fashion",
                           "--data", files["tiny"], "--seeds", "3", "--budget", "2", "--no-proxies",
                           "--project", tmp_path / "p", "--name", "few", "--device", "cpu")
    assert rc == 0, err
    assert "seeds kept" in out and "vae-fashion-mnist" in out and "Stored as test set 'few'" in out
    assert "proxy-valid" not in out  # no proxies were asked for


def test_a_used_export_folder_is_refused_before_anything_is_stored(files, tmp_path, capsys):
    used = tmp_path / "used"
    used.mkdir()
    (used / "mine.txt").write_text("keep")
    rc, _, err = run_cli(capsys, "generate", "--generator", "vae-fashion-mnist", "--model", "lenet5-fashion",
                         "--data", files["tiny"], "--seeds", "3", "--budget", "2", "--no-proxies",
                         "--project", tmp_path / "p", "--name", "never", "--export", used, "--device", "cpu")
    assert_clean_failure(rc, err, "not an empty folder")
    assert not (tmp_path / "p").exists()  # a failed run leaves no project behind (ProjectTarget's promise)


def test_validity_prints_the_groups_of_the_proxies(generated, validators, files, capsys):
    from workbench.core.data.registry import load_dataset
    from workbench.core.execution.jobs import JobContext
    from workbench.core.generation.validators import load_validators
    from workbench.core.project.folder import Project
    from workbench.core.testsets import resolve

    project_dir, _, result = generated
    folder, _ = validators
    common = ("--testset", NAME, "--project", project_dir, "--validators", folder, "--data", files["tiny"],
              "--device", "cpu")
    rc, text, err = run_cli(capsys, "validity", *common)
    assert rc == 0, err
    assert "proxies" in text and "not verdicts of validity" in text
    for name in GENERATORS.split(","):
        assert f"{name} (high)" in text
    report = run_json(capsys, "validity", *common)
    assert report["testset"] == NAME and report["quantile"] == 0.9999 and "proxies" in report["note"]
    groups = {g["group"]: g for g in report["groups"]}
    assert list(groups) == [f"{row['generator']} (high)" for row in result["summary"]]
    # the same counts from the validators themselves
    stored = resolve(Project.open(project_dir), NAME, load_dataset(str(files["tiny"])))
    judged = load_validators(str(folder)).judge(JobContext("cpu"), stored.numpy(), stored.labels)
    names = text_column(stored.columns["generator"])
    so_ok, daiv_ok = ~judged["proxy_selforacle_invalid"], ~judged["proxy_daiv_invalid"]
    for row in result["summary"]:
        g, mine = groups[f"{row['generator']} (high)"], names == row["generator"]
        assert g["inputs"] == row["searched"] == mine.sum()
        assert g["selforacle_valid"] == (mine & so_ok).sum() and g["daiv_valid"] == (mine & daiv_ok).sum()
        assert g["both_valid"] == (mine & so_ok & daiv_ok).sum()
        assert g["oracle_preserved"] + g["oracle_changed"] + g["oracle_uncertain"] == g["both_valid"]
        shares = list(g["selforacle_by_quantile"].values())
        assert len(shares) == 7 and shares == sorted(shares) and all(0 <= s <= 1 for s in shares)
    assert report["validator_summary"][0][0] == "SelfOracle proxy (reconstruction loss)"
    # a lower quantile: a lower threshold, never more inputs accepted
    strict = run_json(capsys, "validity", *common, "--quantile", "0.68")
    for g in strict["groups"]:
        assert g["selforacle_valid"] <= groups[g["group"]]["selforacle_valid"]


def test_validity_finds_the_projects_dataset_without_data(generated, validators, capsys):
    project_dir, _, _ = generated
    rc, text, err = run_cli(capsys, "validity", "--testset", NAME, "--project", project_dir, "--validators",
                            validators[0], "--device", "cpu")
    assert rc == 0, err
    assert "proxies" in text


@pytest.mark.parametrize("change, words", [
    ({"--testset": "no-such-set"}, ["No test set 'no-such-set'", NAME]),
    ({"--validators": "ABSENT"}, ["No validator set", "train-validators"]),
    ({"--quantile": "0.5"}, ["no SelfOracle threshold at the quantile 0.5", "0.9999"]),
    ({"--quantile": "1.5"}, ["strictly between 0 and 1"]),
    ({"--validators": None}, ["No validators are bundled", "train-validators"]),
])
def test_validity_bad_input_is_a_clear_message(generated, validators, files, tmp_path, change, words, capsys):
    project_dir, _, _ = generated
    options = {"--testset": NAME, "--project": str(project_dir), "--validators": str(validators[0]),
               "--data": str(files["tiny"]), "--device": "cpu"}
    options.update({k: (str(tmp_path / "absent") if v == "ABSENT" else v) for k, v in change.items()})
    argv = [part for k, v in options.items() if v is not None for part in (k, v)]
    rc, _, err = run_cli(capsys, "validity", *argv)
    assert_clean_failure(rc, err, *words)


def test_validity_refuses_a_damaged_validator_set(generated, validators, files, tmp_path, capsys):
    import shutil

    project_dir, _, _ = generated
    damaged = tmp_path / "damaged"
    shutil.copytree(validators[0], damaged)
    (damaged / "validators.json").write_text('{"format": "workbench-validators", "version": 1, "card": {}}')
    rc, _, err = run_cli(capsys, "validity", "--testset", NAME, "--project", project_dir, "--validators", damaged,
                         "--data", files["tiny"], "--device", "cpu")
    assert_clean_failure(rc, err, "is damaged", "Train the validators again")


def test_train_validators_bad_input_is_a_clear_message(files, tmp_path, capsys):
    few = tmp_path / "few.npz"
    np.savez(few, x=np.zeros((10, 1, 28, 28), np.uint8), y=np.arange(10))
    out = tmp_path / "v"
    cases = [(["--data", files["tiny"]], ["No reference domain is known", "--reference"]),
             (["--data", files["tiny"], "--reference", "digits"], ["another shape"]),
             (["--data", files["tiny"], "--reference", files["noise"], "--epochs", "0"], ["--epochs"]),
             (["--data", few, "--reference", files["noise"]], ["test split of at least 20 images"])]
    for argv, words in cases:
        rc, _, err = run_cli(capsys, "train-validators", *argv, "--out", out, "--oracle-epochs", "1", "--device", "cpu")
        assert_clean_failure(rc, err, *words)
        assert not out.exists()
