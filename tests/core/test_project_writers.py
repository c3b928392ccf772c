"""Several writers of one project, staged saves, and repair on opening.

Two processes save different results to one project at the same time, several rounds: every
result is indexed and no file is orphaned. A writer killed between the rename of an artifact and its
index entry leaves a file that opening indexes again; temporary files of dead writers are removed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.project.folder import STALE_TEMP_S, Project
from workbench.core.project.staging import StagedProject, run_staged

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from workbench.core.project.folder import Project

    folder, who, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for i in range(count):
        project = Project.open(folder)
        project.save_artifact("result", f"{who}-{i}", {"v": np.full(64, i)}, writer=who)
        project.add_model(f"model-{who}-{i}")
""")


def _indexed_files(project: Project) -> set[str]:
    return {e["file"] for e in project.artifacts().values()}


def _h5_files(project: Project) -> set[str]:
    return {p.relative_to(project.folder).as_posix() for p in (project.folder / "artifacts").rglob("*.h5")}


@pytest.mark.parametrize("round_", range(3))
def test_two_processes_saving_at_once_lose_nothing(tmp_path, round_):
    Project.create(tmp_path / "p", "digits")
    count = 12
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "p"), who, str(count)], env=env,
                                stderr=subprocess.PIPE) for who in ("a", "b")]
    for w in writers:
        assert w.wait(timeout=120) == 0, w.stderr.read().decode()
    project = Project.open(tmp_path / "p")
    expected = {f"{who}-{i}" for who in "ab" for i in range(count)}
    assert set(project.artifacts("result")) == expected
    assert {m["name"] for m in project.models} == {f"model-{who}-{i}" for who in "ab" for i in range(count)}
    assert _indexed_files(project) == _h5_files(project)  # no orphans
    for name in expected:
        assert project.load_artifact(name)["v"][0] == int(name.split("-")[1])
    assert not list((tmp_path / "p").rglob("*.tmp")) and project.problems == []


def test_a_stale_in_memory_project_does_not_overwrite_another_writer(tmp_path):
    first = Project.create(tmp_path / "p", "digits")
    second = Project.open(tmp_path / "p")
    second.save_artifact("result", "from second", {"v": np.ones(2)})
    first.save_artifact("result", "from first", {"v": np.zeros(2)})  # first never saw the other save
    first.set_gui(layout={"view": "data"})
    reopened = Project.open(tmp_path / "p")
    assert set(reopened.artifacts()) == {"from first", "from second"}
    assert reopened.settings["gui"]["layout"] == {"view": "data"}
    second.reload()
    assert set(second.artifacts()) == {"from first", "from second"}


def test_crash_between_rename_and_index_is_repaired_on_open(tmp_path):
    project = Project.create(tmp_path / "p", "digits")
    project.save_artifact("result", "kept", {"v": np.ones(3)})
    staged = project.stage_artifact("result", "renamed but not indexed", {"v": np.arange(5)}, seed=3)
    os.replace(staged.temporary, project.folder / staged.entry["file"])  # the writer dies here
    reopened = Project.open(tmp_path / "p")
    assert set(reopened.artifacts()) == {"kept", "renamed but not indexed"}
    assert any("renamed but not indexed" in p and "indexed again" in p for p in reopened.problems)
    artifact = reopened.load_artifact("renamed but not indexed")
    assert list(artifact["v"]) == [0, 1, 2, 3, 4] and artifact.provenance["seed"] == 3
    assert "renamed but not indexed" in json.loads((tmp_path / "p" / "project.json").read_text())["artifacts"]
    assert Project.open(tmp_path / "p").problems == []  # repaired once, for good


def test_unreadable_orphan_is_reported_and_left(tmp_path):
    project = Project.create(tmp_path / "p", "digits")
    orphan = project.folder / "artifacts" / "result" / "junk.h5"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"not hdf5")
    reopened = Project.open(tmp_path / "p")
    assert any("junk.h5" in p and "cannot be read" in p for p in reopened.problems)
    assert orphan.exists() and reopened.artifacts() == {}


def test_temporary_files_of_dead_writers_are_removed_live_ones_kept(tmp_path):
    project = Project.create(tmp_path / "p", "digits")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    staged = project.stage_artifact("result", "writer died", {"v": np.ones(2)}).temporary
    of_dead = staged.with_name(staged.name.replace(f".pid{os.getpid()}.", f".pid{dead_pid}."))
    staged.rename(of_dead)
    live = project.stage_artifact("result", "a long job still running", {"v": np.ones(2)}).temporary
    past = time.time() - STALE_TEMP_S - 60
    os.utime(live, (past, past))  # old, but its writer (this process) is alive: kept
    folder = project.folder / "artifacts" / "result"
    unknown_old, unknown_fresh = folder / ".crash.h5.abc.tmp", folder / ".writing.h5.def.tmp"
    for f in (unknown_old, unknown_fresh):
        f.write_bytes(b"partial")
    os.utime(unknown_old, (past, past))
    root_old = project.folder / ".project.json.xyz.tmp"
    root_old.write_text("{")
    os.utime(root_old, (past, past))
    reopened = Project.open(tmp_path / "p")
    assert not of_dead.exists() and live.exists()
    assert not unknown_old.exists() and unknown_fresh.exists() and not root_old.exists()
    assert reopened.artifacts() == {}
    project.commit([project.stage_artifact("result", "kept working", {"v": np.ones(2)})])  # the live writer goes on
    assert "kept working" in Project.open(tmp_path / "p").artifacts()


