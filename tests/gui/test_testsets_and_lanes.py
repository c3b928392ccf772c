"""Every kind of test set in the GUI, and interactive work beside long work.

The Coverage view measures a stored attack pool, fuzzer tests and a selection exactly as the core
measures them; a gallery asked for while a long job holds the long lane finishes before it; a job
queued behind another says what it waits for; the Robustness view never starts retraining by itself.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from gui_helpers import robustness_set_up
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from workbench.core.execution.jobs import JobContext
from workbench.gui.session.jobs import INTERACTIVE, LONG, QUEUED, RUNNING

pytestmark = pytest.mark.gui

MODEL, DATASET, LAYER = "lenet5-fashion", "fashion-mnist", "fc2"
STORED = ("pool", "fuzzed", "picked")


def idle(window) -> bool:
    return window.session.is_ready and window.runner.is_idle()


def store_sets(window) -> dict:
    """An attack pool of 60 training images, the fuzzer's tests from 12 seeds and a selection of the
    pool, stored in the window's project as the CLI and the Robustness view store them."""
    from workbench.core.robustness.fuzzing import fuzz
    from workbench.core.robustness.pool import build_pool, save_pool

    session = window.session
    model, data = session.models[MODEL].model, session.datasets[DATASET]
    ctx = JobContext("cpu")
    train = data.split("train")
    pool = build_pool(ctx, model, train, 0.1, seed=0, indices=np.arange(60), what="train")
    tests = fuzz(ctx, model, train, eps=0.1, n_seeds=12, seed=0, mutations_per_seed=20, time_budget_s=20)
    assert len(pool) > 10 and len(tests) > 0
    project = session.project
    save_pool(project, "pool", pool, kind_of_pool="train", dataset=DATASET)
    save_pool(project, "picked", pool.subset(np.arange(0, len(pool), 2)), selected_from="pool", dataset=DATASET)
    project.save_artifact("testset", "fuzzed", tests.to_arrays(), role="fuzz-tests", dataset=DATASET)
    session.project_changed.emit()
    return {"pool": pool, "fuzzed": tests}


def test_coverage_view_measures_a_pool_fuzzer_tests_and_a_selection(qtbot, settled_window, tmp_path):
    from workbench.core.coverage import measure_coverage
    from workbench.core.models.activations import NeuronDefinition
    from workbench.core.testsets import resolve

    window = settled_window
    store_sets(window)
    qtbot.keyClick(window, Qt.Key.Key_5, Qt.KeyboardModifier.ControlModifier)
    view = window.views["coverage"]
    qtbot.waitUntil(lambda: idle(window) and bool(view.choices), timeout=90000)
    offered = {c.key: c for c in view.choices}
    for name in STORED:
        assert f"stored:{name}" in offered and not offered[f"stored:{name}"].reason
    assert "attack pool" in offered["stored:pool"].description
    assert "fuzzer tests" in offered["stored:fuzzed"].description
    assert "selection" in offered["stored:picked"].description
    view.choose_criteria(["idc", "nc", "kmnc"])
    view.choose_sets([f"stored:{name}" for name in STORED])
    runs = view.runs.runs
    qtbot.waitUntil(lambda: idle(window) and all(runs[f"stored:{n}"].state == "done" for n in STORED), timeout=120000)

    session = window.session
    model, data = session.models[MODEL].model, session.datasets[DATASET]
    for name in STORED:
        run = runs[f"stored:{name}"]
        test = resolve(session.project, name, data)
        expected = measure_coverage(JobContext("cpu"), model, data, NeuronDefinition(LAYER), ("nc", "kmnc"),
                                    test_split=test)
        for criterion in ("nc", "kmnc"):
            got = run.result(criterion)
            assert got is not None, (name, criterion, run.criterion_error(criterion))
            assert got.value == expected[criterion].value, (name, criterion)
            assert got.curve[-1, 0] == len(test)  # every input of the stored set was measured
        assert run.result("idc") is not None and run.result("idc").curve[-1, 0] == len(test)
        assert view.table.text("nc", f"stored:{name}").startswith(f"{100 * expected['nc'].value.fraction:.1f} %")

    # a cell of the IDC matrix lists the stored set's own inputs
    matrix = view.idc.matrix
    idc = runs["stored:pool"].result("idc").criterion
    covered = np.argwhere(idc.matrix() > 0) if hasattr(idc, "matrix") else None
    assert covered is not None and len(covered)
    shot = tmp_path / "coverage-stored-sets.png"
    view.grab().save(str(shot))
    image = QImage(str(shot))
    assert not image.isNull() and image.width() > 400
    assert matrix.isVisible()


