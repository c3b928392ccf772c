"""Damaged and half-lost projects: a folder with only the backup or only artifacts is never taken over
by a new project; a project.json of the wrong shape is refused with a message, never a traceback; an
index entry of the wrong shape is set aside (kept in the file) and the rest opens; a full disk is
reported as such and leaves the project as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.project.folder import PROJECT_FORMAT, Project


def _settings(**changes) -> dict:
    base = {"format": PROJECT_FORMAT, "version": 1, "name": "p", "datasets": ["digits"], "models": [],
            "testsets": [], "artifacts": {}, "gui": {}}
    base.update(changes)
    return base


# --- item 2: never create a project over a backup or artifacts --------------------------------------

@pytest.mark.parametrize("left", ["backup", "artifacts", "both"])
def test_a_folder_with_a_backup_or_artifacts_is_not_taken_over(tmp_path, left):
    project = Project.create(tmp_path / "p", "digits")
    project.add_model("lenet5-fashion")  # a second write: project.json.bak now exists
    project.save_artifact("result", "kept", {"v": np.arange(3)})
    folder = project.folder
    backup = (folder / "project.json.bak").read_text()
    (folder / "project.json").unlink()
    if left == "artifacts":
        (folder / "project.json.bak").unlink()
    if left == "backup":
        for f in (folder / "artifacts").rglob("*.h5"):
            f.unlink()
    for make in (lambda: Project.create(folder, "digits"), lambda: Project.open_or_create(folder, "digits")):
        with pytest.raises(WorkbenchError) as caught:
            make()
        text = str(caught.value)
        if left != "artifacts":
            assert "project.json.bak" in text and "rename" in text.lower()
        else:
            assert "artifact" in text
    assert not (folder / "project.json").exists()
    if left != "artifacts":
        assert (folder / "project.json.bak").read_text() == backup  # untouched


def test_opening_a_folder_with_only_the_backup_says_how_to_restore_it(tmp_path):
    project = Project.create(tmp_path / "p", "digits")
    project.add_model("lenet5-fashion")
    (project.folder / "project.json").unlink()
    with pytest.raises(WorkbenchError, match="project.json.bak"):
        Project.open(project.folder)


def test_the_cli_never_creates_a_project_over_a_backup(tmp_path, digits_model_file):
    project = Project.create(tmp_path / "p", "digits")
    project.add_model("lenet5-fashion")
    (project.folder / "project.json").unlink()
    backup = (project.folder / "project.json.bak").read_bytes()
    from workbench.cli import main

    code = main(["evaluate", "--model", str(digits_model_file), "--data", "digits", "--project",
                 str(project.folder)])
    assert code != 0
    assert not (project.folder / "project.json").exists()
    assert (project.folder / "project.json.bak").read_bytes() == backup


# --- item 8: project.json of the wrong shape ------------------------------------------------------------

@pytest.mark.parametrize("changes", [
    {"version": "abc"}, {"version": None}, {"version": 1.5}, {"version": True}, {"version": -1},
    {"artifacts": []}, {"artifacts": None}, {"artifacts": "x"}, {"datasets": {"a": 1}}, {"models": None},
    {"testsets": "digits:test"}, {"gui": []}, {"name": 7},
], ids=lambda c: "-".join(f"{k}={v!r}" for k, v in c.items()))
def test_a_project_file_of_the_wrong_shape_is_refused_with_a_message(tmp_path, changes):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "project.json").write_text(json.dumps(_settings(**changes)))
    with pytest.raises(WorkbenchError) as caught:
        Project.open(folder)
    key = next(iter(changes))
    assert key in caught.value.message and "project.json" in caught.value.message


@pytest.mark.parametrize("entry", ["a string", None, 3, [], {"kind": "result"}, {"file": "artifacts/x.h5"},
                                   {"kind": 3, "file": "artifacts/x.h5"}, {"kind": "result", "file": None},
                                   {"kind": "result", "file": "artifacts/x.h5", "provenance": "text"}],
                         ids=repr)
def test_an_index_entry_of_the_wrong_shape_is_set_aside_and_the_rest_opens(tmp_path, entry):
    project = Project.create(tmp_path / "p", "digits")
    project.save_artifact("result", "good", {"v": np.arange(3)})
    settings = json.loads((project.folder / "project.json").read_text())
    settings["artifacts"]["bad"] = entry
    settings["models"].append("not a model entry")
    (project.folder / "project.json").write_text(json.dumps(settings))
    reopened = Project.open(project.folder)
    assert set(reopened.artifacts()) == {"good"}
    assert any("bad" in p for p in reopened.problems)
    assert any("models" in p for p in reopened.problems)
    assert reopened.load_artifact("good")["v"].tolist() == [0, 1, 2]
    reopened.save_artifact("result", "new", {"v": np.arange(2)})  # a write keeps what was set aside
    kept = json.loads((project.folder / "project.json").read_text())
    assert kept["unreadable"]["artifacts"]["bad"] == entry
    assert kept["unreadable"]["models"] == ["not a model entry"]
    assert set(Project.open(project.folder).artifacts()) == {"good", "new"}


# --- item 4: a full disk ------------------------------------------------------------------------------

FULL_DISK = textwrap.dedent("""
    import resource, signal, sys
    import numpy as np
    from workbench.core.errors import WorkbenchError
    from workbench.core.project.folder import Project

    project = Project.open(sys.argv[1])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
    try:
        if sys.argv[3] == "artifact":
            project.save_artifact("result", "too big", {"v": np.random.default_rng(0).random(400_000)})
        else:
            project.set_gui(layout={"note": "x" * 200_000})
    except WorkbenchError as exc:
        print(exc.message)
        sys.exit(3)
    sys.exit(0)
""")


@pytest.mark.parametrize("what", ["artifact", "settings"])
def test_a_full_disk_is_reported_and_the_project_is_kept(tmp_path, what):
    project = Project.create(tmp_path / "p", "digits")
    project.save_artifact("result", "kept", {"v": np.arange(5)})
    before = (project.folder / "project.json").read_text()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([sys.executable, "-c", FULL_DISK, str(project.folder), "60000", what], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 3, run.stderr[-2000:]
    assert "disk" in run.stdout and "full" in run.stdout, run.stdout
    assert len(run.stderr.strip().splitlines()) < 3  # no traceback
    assert (project.folder / "project.json").read_text() == before
    assert not [p for p in project.folder.rglob("*") if p.name.endswith(".tmp")]
    reopened = Project.open(project.folder)
    assert reopened.problems == [] and reopened.load_artifact("kept")["v"].tolist() == [0, 1, 2, 3, 4]
