"""`workbench compare` and `workbench combine` on a project: the table and the three report files, set algebra
stored and resolved with its recipe, the report opened in a real headless browser (Debian's chromium) and its
screenshot checked for its plots, and bad input that ends in a clear message, never a traceback."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess

import numpy as np
import pytest
from cli_helpers import assert_clean_failure, run_cli, run_json

from workbench.core.project.folder import Project
from workbench.core.testsets import resolve




@pytest.fixture(scope="module")
def project(tmp_path_factory, slice_dir):
    folder = tmp_path_factory.mktemp("cmp") / "p"
    Project.create(folder, str(slice_dir), ["lenet5-fashion"])
    return folder


@pytest.fixture(scope="module")
def slice_name(slice_dir):
    return str(slice_dir)


def test_compare_writes_the_table_and_the_reports(capsys, project, slice_name, tmp_path):
    sets = f"{slice_name}:test[first=150],{slice_name}:test[class=Bag],{slice_name}:test[misclassified]"
    html, csv_path, out = tmp_path / "r.html", tmp_path / "r.csv", tmp_path / "r.json"
    data = run_json(capsys, "compare", "--project", project, "--testsets", sets, "--model", "lenet5-fashion",
                    "--resamples", "100", "--novelty-sample", "200", "--report", html, "--csv", csv_path,
                    "--out-json", out)
    assert len(data["sets"]) == 3 and data["settings"]["resamples"] == 100
    bag = data["sets"][1]
    assert bag["class_counts"][8] == bag["size"]  # only bags
    assert html.exists() and json.loads(out.read_text())["settings"] == data["settings"]
    assert any(r[1] == "idc" for r in csv.reader(open(csv_path, newline="")))
    rc, text, _ = run_cli(capsys, "compare", "--project", project, "--testsets", sets, "--model", "lenet5-fashion",
                          "--resamples", "100", "--novelty-sample", "200")
    assert rc == 0 and "IDC coverage" in text and "pairwise differences are supported" in text
    if shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed (make test installs it where it can)")
    shot = tmp_path / "report.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1300,2400", html.as_uri()], check=True, capture_output=True, timeout=120)
    from PySide6.QtGui import QImage

    image = QImage(str(shot))
    assert image.width() == 1300 and image.height() == 2400
    # The plots are there: many distinct colours (the bars' palette) in the page, not a blank one.
    colours = {image.pixel(x, y) for x in range(0, 1300, 7) for y in range(400, 2400, 7)}
    assert len(colours) > 50


def test_combine_stores_set_algebra_with_its_recipe(capsys, project, slice_name):
    a, b = f"{slice_name}:test[first=100]", f"{slice_name}:test[first=60]"
    union = run_json(capsys, "combine", "union", "--project", project, "--testsets", f"{b},{a}", "--name", "u")
    assert union["size"] == 100
    diff = run_json(capsys, "combine", "difference", "--project", project, "--testsets", f"{a},{b}", "--name", "d")
    assert diff["size"] == 40
    both = run_json(capsys, "combine", "intersection", "--project", project, "--testsets", f"u,{b}", "--name", "i")
    assert both["size"] == 60
    opened = Project.open(project)
    first = resolve(opened, a)
    assert resolve(opened, "d").ids.tolist() == first.ids[60:].tolist()
    np.testing.assert_array_equal(resolve(opened, "d").numpy(), first.numpy()[60:])
    assert opened.artifacts("testset")["d"]["provenance"]["recipe"] == f"{a} − {b}"
    new = run_json(capsys, "combine", "adds-new", "--project", project, "--testsets",
                   f"{slice_name}:test[misclassified],{b}", "--name", "n", "--model", "lenet5-fashion")
    assert new["size"] >= 1
    assert "adding new idc items" in Project.open(project).artifacts("testset")["n"]["provenance"]["recipe"]


def test_bad_input_is_refused_clearly(capsys, project, slice_name, tmp_path):
    one = f"{slice_name}:test[first=10]"
    rc, _, err = run_cli(capsys, "compare", "--project", project, "--testsets", one, "--model", "lenet5-fashion")
    assert_clean_failure(rc, err, "two or more")
    rc, _, err = run_cli(capsys, "compare", "--project", project, "--testsets", f"{one},nothing", "--model",
                         "lenet5-fashion")
    assert_clean_failure(rc, err, "No test set")
    rc, _, err = run_cli(capsys, "compare", "--project", project, "--testsets", f"{one},u", "--model",
                         "lenet5-fashion", "--criteria", "idc,lsa")
    assert_clean_failure(rc, err, "Cannot compare by")
    rc, _, err = run_cli(capsys, "compare", "--project", project, "--testsets", f"{one},u", "--model",
                         "lenet5-fashion", "--report", tmp_path / "r.txt")
    assert_clean_failure(rc, err, ".html")
    rc, _, err = run_cli(capsys, "compare", "--project", project, "--testsets", f"{one},u", "--model",
                         "lenet5-fashion", "--csv", tmp_path / "missing" / "r.csv")
    assert_clean_failure(rc, err, "does not exist")
    rc, _, err = run_cli(capsys, "combine", "union", "--testsets", f"{one},u", "--name", "x")
    assert_clean_failure(rc, err, "--project")
    rc, _, err = run_cli(capsys, "combine", "union", "--project", project, "--testsets", f"{one},u", "--name", "u")
    assert_clean_failure(rc, err, "already has")
    rc, _, err = run_cli(capsys, "combine", "intersection", "--project", project, "--testsets",
                         f"{slice_name}:test[first=5],{slice_name}:test[indices=900-905]", "--name", "empty")
    assert_clean_failure(rc, err, "holds no inputs")
    rc, _, err = run_cli(capsys, "combine", "adds-new", "--project", project, "--testsets", f"{one},u", "--name", "z")
    assert_clean_failure(rc, err, "--model")
