"""A script that opens the window without an `if __name__ == "__main__":` guard: every worker process ran the
script again and died of multiprocessing's bootstrapping error (a traceback per worker and job) while the
window carried on as if nothing happened. Now the window says so once, and the jobs run in threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gui

SCRIPT = '''
import json
import sys

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from workbench.core.data.registry import load_dataset_job
from workbench.gui.session.jobs import LONG
from workbench.gui.shell.app import application, run_gui
from workbench.gui.shell.main_window import MainWindow


def window():
    return next((w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)), None)


def a_long_job():
    if window() is not None and not submitted:
        submitted.append(window().runner.submit("Load digits on the long lane", load_dataset_job, "digits", lane=LONG))


# no `if __name__ == "__main__":` guard: each worker process runs this file again while it starts
submitted = []
application()
poll = QTimer()
poll.timeout.connect(a_long_job)
poll.start(50)
code = run_gui(view="model", screenshot=sys.argv[1])
shown = window()
print(json.dumps({"code": code, "notices": [n.text for n in shown.notices.notices()],
                  "jobs": {j.name: (j.record.state, j.record.lane, j.record.where) for j in shown.runner.jobs},
                  "long_jobs": shown.runner.long_jobs}))
'''


def test_a_script_without_a_main_guard_gets_one_message_and_its_jobs_run_in_threads(tmp_path):
    script, shot = tmp_path / "open_workbench.py", tmp_path / "window.png"
    script.write_text(SCRIPT)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "WORKBENCH_DEMO_DIR": str(tmp_path / "demo")}
    run = subprocess.run([sys.executable, str(script), str(shot)], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "bootstrapping" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["code"] == 0 and shot.exists()
    jobs = outcome["jobs"]
    long_job = jobs["Load digits on the long lane"]
    evaluation = next(value for name, value in jobs.items() if name.startswith("Evaluate lenet5-fashion"))
    for state, lane, where in (long_job, evaluation):  # a job of each lane that runs in its worker process
        assert state == "done" and where.startswith("this process") and "guard" in where, (lane, where)
    assert {long_job[1], evaluation[1]} == {"long", "interactive"}
    said = [text for text in outcome["notices"] if "Worker processes cannot start" in text]
    assert len(said) == 1, outcome["notices"]  # once, though both lanes found it
    assert "open_workbench.py" in said[0] and 'if __name__ == "__main__":' in said[0] and "threads" in said[0]
    assert outcome["long_jobs"] == "thread"  # a window opened from this one starts no worker either