def test_a_gallery_finishes_while_a_long_job_runs(qtbot, settled_window):
    window = settled_window
    qtbot.keyClick(window, Qt.Key.Key_4, Qt.KeyboardModifier.ControlModifier)
    view = window.views["importance"]
    qtbot.waitUntil(lambda: view.result is not None and idle(window), timeout=60000)
    release = threading.Event()

    def long_job(ctx):  # a training run, as far as the lanes are concerned
        while not release.is_set():
            ctx.progress(0, 1, "training")
            time.sleep(0.02)
        return "trained"

    long = window.runner.submit("A long training run", long_job, uses_device=False, lane=LONG)
    queued = window.runner.submit("Another long run", long_job, uses_device=False, lane=LONG)
    qtbot.waitUntil(lambda: long.record.state == RUNNING, timeout=30_000)
    assert queued.record.state == QUEUED
    assert window.runner.waiting_for(queued) == [long]
    panel = window.jobs_panel
    assert panel.item(queued).text(4) == "waiting for “A long training run” to finish (the lane of long jobs)"

    neuron = int(view.result.ranking[-2])
    window.selection.set_neuron(neuron)
    key = view.gallery_key()
    gallery_job = view.jobs.jobs[("gallery", key)]
    assert gallery_job.record.lane == INTERACTIVE
    qtbot.waitUntil(lambda: view.jobs.result("gallery", key) is not None, timeout=30000)
    assert long.record.state == RUNNING  # the gallery did not wait for it
    assert view.gallery.has_tiles() and view.jobs.result("gallery", key).neuron == neuron
    release.set()
    qtbot.waitUntil(lambda: idle(window), timeout=30_000)
    assert long.result == "trained" and queued.result == "trained"


def test_the_robustness_view_does_not_start_retraining_by_itself(qtbot, settled_window):
    window = settled_window
    qtbot.keyClick(window, Qt.Key.Key_6, Qt.KeyboardModifier.ControlModifier)
    view = window.views["robustness"]
    robustness_set_up(qtbot, window, 180000)
    assert not any(j.name.startswith("Retrain") for j in window.runner.jobs)
    quick = view.retrain.quick_button
    assert quick.isEnabled() and quick.text().startswith("Quick comparison (about ")
    assert quick.text().endswith((" s)", " min)")), quick.text()
    tip = view.retrain.button.toolTip()
    assert "the checked grid takes about" in tip
    view.retrain.seeds_box.setValue(3)  # three times the runs: a longer estimate for the grid, not the quick one
    assert view.retrain.button.toolTip() != tip and quick.text().startswith("Quick comparison (about ")
    with qtbot.waitSignal(window.runner.job_added, timeout=30_000) as added:
        qtbot.mouseClick(quick, Qt.MouseButton.LeftButton)
    job = added.args[0]
    assert job.name.startswith("Retrain") and job.record.lane == LONG and not quick.isEnabled()
    job.cancel()
    qtbot.waitUntil(lambda: idle(window), timeout=30000)
    assert quick.isEnabled()


