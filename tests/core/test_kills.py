"""A writer killed with SIGKILL at any moment leaves a project that opens whole: every artifact file
is indexed (renamed-but-unindexed ones are indexed again on open), no temporary file of the dead
writer survives the opening, and project.json and its backup are complete JSON — over many kills."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np

from workbench.core.project.folder import Project

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    import torch  # a save imports it (its provenance): here, before the word to go
    from workbench.core.project.folder import Project

    folder, start = sys.argv[1], int(sys.argv[2])
    if sys.stdin.readline().strip() != "go":  # the writer before this one is dead and its project checked
        sys.exit(0)  # (no word: the test ended)
    project = Project.open(folder)
    for i in range(start, start + 10_000):
        project.save_artifact("result", f"r{i}", {"v": np.full(20_000, i, np.int64)}, i=i)
        project.set_gui(last=i)
        project.add_model(f"m{i}")
        if i == start:
            print("ready", flush=True)  # one save done: the kill comes in the middle of the next ones
""")

KILLS = 10
AHEAD = 3  # writers started before their turn


def test_many_kills_never_leave_an_unindexed_result_a_stale_temporary_or_an_empty_backup(tmp_path):
    folder = tmp_path / "p"
    Project.create(folder, "digits")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    rng = np.random.default_rng(0)
    saved_before = 0

    def writer_from(start: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", WRITER, str(folder), str(start)], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # The next writers start early and import while the one before them is killed and its project checked.
    upcoming = [writer_from(k * 10_000) for k in range(min(AHEAD, KILLS))]
    for kill in range(KILLS):
        writer = upcoming.pop(0)
        if kill + AHEAD < KILLS:
            upcoming.append(writer_from((kill + AHEAD) * 10_000))
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "ready", writer.stderr.read()
        time.sleep(float(rng.uniform(0.02, 0.4)))
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)

        for name in ("project.json", "project.json.bak"):
            if (folder / name).exists():
                text = (folder / name).read_text()
                assert text.strip(), f"{name} is empty after kill {kill}"
                json.loads(text)
        project = Project.open(folder)
        assert all("indexed again" in p for p in project.problems), project.problems
        indexed = {e["file"] for e in project.artifacts().values()}
        on_disk = {p.relative_to(folder).as_posix() for p in (folder / "artifacts").rglob("*.h5")}
        assert indexed == on_disk, f"kill {kill}: files not indexed: {on_disk - indexed}"
        assert not list(folder.rglob("*.tmp")), f"kill {kill}: temporary files left"
        for name, entry in project.artifacts().items():
            assert int(project.load_artifact(name)["v"][0]) == entry["provenance"]["i"]
        assert len(project.artifacts()) >= saved_before  # nothing saved before was lost
        saved_before = len(project.artifacts())
    assert saved_before > 0
