"""The project store: versioned project.json written atomically with a .bak, one HDF5 file per
artifact written under a temporary name and renamed, provenance, and opening damaged projects."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.project import store
from workbench.core.project.folder import PROJECT_FORMAT, PROJECT_VERSION, Project
from workbench.core.project.store import read_artifact, write_artifact, write_json


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_new_project_settings(tmp_project):
    data = json.loads((tmp_project.folder / "project.json").read_text())
    assert data["format"] == PROJECT_FORMAT and data["version"] == PROJECT_VERSION
    assert data["datasets"] == ["digits"]
    assert data["models"] == [{"name": "digits-net", "spec": "digits-net"}]
    first = data["testsets"][0]  # the dataset's test split is the first test set
    assert (first["dataset"], first["split"]) == ("digits", "test")
    assert tmp_project.testsets[0]["name"] == "digits:test"
    assert data["artifacts"] == {}
    assert tmp_project.problems == [] and not tmp_project.read_only


def test_create_refuses_an_existing_project(tmp_project):
    with pytest.raises(WorkbenchError, match="already holds a project"):
        Project.create(tmp_project.folder, "digits")


def test_added_datasets_bring_their_test_split(tmp_project):
    tmp_project.add_dataset("mnist-5k")
    tmp_project.add_dataset("mnist-5k")  # once only
    reopened = Project.open(tmp_project.folder)
    assert reopened.datasets == ["digits", "mnist-5k"]
    assert [t["name"] for t in reopened.testsets] == ["digits:test", "mnist-5k:test"]


def test_settings_keep_the_previous_version_as_bak(tmp_project):
    folder = tmp_project.folder
    before = (folder / "project.json").read_text()
    tmp_project.add_model("lenet5-fashion")
    assert (folder / "project.json.bak").read_text() == before
    assert "lenet5-fashion" in (folder / "project.json").read_text()
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_json_is_written_under_a_temporary_name_and_renamed(tmp_path, monkeypatch):
    renames = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renames.append((Path(a), Path(b))), real(a, b))[1])
    write_json(tmp_path / "s.json", {"a": 1})
    (src, dst), = renames
    assert dst == tmp_path / "s.json" and src.parent == tmp_path and src.name != "s.json"
    assert not src.exists() and json.loads(dst.read_text()) == {"a": 1}


def test_failed_json_write_leaves_the_old_file(tmp_path):
    write_json(tmp_path / "s.json", {"a": 1})
    with pytest.raises(TypeError):
        write_json(tmp_path / "s.json", {"a": object()})
    assert json.loads((tmp_path / "s.json").read_text()) == {"a": 1}
    assert _files(tmp_path) == {"s.json"}


# --- artifacts ----------------------------------------------------------------------------------------

def test_artifact_roundtrip_with_provenance(tmp_project):
    arrays = {"confusion": np.arange(9).reshape(3, 3), "scores": np.linspace(0, 1, 5000).astype(np.float32),
              "names": np.array(["ant", "bee"])}
    entry = tmp_project.save_artifact("evaluation", "eval: net/on digits", arrays, model="net", seed=7,
                                      layer="fc1", neuron={"point": "post"})
    path = tmp_project.folder / entry["file"]
    assert path.suffix == ".h5" and path.parent.name == "evaluation"
    reopened = Project.open(tmp_project.folder)
    assert reopened.problems == []
    art = reopened.load_artifact("eval: net/on digits")
    assert art.kind == "evaluation"
    np.testing.assert_array_equal(art["confusion"], arrays["confusion"])
    np.testing.assert_array_equal(art["scores"], arrays["scores"])
    assert art["names"].tolist() == ["ant", "bee"]
    how = art.provenance
    assert (how["model"], how["seed"], how["layer"], how["neuron"]) == ("net", 7, "fc1", {"point": "post"})
    assert {"torch", "numpy", "h5py", "workbench", "python"} <= set(how["versions"])
    assert how["created"]
    assert reopened.artifacts("evaluation")["eval: net/on digits"]["provenance"] == how
    assert reopened.find_artifact("evaluation", model="net", seed=7) == "eval: net/on digits"
    assert reopened.find_artifact("evaluation", model="other") is None


def test_artifact_is_written_under_a_temporary_name_and_renamed(tmp_path, monkeypatch):
    renames = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renames.append((Path(a), Path(b))), real(a, b))[1])
    write_artifact(tmp_path / "a.h5", "test", {"x": np.ones(3)}, {})
    (src, dst), = renames
    assert dst == tmp_path / "a.h5" and src.parent == tmp_path and src.name.endswith(".tmp")
    assert _files(tmp_path) == {"a.h5"}


def test_failed_artifact_write_keeps_the_old_one(tmp_project):
    tmp_project.save_artifact("scores", "s", {"x": np.arange(4)})
    path = tmp_project.folder / tmp_project.artifacts()["s"]["file"]
    before = path.read_bytes()
    with pytest.raises(TypeError):  # h5py cannot store Python objects; fails half-way through the write
        tmp_project.save_artifact("scores", "s", {"y": np.arange(3), "x": np.array([object()], dtype=object)})
    assert path.read_bytes() == before
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    np.testing.assert_array_equal(Project.open(tmp_project.folder).load_artifact("s")["x"], np.arange(4))


def test_replace_and_delete_artifacts(tmp_project):
    tmp_project.save_artifact("scores", "s", {"x": np.arange(4)})
    tmp_project.save_artifact("scores", "s", {"x": np.arange(2)})
    assert tmp_project.load_artifact("s")["x"].tolist() == [0, 1]
    file = tmp_project.folder / tmp_project.artifacts()["s"]["file"]
    tmp_project.delete_artifact("s")
    assert not file.exists() and "s" not in Project.open(tmp_project.folder).artifacts()
    with pytest.raises(WorkbenchError, match="no result named 's'"):
        tmp_project.load_artifact("s")


def test_testset_artifacts_are_listed_after_the_dataset_split(tmp_project):
    tmp_project.save_artifact("testset", "fuzzed", {"x": np.zeros((2, 1, 8, 8))}, how="fuzzing")
    names = [t["name"] for t in Project.open(tmp_project.folder).testsets]
    assert names == ["digits:test", "fuzzed"]


# --- damaged projects -------------------------------------------------------------------------------------

def test_damaged_artifact_is_reported_and_the_rest_opens(tmp_project):
    tmp_project.save_artifact("scores", "good", {"x": np.arange(3)})
    tmp_project.save_artifact("scores", "bad", {"x": np.arange(3)})
    tmp_project.save_artifact("scores", "gone", {"x": np.arange(3)})
    bad = tmp_project.folder / tmp_project.artifacts()["bad"]["file"]
    bad.write_bytes(bad.read_bytes()[:100])  # truncated
    (tmp_project.folder / tmp_project.artifacts()["gone"]["file"]).unlink()
    p = Project.open(tmp_project.folder)
    assert len(p.problems) == 2
    assert any(s.startswith("bad:") and "damaged" in s for s in p.problems)
    assert any(s.startswith("gone:") and "missing" in s for s in p.problems)
    assert p.load_artifact("good")["x"].tolist() == [0, 1, 2]
    assert p.find_artifact("scores") == "good"  # damaged ones are never picked
    with pytest.raises(WorkbenchError) as err:
        p.load_artifact("bad")
    assert bad.name in err.value.message and "compute it again" in err.value.hint


def test_foreign_and_newer_hdf5_files_are_refused(tmp_path):
    import h5py

    with h5py.File(tmp_path / "foreign.h5", "w") as f:
        f["x"] = np.ones(2)
    with pytest.raises(WorkbenchError, match="not a workbench artifact"):
        read_artifact(tmp_path / "foreign.h5")
    write_artifact(tmp_path / "new.h5", "x", {"x": np.ones(1)}, {})
    with h5py.File(tmp_path / "new.h5", "a") as f:
        f.attrs["workbench_artifact"] = store.ARTIFACT_VERSION + 1
    with pytest.raises(WorkbenchError, match="newer workbench"):
        read_artifact(tmp_path / "new.h5")


def test_damaged_project_json_points_at_the_bak(tmp_project):
    tmp_project.add_model("lenet5-fashion")  # now there is a .bak
    (tmp_project.folder / "project.json").write_text('{"format": "dl-workbench-proj')
    with pytest.raises(WorkbenchError) as err:
        Project.open(tmp_project.folder)
    assert "project.json" in err.value.message and "damaged" in err.value.message
    assert "project.json.bak" in err.value.hint
    # following the hint works
    (tmp_project.folder / "project.json.bak").replace(tmp_project.folder / "project.json")
    assert Project.open(tmp_project.folder).datasets == ["digits"]


def test_damaged_project_json_without_bak(tmp_path):
    (tmp_path / "project.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(WorkbenchError) as err:
        Project.open(tmp_path)
    assert "backup" in err.value.hint


def test_not_a_project_and_newer_project(tmp_path):
    with pytest.raises(WorkbenchError, match="not a project folder"):
        Project.open(tmp_path)
    (tmp_path / "project.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(WorkbenchError, match="not a workbench project"):
        Project.open(tmp_path)
    (tmp_path / "project.json").write_text(json.dumps({"format": PROJECT_FORMAT, "version": PROJECT_VERSION + 1}))
    with pytest.raises(WorkbenchError, match="newer workbench"):
        Project.open(tmp_path)


# --- read-only folders ------------------------------------------------------------------------------------

def _pretend_read_only(monkeypatch, folder):
    real = os.access

    def access(path, mode, *a, **k):
        if Path(path) == Path(folder) and mode & os.W_OK:
            return False
        return real(path, mode, *a, **k)

    monkeypatch.setattr(os, "access", access)


def test_read_only_project_opens_for_viewing(tmp_project, monkeypatch):
    tmp_project.save_artifact("scores", "s", {"x": np.arange(3)})
    before = {p: p.read_bytes() for p in tmp_project.folder.rglob("*") if p.is_file()}
    _pretend_read_only(monkeypatch, tmp_project.folder)
    p = Project.open(tmp_project.folder)
    assert p.read_only
    assert any("read-only" in s for s in p.problems)
    assert p.load_artifact("s")["x"].tolist() == [0, 1, 2]
    with pytest.raises(WorkbenchError) as err:
        p.save_artifact("scores", "t", {"x": np.arange(2)})
    assert "read-only" in err.value.message and "Copy the project" in err.value.hint
    with pytest.raises(WorkbenchError, match="read-only"):
        p.add_model("lenet5-fashion")
    with pytest.raises(WorkbenchError, match="read-only"):
        p.delete_artifact("s")
    after = {p: p.read_bytes() for p in tmp_project.folder.rglob("*") if p.is_file()}
    assert after == before  # nothing already saved is touched


def test_really_read_only_folder(tmp_project):
    folder = tmp_project.folder
    os.chmod(folder, 0o555)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as root: a 0555 folder stays writable")
        p = Project.open(folder)
        assert p.read_only
    finally:
        os.chmod(folder, 0o755)


def test_unwritable_location_gives_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(WorkbenchError) as err:
        Project.create(blocker / "project", "digits")
    assert "folder" in str(err.value)


def test_files_and_folders_written_atomically_follow_the_umask(tmp_path):
    """A temporary file or folder is private while written; what it becomes has the usual permissions."""
    import stat

    from workbench.core.project.store import atomic_folder, atomic_path, process_umask

    with atomic_path(tmp_path / "a.json") as tmp:
        tmp.write_text("{}")
    with atomic_folder(tmp_path / "folder") as tmp:
        (tmp / "x").write_text("x")
    umask = process_umask()
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "folder").stat().st_mode) == 0o777 & ~umask
