"""Defects a new user hit in the window, each driven through real widgets."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gui


def test_the_predictions_label_survives_a_split_whose_evaluation_is_gone(qtbot, settled_window):
    """Reopening a project and switching datasets left the grid with the previous split's predictions
    while the new split had no evaluation: the label raised TypeError."""
    window = settled_window
    view = window.views["data"]
    key = view._key()
    assert view.grid.thumbnails.predictions is not None and window.session.evaluation(*key) is not None
    window.session.evaluations.pop(key)  # what a switch to a split not evaluated yet leaves
    view._update_predictions_label()
    text = view.predictions_label.text()
    assert "correct" not in text and ("No predictions yet" in text or "Predicting" in text)


def test_the_ablation_verdict_says_how_the_top_set_ranks_and_offers_more_draws(qtbot, settled_window):
    from PySide6.QtCore import Qt

    from workbench.core.importance.ablation import CLEAR_DRAWS

    window = settled_window
    qtbot.keyClick(window, Qt.Key.Key_4, Qt.KeyboardModifier.ControlModifier)
    view = window.views["importance"]
    qtbot.waitUntil(lambda: view.ablation.result is not None and window.runner.is_idle(), timeout=90000)
    first = view.ablation.result
    text = view.ablation.verdict.text()
    assert f"{first.draws} random sets" in text or f"all {first.draws} random" in text
    if first.draws_at_least_as_bad == 0:  # ahead of every draw, but five draws cannot make that clear
        assert "cannot make that clear" in text and f"Check with {CLEAR_DRAWS} draws" in text
    view.ablation.verdict.linkActivated.emit("more")  # what clicking "Check with 19 draws" does
    qtbot.waitUntil(lambda: view.ablation.result is not None and view.ablation.result.draws == CLEAR_DRAWS,
                    timeout=90000)
    again = view.ablation.result.to_dict()
    assert again["chance"] == (1 + again["draws_at_least_as_bad"]) / (CLEAR_DRAWS + 1)
    assert "Check with" not in view.ablation.verdict.text()
    assert ("clearly matter more" in view.ablation.verdict.text()) is again["clearly_important"]


def test_a_test_only_dataset_is_fitted_on_the_split_it_has_and_says_so(qtbot, settled_window, tmp_path, settle):
    """A plain x, y .npz has no training split: relevance and coverage are fitted on its test split."""
    import numpy as np
    from PySide6.QtCore import Qt

    window = settled_window
    data = window.session.datasets["fashion-mnist"].split("test")
    path = tmp_path / "mine.npz"
    np.savez(path, x=data.images[:300, 0], y=data.labels[:300])
    window.add_dataset(str(path))
    qtbot.waitUntil(lambda: window.selection.dataset is not None and "mine" in window.selection.dataset,
                    timeout=20000)
    settle(window)
    qtbot.keyClick(window, Qt.Key.Key_4, Qt.KeyboardModifier.ControlModifier)
    view = window.views["importance"]
    qtbot.waitUntil(lambda: view.result is not None and window.runner.is_idle(), timeout=60000)
    assert view.result.provenance["split"] == "test" and view.result.inputs == 300
    assert "test images (the dataset has no training split)" in view.summary.text()
    qtbot.keyClick(window, Qt.Key.Key_5, Qt.KeyboardModifier.ControlModifier)
    coverage = window.views["coverage"]
    qtbot.waitUntil(lambda: window.runner.is_idle() and "fitted on" in coverage.summary.text(), timeout=60000)
    assert "fitted on the 300 test images (the dataset has no training split)" in coverage.summary.text()


def test_the_shortcuts_table_is_sorted_by_menu_from_a_to_z(qtbot, settled_window):
    from workbench.gui.shell.actions import ShortcutsDialog

    from PySide6.QtWidgets import QTableWidget

    dialog = ShortcutsDialog(settled_window)
    qtbot.addWidget(dialog)
    table = dialog.findChild(QTableWidget, "shortcutsTable")
    menus = [table.item(r, 0).text() for r in range(table.rowCount())]
    assert menus == sorted(menus)
