"""The Robustness view on the demo project (the Fashion-MNIST slice and the bundled LeNet-5): the pools and
FOL histograms, a strategy's selection, the quick comparison started from its button, a retraining launched
from the panel, the convergence rounds, fuzzing, stored runs read back, bad input and the screenshot."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from gui_helpers import robustness_set_up
from PySide6.QtCore import Qt

pytestmark = pytest.mark.gui

RETRAIN_TIMEOUT_MS = 400_000  # a bound, not a speed: the set-up and the quick comparison took over 2 min with both cores busy


def idle(window) -> bool:
    return window.session.is_ready and window.runner.is_idle()


PREPARED: list = []  # a copy of the first robustness_window's project, its pools and quick comparison stored


@pytest.fixture
def robustness_window(qtbot, open_window, settle, tmp_path_factory):
    """The demo window on the Robustness view, with the pools built and the quick comparison done.

    The module's first test builds them (half a minute on two cores); a later one opens a copy of that
    project, which reads both back at once, as a reopened project does (checked in the first test)."""
    from workbench.core.project.folder import Project

    window = open_window(Project.open(copy_of_prepared(tmp_path_factory)) if PREPARED else None)
    settle(window)
    qtbot.keyClick(window, Qt.Key.Key_6, Qt.KeyboardModifier.ControlModifier)
    view = window.views["robustness"]
    assert window.tabs.currentWidget() is view
    if PREPARED:
        qtbot.waitUntil(lambda: view.base is not None and view.base.reused and len(view.rows) == 8 and idle(window),
                        timeout=RETRAIN_TIMEOUT_MS)
        return window
    robustness_set_up(qtbot, window, RETRAIN_TIMEOUT_MS)
    qtbot.mouseClick(view.retrain.quick_button, Qt.MouseButton.LeftButton)  # it never starts by itself
    qtbot.waitUntil(lambda: view.base is not None and not view.jobs and idle(window), timeout=RETRAIN_TIMEOUT_MS)
    PREPARED.append(tmp_path_factory.mktemp("robustness-prepared") / "project")
    shutil.copytree(window.session.project.folder, PREPARED[0])
    return window


def copy_of_prepared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("robustness") / "project"
    shutil.copytree(PREPARED[0], folder)
    return folder


def check_pools_histograms_and_selection(qtbot, window, tmp_path):
    view = window.views["robustness"]
    setup = view.base.setup
    assert setup.eps == pytest.approx(0.1) and view.eps_box.value() == pytest.approx(0.1)
    # The slice has 2,000 training images: the "10,000" pool attacks all of them.
    assert setup.pool.params["attacked_inputs"] == 2000
    assert setup.baseline["static_ae_accuracy"] == 0.0
    hist = view.histogram
    assert hist.has_data() and hist.names == ["clean test", "FGSM (train pool)", "PGD (train pool)"]
    for attack in ("fgsm", "pgd"):
        assert len(hist.values[f"{attack.upper()} (train pool)"]) == int(np.sum(setup.pool.attack == attack))
    assert f"{len(setup.pool):,} successful adversarials" in view.summary.text()
    # The default selection (BE-ST, 2 %) is the core's pick, shown as thumbnails and as a rug.
    from workbench.core.robustness.selection import be_st

    selectable = setup.pool.subset(setup.selectable)
    expected = be_st(selectable.scores["fol_linf"], "2%").indices
    assert view.strip.model.rowCount() == len(expected)
    np.testing.assert_allclose(np.sort(hist.selected), np.sort(selectable.scores["fol_linf"][expected]))
    # Another strategy and budget: the strip and the rug follow.
    view.strategy_box.setCurrentIndex(view.strategy_box.findData("deepgini"))
    view.budget_box.setValue(5.0)
    n = int(np.floor(0.05 * len(selectable) + 1e-9))
    qtbot.waitUntil(lambda: view.strip.model.rowCount() == n and not view.jobs, timeout=10000)
    top = np.argsort(-selectable.scores["deepgini"], kind="stable")[:n]
    np.testing.assert_allclose(np.sort(hist.selected), np.sort(selectable.scores["fol_linf"][top]))
    # The coverage-greedy baseline computes its neuron coverage on a worker and picks by it.
    view.strategy_box.setCurrentIndex(view.strategy_box.findData("coverage-greedy"))
    qtbot.waitUntil(lambda: setup.covers is not None and not view.jobs and idle(window), timeout=30000)
    assert view.strip.model.rowCount() == n and "coverage-greedy" in view.strip.title.text().lower()
    # Clicking a histogram bin lists the pool's candidates in it.
    index = int(np.argmax(hist.counts["PGD (train pool)"]))
    hist.bin_clicked.emit(index)
    low, high = hist.bin_range(index)
    in_bin = (setup.pool.scores["fol_linf"] >= low) & (setup.pool.scores["fol_linf"] < high)
    assert view.strip.model.rowCount() == int(in_bin.sum()) > 0
    assert "pool candidates with FOL∞ in" in view.strip.title.text()
    # The pools were stored in the project as test sets.
    roles = [e["provenance"].get("kind_of_pool") for e in window.session.project.artifacts("testset").values()]
    assert sorted(roles) == ["fp_test", "train"]
    view.grab().save(str(tmp_path / "robustness.png"))


def check_quick_comparison_is_drawn_and_stored(qtbot, window, open_window):
    view = window.views["robustness"]
    curves = view.retrain.curves
    # The quick comparison: 4 strategies × budgets 1 and 4 % × one seed, two epochs.
    assert len(view.rows) == 8 and curves.has_data()
    assert curves.strategies() == ["BE-ST", "KM-ST", "DeepGini", "random"]
    assert set(curves.metrics()) == {"static", "adaptive", "clean", "fol"}
    be_st = next(s for s in curves.series if s.strategy == "BE-ST" and s.metric == "static")
    rows = sorted((r for r in view.rows if r["strategy"] == "be-st"), key=lambda r: r["budget_percent"])
    np.testing.assert_allclose(be_st.mean, [100 * r["static_ae_accuracy"] for r in rows])
    assert all(r["static_ae_accuracy"] > 0 for r in view.rows)  # retraining on adversarials helps on fp_test
    stored = window.session.project.artifacts("robustness")
    assert len(stored) == 1 and next(iter(stored.values()))["provenance"]["what"] == "experiment"
    # A new window on the same project shows the stored comparison without retraining.
    project = window.session.project
    window.close()
    from workbench.core.project.folder import Project

    again = open_window(Project.open(project.folder))
    qtbot.waitUntil(lambda: idle(again), timeout=RETRAIN_TIMEOUT_MS)
    qtbot.keyClick(again, Qt.Key.Key_6, Qt.KeyboardModifier.ControlModifier)
    other = again.views["robustness"]
    qtbot.waitUntil(lambda: other.base is not None and idle(again), timeout=60000)
    assert other.base.reused and len(other.rows) == 8 and "retrain" not in other.jobs
    assert other.retrain.curves.strategies() == ["BE-ST", "KM-ST", "DeepGini", "random"]
    return again


def check_adding_a_strategy_runs_only_its_runs(qtbot, window):
    """The stored comparison's runs are kept: the quick grid again runs nothing, one more strategy runs only
    its own runs, and a cancelled retraining shows the comparison from before."""
    view = window.views["robustness"]
    panel, curves = view.retrain, view.retrain.curves
    before = list(view.rows)
    qtbot.mouseClick(panel.quick_button, Qt.MouseButton.LeftButton)
    assert "retrain" not in view.jobs and "shown already" in panel.status.text()
    panel.strategy_actions["mcp"].setChecked(True)  # the panel's grid is the quick one, plus MCP
    qtbot.mouseClick(panel.button, Qt.MouseButton.LeftButton)
    assert "retrain" in view.jobs and curves.strategies() == ["BE-ST", "KM-ST", "DeepGini", "random"]
    qtbot.waitUntil(lambda: "retrain" not in view.jobs and idle(window), timeout=RETRAIN_TIMEOUT_MS)
    assert view.rows[:8] == before
    assert [(r["strategy"], r["budget"]) for r in view.rows[8:]] == [("mcp", "1%"), ("mcp", "4%")]
    assert curves.strategies() == ["BE-ST", "KM-ST", "DeepGini", "random", "MCP"] and "10 runs" in panel.status.text()
    newest = max(window.session.project.artifacts("robustness").values(), key=lambda e: e["provenance"]["created"])
    assert len(newest["provenance"]["rows"]) == 10  # the stored run holds the whole comparison
    panel.seeds_box.setValue(2)
    qtbot.mouseClick(panel.button, Qt.MouseButton.LeftButton)
    assert "retrain" in view.jobs
    qtbot.mouseClick(panel.button, Qt.MouseButton.LeftButton)  # Cancel
    qtbot.waitUntil(lambda: "retrain" not in view.jobs and idle(window), timeout=RETRAIN_TIMEOUT_MS)
    assert len(view.rows) == 10 and len(curves.strategies()) == 5
    assert "cancelled" in panel.status.text() and "comparison from before" in panel.status.text()


def check_retraining_from_the_panel_updates_the_curve(qtbot, window):
    view = window.views["robustness"]
    panel = view.retrain
    for name, action in panel.strategy_actions.items():
        action.setChecked(name in ("km-st", "mcp"))
    panel.budgets_edit.setText("3")
    panel.epochs_box.setValue(1)
    panel.paper_box.setChecked(True)
    seen = []
    qtbot.mouseClick(panel.button, Qt.MouseButton.LeftButton)
    job = view.jobs["retrain"]
    assert panel.button.text() == "Cancel"
    job.partial.connect(lambda row: seen.append(panel.curves.strategies()))
    qtbot.waitUntil(lambda: "retrain" not in view.jobs and idle(window), timeout=RETRAIN_TIMEOUT_MS)
    assert seen[0] == ["KM-ST"] and seen[-1] == ["KM-ST", "MCP"]  # the curve grew as each run ended
    assert [r["strategy"] for r in view.rows] == ["km-st", "mcp"]
    assert all(r["budget"] == "3%" and r["best_epoch"] == 1 for r in view.rows)
    assert all(r["checkpoint_mode"] == "paper" and r["optimistic"] for r in view.rows)
    assert "optimistic" in panel.status.text() and view.base.setup.checkpoint_mode == "clean"
    assert panel.button.text() == "Retrain"
    assert len(window.session.project.artifacts("robustness")) == 2
    assert len(view.rows) == 2


def check_convergence_rounds_and_fuzzing(qtbot, window):
    view = window.views["robustness"]
    panel = view.converge
    panel.rounds_box.setValue(1)
    panel.epochs_box.setValue(1)
    view.tabs.setCurrentWidget(panel)
    qtbot.mouseClick(panel.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "converge" not in view.jobs and idle(window), timeout=RETRAIN_TIMEOUT_MS)
    assert [r["round"] for r in view.rounds] == [0, 1]
    assert view.rounds[0]["static_ae_accuracy"] == 0.0 and view.rounds[1]["static_ae_accuracy"] > 0.0
    fol = next(s for s in panel.curves.series if s.metric == "fol")
    assert list(fol.x) == [0.0, 1.0] and fol.mean[1] < fol.mean[0]  # the loss surface flattens
    assert "requirement" in panel.status.text()

    fuzz = view.fuzz
    fuzz.seeds_box.setValue(8)
    fuzz.time_box.setValue(20)
    view.tabs.setCurrentWidget(fuzz)
    qtbot.mouseClick(fuzz.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "fuzz" not in view.jobs and idle(window), timeout=60000)
    result = view.fuzzed
    assert result is not None and len(result) > 0
    assert fuzz.pairs.pair_count() == len(result)
    assert "tests from" in fuzz.pairs.counter.text()
    assert "fuzzed" in view.histogram.names and len(view.histogram.values["fuzzed"]) == len(result)
    # The tests joined the pool (a new set-up) and are selectable, scored like the attacks' candidates.
    pool = view.base.setup.pool
    fuzz_rows = np.flatnonzero(pool.attack == "fuzz")
    assert len(fuzz_rows) == len(result) and set(fuzz_rows) <= set(view.base.setup.selectable)
    np.testing.assert_allclose(pool.scores["fol_linf"][fuzz_rows], result.fol_linf, rtol=1e-4, atol=1e-4)
    assert "added to the pool" in fuzz.pairs.counter.text()
    roles = [e["provenance"].get("role") for e in window.session.project.artifacts("testset").values()]
    assert "fuzz-tests" in roles


def check_a_generated_set_joins_the_pool(qtbot, window):
    """A generated set saved in the project is offered by "Add generated set"; its misbehaviours (found, and wrong
    for the model) join the pool as attack "generated", selectable, and have their own histogram."""
    import torch

    from workbench.core.testsets import save_testset

    view = window.views["robustness"]
    setup = view.base.setup
    test = setup.dataset.split("test")
    seeds = test.numpy(np.arange(16))
    x = np.clip(1.0 - seeds, 0, 1).astype(np.float32)  # negatives: LeNet-5 reads most of them as another class
    y = np.asarray(test.labels[:16], dtype=np.int64)
    with torch.no_grad():
        predicted = setup.model.module(torch.from_numpy(x)).argmax(1).numpy()
    found = np.arange(16) % 2 == 0
    save_testset(window.session.project, "generated-negatives", {
        "x": x, "y": y, "seed_x": seeds, "found": found, "predicted": predicted,
        "generator": np.array(["vae"] * 16), "seed": np.arange(16), "kind": np.array(["vae"] * 16),
        "extent": np.array(["high"] * 16), "generations": np.full(16, 3), "finished": np.ones(16, bool),
        "fitness": np.zeros((16, 3), np.float32)}, role="generated", dataset=setup.dataset.spec,
        model=setup.model.name, model_fingerprint=setup.model.fingerprint())
    misbehaviours = int(np.sum(found & (predicted != y)))
    assert misbehaviours > 0
    before = len(setup.pool)
    menu = view.generated_button.menu()
    menu.aboutToShow.emit()
    (action,) = [a for a in menu.actions() if a.text() == "generated-negatives"]
    assert action.isEnabled()
    action.trigger()
    qtbot.waitUntil(lambda: "generated" not in view.jobs and idle(window), timeout=60000)
    pool = view.base.setup.pool
    rows = np.flatnonzero(pool.attack == "generated")
    assert len(pool) == before + misbehaviours and len(rows) == misbehaviours
    assert set(rows) <= set(view.base.setup.selectable) and np.all(pool.scores["fol_linf"][rows] > 0)
    assert "generated" in view.histogram.names and len(view.histogram.values["generated"]) == misbehaviours
    assert "generated" in view.summary.text().lower()
    menu.aboutToShow.emit()
    (action,) = [a for a in menu.actions() if a.text() == "generated-negatives"]
    assert not action.isEnabled()  # in the pool already


def check_bad_budgets_are_refused(qtbot, window, error_dialogs):
    view = window.views["robustness"]
    for text, message in (("two", "not a number"), ("0", "between 0 and 100"), ("", "No budget")):
        view.retrain.budgets_edit.setText(text)
        qtbot.mouseClick(view.retrain.button, Qt.MouseButton.LeftButton)
        assert "retrain" not in view.jobs
        assert message in error_dialogs[-1].message
    view.retrain.budgets_edit.setText("2")
    for action in view.retrain.strategy_actions.values():
        action.setChecked(False)
    qtbot.mouseClick(view.retrain.button, Qt.MouseButton.LeftButton)
    assert "retrain" not in view.jobs and "No strategy" in error_dialogs[-1].message


# Each window needs the pools and the quick comparison first, so the checks share two windows: one for what
# is shown and stored, one for the jobs launched from the panels (on a copy of the first one's project).

def test_pools_selection_and_the_quick_comparison(qtbot, robustness_window, open_window, tmp_path):
    check_pools_histograms_and_selection(qtbot, robustness_window, tmp_path)
    reopened = check_quick_comparison_is_drawn_and_stored(qtbot, robustness_window, open_window)
    check_adding_a_strategy_runs_only_its_runs(qtbot, reopened)


def test_retraining_convergence_fuzzing_and_bad_budgets(qtbot, robustness_window, error_dialogs):
    check_bad_budgets_are_refused(qtbot, robustness_window, error_dialogs)
    check_retraining_from_the_panel_updates_the_curve(qtbot, robustness_window)
    check_convergence_rounds_and_fuzzing(qtbot, robustness_window)
    check_a_generated_set_joins_the_pool(qtbot, robustness_window)


def test_a_dataset_without_a_train_split_is_explained(qtbot, settled_window):
    window = settled_window
    view = window.views["robustness"]
    data = window.session.datasets[window.selection.dataset]
    train = data.splits.pop("train")
    try:
        window.show_view("robustness")
        assert "no training and test split" in view.stack.empty.title.text()
    finally:
        data.splits["train"] = train
