"""Arguments that cannot work are refused before a command starts: exit 2, one `error:` line naming the
option and its bound or reason, no traceback, nothing written. Each class of bad value is covered for
the commands that take it."""

from __future__ import annotations

import pytest
from cli_helpers import assert_clean_failure, run_cli

TRAIN = ["train", "--model", "digits-net", "--data", "digits", "--out", "{out}"]
EVALUATE = ["evaluate", "--model", "{model}", "--data", "digits"]
COVERAGE = ["coverage", "--model", "{model}", "--data", "digits", "--layer", "fc1", "--criteria", "kmnc"]
IMPORTANCE = ["importance", "--model", "{model}", "--data", "digits", "--layer", "fc1"]


@pytest.mark.parametrize("argv, words", [
    # numbers outside their bounds, or not numbers at all
    ([*TRAIN, "--seed", "-1"], ["--seed", "outside"]),
    ([*TRAIN, "--seed", "1.5"], ["--seed", "not a whole number"]),
    ([*TRAIN, "--lr", "nan"], ["--lr", "nan"]),
    ([*TRAIN, "--lr", "-1"], ["--lr", "above 0"]),
    ([*TRAIN, "--lr", "inf"], ["--lr"]),
    ([*TRAIN, "--batch-size", "0"], ["--batch-size", "outside"]),
    ([*TRAIN, "--batch-size", "-1"], ["--batch-size", "outside"]),
    ([*TRAIN, "--epochs", "1000000000"], ["--epochs", "outside"]),
    ([*IMPORTANCE, "--draws", "10000000"], ["--draws", "outside"]),
    ([*IMPORTANCE, "--max-inputs", "0"], ["--max-inputs"]),
    (["fuzz", "--model", "{model}", "--data", "digits", "--eps", "0.1", "--time-budget", "0"], ["--time-budget"]),
    # criterion options that would allocate without bound or are not whole
    ([*COVERAGE, "--option", "kmnc.k=1e12"], ["KMNC's k", "outside"]),
    ([*COVERAGE, "--option", "kmnc.k=2.5"], ["KMNC's k", "whole number"]),
    ([*COVERAGE, "--option", "kmnc.k=\"ten\""], ["KMNC's k", "whole number"]),
    # devices the workbench does not compute on
    ([*EVALUATE, "--device", "meta"], ["CPU or a CUDA GPU", "meta"]),
    ([*EVALUATE, "--device", "mps"], ["mps"]),
    # empty names
    (["evaluate", "--model", "", "--data", "digits"], ["--model", "empty"]),
    ([*EVALUATE, "--project", ""], ["--project", "empty"]),
    # outputs that cannot be written, refused before the run
    (["train", "--model", "digits-net", "--data", "digits", "--out", "{folder}"], ["--out", "is a folder"]),
    (["train", "--model", "digits-net", "--data", "digits", "--out", "{file}/m.pt"], ["--out", "which is a file"]),
    (["train", "--model", "digits-net", "--data", "digits", "--out", "/proc/m.pt"], ["--out", "cannot write in /proc"]),
    ([*COVERAGE, "--save-state", "/proc/x"], ["--save-state", "cannot write in /proc"]),
    ([*COVERAGE, "--save-state", "{file}"], ["--save-state", "is a file"]),
], ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0] in ("train", "evaluate", "coverage", "importance",
                                                                            "fuzz", "select") else None)
def test_arguments_that_cannot_work_are_refused_first(capsys, tmp_path, digits_model_file, argv, words):
    out, folder, file = tmp_path / "m.pt", tmp_path / "folder", tmp_path / "a-file"
    folder.mkdir()
    file.write_text("x")
    argv = [a.format(model=digits_model_file, out=out, folder=folder, file=file) for a in argv]
    rc, stdout, err = run_cli(capsys, *argv)
    assert_clean_failure(rc, err, *words)
    assert "pool of 1000000000" not in err
    assert not out.exists() and list(folder.iterdir()) == [] and file.read_text() == "x"


@pytest.mark.parametrize("budget", [0, -3, "0%", "-5%", "nan%"])
def test_a_budget_that_selects_nothing_says_so_without_an_invented_pool_size(budget):
    from workbench.core.errors import WorkbenchError
    from workbench.core.robustness.selection import resolve_budget

    with pytest.raises(WorkbenchError) as caught:
        resolve_budget(budget, None)
    assert "selects no test" in caught.value.message or "not a percentage" in caught.value.message
    assert "pool of" not in caught.value.message


def test_importance_and_coverage_default_to_the_same_layer(capsys, digits_model_file):
    from cli_helpers import run_json

    importance = run_json(capsys, "importance", "--model", digits_model_file, "--data", "digits")
    coverage = run_json(capsys, "coverage", "--model", digits_model_file, "--data", "digits", "--criteria", "idc")
    assert importance["layer"] == coverage["layer"] == "fc1"


@pytest.mark.parametrize("subset, size", [(["--first", "40"], 40), (["--indices", "0,3,5-9"], 7),
                                          (["--class", "3"], None), (["--indices", "{file}"], 3)])
def test_subsets_by_first_indices_or_class_wherever_a_test_set_is_taken(capsys, tmp_path, digits_model_file, digits,
                                                                       subset, size):
    from cli_helpers import run_json

    index_file = tmp_path / "indices.txt"
    index_file.write_text("2\n4\n6\n")
    subset = [a.format(file=index_file) for a in subset]
    expected = size if size is not None else int((digits.split("test").labels == 3).sum())
    evaluate, coverage = ([a.format(model=digits_model_file) for a in argv] for argv in (EVALUATE, COVERAGE[:-2]))
    evaluated = run_json(capsys, *evaluate, *subset)
    assert evaluated["n"] == expected
    covered = run_json(capsys, *coverage, "--criteria", "nc", *subset)
    assert covered["test_inputs"] == expected
    scored = run_json(capsys, "fol", "--model", digits_model_file, "--data", "digits", "--eps", "0.1", *subset)
    assert scored["inputs"] == expected
    uncertain = run_json(capsys, "uncertainty", "--model", digits_model_file, "--data", "digits", *subset)
    assert uncertain["inputs"] == expected


def test_two_subset_options_at_once_are_refused(capsys, digits_model_file):
    rc, _, err = run_cli(capsys, *[a.format(model=digits_model_file) for a in EVALUATE], "--first", "3",
                         "--class", "1")
    assert_clean_failure(rc, err, "--first and --class")
