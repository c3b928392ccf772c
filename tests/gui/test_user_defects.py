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
