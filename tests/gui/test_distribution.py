"""Jobs → Run long jobs on…: choosing a Ray cluster with the mouse, connecting to it, and the Coverage view's
jobs then running their shards there, with the same figures as one pass and the jobs panel saying where; a cluster
that cannot be reached and a local instance that does not start, said in the dialog."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from workbench.core.execution import sharding
from workbench.core.execution.sharding import Distribution

pytestmark = pytest.mark.gui
ray = pytest.importorskip("ray", reason="Ray is the distributed extra: pip install '.[distributed]'")


@pytest.fixture
def ray_afterwards():
    yield
    sharding.forget_clusters()
    ray.shutdown()


@pytest.mark.timeout(900)  # a busy machine: up to 3 minutes to connect, then the Ray workers' first shards
def test_choosing_ray_runs_the_coverage_shards_there(qtbot, settled_window, ray_afterwards):
    from workbench.core.coverage import measure_coverage
    from workbench.core.execution.jobs import JobContext
    from workbench.gui.session.app_settings import stored_distribution
    from workbench.gui.shell.distribution_dialog import DistributionDialog

    window = settled_window
    window.action_map["run_long_jobs_on"].trigger()
    dialog = window.findChild(DistributionDialog, "distributionDialog")
    assert dialog is not None and dialog.here.isChecked() and not dialog.address.isEnabled()
    qtbot.mouseClick(dialog.ray, Qt.MouseButton.LeftButton)
    assert dialog.address.isEnabled() and dialog.connect_button.isEnabled()
    dialog.shards.setValue(3)
    qtbot.mouseClick(dialog.connect_button, Qt.MouseButton.LeftButton)
    # a bound for a busy machine, where a local Ray instance's processes take long to start
    qtbot.waitUntil(lambda: dialog.status.text().startswith("Connected:"), timeout=180_000)
    assert "CPU" in dialog.status.text()
    qtbot.mouseClick(dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok),
                     Qt.MouseButton.LeftButton)
    assert window.runner.distribution == Distribution("ray", None, 3) == stored_distribution()

    window.activateWindow()  # the dialog had the focus
    qtbot.waitUntil(window.isActiveWindow, timeout=30_000)
    qtbot.keyClick(window, Qt.Key.Key_5, Qt.KeyboardModifier.ControlModifier)
    view = window.views["coverage"]
    qtbot.waitUntil(lambda: window.runner.is_idle() and bool(view.set_keys) and all(
        view.runs.runs.get(k) is not None and view.runs.runs[k].state == "done" for k in view.set_keys),
        timeout=400_000)  # the shards' Ray workers start and import PyTorch: minutes on a busy machine
    jobs = [j for j in window.runner.jobs if j.name.startswith("Coverage of test")]
    assert jobs and jobs[-1].record.shards.startswith("Ray") and jobs[-1].record.shards_short == "Ray"
    tree = window.jobs_panel.tree
    assert any(" · Ray" in tree.topLevelItem(i).text(3) for i in range(tree.topLevelItemCount()))
    session = window.session
    local = measure_coverage(JobContext("cpu"), session.models["lenet5-fashion"].model,
                             session.datasets["fashion-mnist"], "fc2", ["nc", "tknc"])
    on_ray = view.runs.runs["fashion-mnist:test"]
    for name in ("nc", "tknc"):
        assert on_ray.result(name).value == local[name].value


def test_a_cluster_that_cannot_be_reached_is_said_in_the_dialog(qtbot, settled_window):
    window = settled_window
    dialog = window.choose_distribution()
    qtbot.mouseClick(dialog.ray, Qt.MouseButton.LeftButton)
    qtbot.keyClicks(dialog.address, "127.0.0.1:1")
    qtbot.mouseClick(dialog.connect_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Nothing answers" in dialog.status.text(), timeout=30000)
    assert "--executor local" in dialog.status.text() or "Check that the cluster" in dialog.status.text()
    dialog.reject()
    assert window.runner.distribution.executor == "local"


def test_a_local_ray_instance_that_does_not_start_is_said_in_the_dialog(qtbot, settled_window, monkeypatch, tmp_path):
    def time_out(**options):  # what Ray raises when its node's processes do not come up (a killed dashboard agent)
        raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                        "failed to startup or the GCS has become overloaded.")

    monkeypatch.setattr(sharding, "_clusters", {})
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", time_out)
    window = settled_window
    dialog = window.choose_distribution()
    qtbot.mouseClick(dialog.ray, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(dialog.connect_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "did not start" in dialog.status.text(), timeout=30000)
    said = dialog.status.text()
    assert "The local Ray instance did not start" in said and "timed out during startup" in said
    assert "ray stop" in said and "This machine" in said and "Traceback" not in said
    qtbot.waitUntil(dialog.connect_button.isEnabled, timeout=30_000)  # the user can try again
    assert dialog.grab().save(str(tmp_path / "ray-did-not-start.png"))
    dialog.reject()
    assert window.runner.distribution.executor == "local"
    assert not window.dialogs or all(d.objectName() != "errorDialog" for d in window.dialogs)