def test_long_jobs_run_in_a_worker_process_and_a_gallery_finishes_beside_them(qtbot, open_window, settle, tmp_path):
    import lane_jobs

    from workbench.core.execution.worker_process import IN_WORKER
    from workbench.gui.session.jobs import CANCELLED, PROCESS

    window = open_window(long_jobs=PROCESS)
    settle(window)
    qtbot.keyClick(window, Qt.Key.Key_4, Qt.KeyboardModifier.ControlModifier)
    view = window.views["importance"]
    qtbot.waitUntil(lambda: view.result is not None and idle(window), timeout=90000)
    relevance = next(j for j in window.runner.jobs if j.name.startswith("Importance of"))
    assert relevance.record.lane == LONG and relevance.record.where == IN_WORKER
    assert view.result.artifact in window.session.project.artifacts()  # committed by the child, seen here
    assert relevance.record.saved == [view.result.artifact]

    flag = tmp_path / "release"
    long = window.runner.submit("A long training run", lane_jobs.wait_for, str(flag), lane=LONG)
    qtbot.waitUntil(lambda: long.record.state == RUNNING and long.record.where == IN_WORKER, timeout=30_000)
    neuron = int(view.result.ranking[-2])
    window.selection.set_neuron(neuron)
    key = view.gallery_key()
    qtbot.waitUntil(lambda: view.jobs.result("gallery", key) is not None, timeout=30000)
    assert long.record.state == RUNNING and view.gallery.has_tiles()
    gallery = next(j for j in window.runner.jobs if j.name.startswith(f"Gallery of neuron {neuron} "))
    assert gallery.record.lane == INTERACTIVE and gallery.record.where == IN_WORKER  # the other worker
    assert view.jobs.result("gallery", key).neuron == neuron
    flag.touch()
    qtbot.waitUntil(lambda: idle(window), timeout=30_000)
    assert long.result == "released"

    flag.unlink()
    stopped = window.runner.submit("A run to cancel", lane_jobs.wait_for, str(flag), lane=LONG)
    qtbot.waitUntil(lambda: stopped.record.state == RUNNING, timeout=30_000)
    stopped.cancel()  # the job in the worker never ends by itself (how soon it stops: bench_cancel_latency.py)
    qtbot.waitUntil(lambda: stopped.record.state == CANCELLED, timeout=30_000)


def test_a_long_robustness_set_up_waits_for_a_click_and_stored_pools_are_read_at_once(qtbot, settled_window,
                                                                                     monkeypatch):
    from workbench.gui.views import robustness_view

    monkeypatch.setattr(robustness_view, "AUTO_START_S", 0.0)  # every set-up counts as long here
    window = settled_window
    qtbot.keyClick(window, Qt.Key.Key_6, Qt.KeyboardModifier.ControlModifier)
    view = window.views["robustness"]
    qtbot.waitUntil(lambda: idle(window), timeout=30000)
    assert view.base is None and not any(j.name.startswith("Robustness set-up") for j in window.runner.jobs)
    timing = next(j for j in window.runner.jobs if j.name.startswith("Time the robustness set-up"))
    assert timing.record.lane == INTERACTIVE and timing.result > 0
    message = view.histogram.stack.empty
    assert message.title.text() == "The candidate pool is not built yet"
    assert "2,000 training images and the 1,000 test images" in message.text.text()
    (label,) = message.button_texts()
    assert label.startswith("Build the candidate pool (about ")
    button = message.buttons.itemAt(1).widget()
    with qtbot.waitSignal(window.runner.job_added, timeout=30_000) as added:
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert added.args[0].name.startswith("Robustness set-up") and added.args[0].record.lane == LONG
    qtbot.waitUntil(lambda: view.base is not None and idle(window), timeout=180000)
    assert view.histogram.has_data()

    eps = view.eps_box.value()
    view.eps_box.setValue(eps * 2)  # another set-up: not stored, so timed and offered again
    view.eps_box.editingFinished.emit()
    qtbot.waitUntil(lambda: idle(window), timeout=30000)
    assert view.base is None
    count = len(window.runner.jobs)
    view.eps_box.setValue(eps)  # the stored pools: read back at once, no timing, no click
    view.eps_box.editingFinished.emit()
    qtbot.waitUntil(lambda: view.base is not None and idle(window), timeout=60000)
    later = [j.name for j in window.runner.jobs[count:]]
    assert later[0].startswith("Robustness set-up") and not any(n.startswith("Time the") for n in later)
    assert view.base.reused