def test_a_staged_file_removed_before_the_commit_is_a_clear_error(tmp_path):
    project = Project.create(tmp_path / "p", "digits")
    staged = project.stage_artifact("result", "lost", {"v": np.ones(2)})
    staged.temporary.unlink()
    with pytest.raises(WorkbenchError, match="temporary file was removed"):
        project.commit([staged])
    assert Project.open(tmp_path / "p").artifacts() == {}


@pytest.mark.parametrize("file", ["../outside.h5", "/tmp/elsewhere.h5", "artifacts/../../outside.h5"])
def test_an_index_entry_pointing_outside_the_project_is_refused(tmp_path, file):
    project = Project.create(tmp_path / "p", "digits")
    project.save_artifact("result", "fine", {"v": np.ones(2)})
    victim = tmp_path / "outside.h5"
    victim.write_bytes(b"not yours")
    settings = json.loads((project.folder / "project.json").read_text())
    settings["artifacts"]["evil"] = {"kind": "result", "file": file, "provenance": {}}
    (project.folder / "project.json").write_text(json.dumps(settings))
    reopened = Project.open(tmp_path / "p")
    assert any("evil" in p and "outside" in p for p in reopened.problems)
    with pytest.raises(WorkbenchError, match="outside"):
        reopened.load_artifact("evil")
    reopened.delete_artifact("evil")
    assert victim.read_bytes() == b"not yours" and "evil" not in Project.open(tmp_path / "p").artifacts()
    reopened.save_artifact("result", "evil", {"v": np.zeros(2)})  # replacing it never deletes the outside file
    assert victim.read_bytes() == b"not yours"
    assert "fine" in reopened.artifacts()


def test_backup_is_written_atomically(tmp_path, monkeypatch):
    project = Project.create(tmp_path / "p", "digits")
    renames = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renames.append(os.path.basename(b)), real(a, b))[1])
    project.add_model("m")
    assert renames == ["project.json.bak", "project.json"]


# --- staged saves ----------------------------------------------------------------------------------

def _job(ctx, project=None, fail=False):
    project.save_artifact("result", "one", {"v": np.ones(2)})
    project.save_artifact("result", "two", {"v": np.ones(2)})
    if fail:
        raise WorkbenchError("broken", "fix it")
    ctx.check()
    return "done"


def test_staged_saves_commit_together(tmp_path):
    project = Project.create(tmp_path / "p", "digits")
    assert run_staged(JobContext("cpu"), _job, project) == "done"
    assert set(Project.open(tmp_path / "p").artifacts()) == {"one", "two"}


@pytest.mark.parametrize("how", ["fails", "cancelled"])
def test_failed_or_cancelled_job_stores_nothing(tmp_path, how):
    project = Project.create(tmp_path / "p", "digits")
    ctx = JobContext("cpu")
    if how == "cancelled":
        ctx.cancel()
    with pytest.raises(WorkbenchError if how == "fails" else Cancelled):
        run_staged(ctx, _job, project, fail=how == "fails")
    assert Project.open(tmp_path / "p").artifacts() == {}
    assert not list((tmp_path / "p").rglob("*.h5")) and not list((tmp_path / "p").rglob("*.tmp"))


def test_staged_project_reads_through_and_hides_results_for_a_fresh_run(tmp_path):
    project = Project.create(tmp_path / "p", "digits")
    project.save_artifact("result", "old", {"v": np.ones(2)}, cache_key="k")
    assert StagedProject(project).find_artifact("result", cache_key="k") == "old"
    assert StagedProject(project, reuse=False).find_artifact("result", cache_key="k") is None
    with StagedProject(project) as staged:
        staged.save_artifact("result", "new", {"v": np.ones(2)})
        staged.save_artifact("result", "new", {"v": np.zeros(2)})  # saved twice: the last one counts
        assert "new" not in project.artifacts()  # not before the commit
    assert list(project.load_artifact("new")["v"]) == [0, 0]
    assert len(list((tmp_path / "p").rglob("*.h5"))) == 2


def test_names_whose_file_names_agree_get_two_files(tmp_path):
    project = Project.create(tmp_path / "p", "digits")
    project.save_artifact("result", "a/b", {"v": np.ones(1)})
    project.save_artifact("result", "a-b", {"v": np.zeros(1)})
    assert project.load_artifact("a/b")["v"][0] == 1 and project.load_artifact("a-b")["v"][0] == 0
