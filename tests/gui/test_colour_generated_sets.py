"""A generated set of colour images (3×32×32) on a colour dataset the user brought: the Labelling view shows each
input in its own colours, enlarged; the set's dataset is recorded by a path that loads again."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from workbench.core.testsets import save_testset

pytestmark = pytest.mark.gui

PALETTE = np.array([[0.9, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.9]], dtype=np.float32)


@pytest.fixture
def colour_project(tmp_path):
    from workbench.core.project.folder import Project

    rng = np.random.default_rng(0)
    labels = np.arange(60) % 3
    images = (PALETTE[labels][:, :, None, None] * 255 + rng.normal(0, 5, (60, 3, 32, 32))).clip(0, 255)
    np.savez(tmp_path / "squares.npz", x_train=images[:48].astype(np.uint8), y_train=labels[:48],
             x_test=images[48:].astype(np.uint8), y_test=labels[48:])
    project = Project.create(tmp_path / "project", str(tmp_path / "squares.npz"))
    x = np.broadcast_to(PALETTE[[0, 2, 1, 0]][:, :, None, None], (4, 3, 32, 32)).astype(np.float32).copy()
    save_testset(project, "generated-colour", {
        "x": x, "y": np.array([0, 2, 1, 0]), "predicted": np.array([1, 0, 0, 2]),
        "generator": np.array(["gan-squares"] * 4), "kind": np.array(["gan"] * 4), "extent": np.array(["high"] * 4),
        "generations": np.array([5, 6, 7, 8])}, role="generated", dataset=str(tmp_path / "squares.npz"))
    return project


def test_the_labelling_view_shows_colour_inputs_in_their_colours(qtbot, open_window, settle, colour_project):
    window = open_window(colour_project)
    settle(window)
    qtbot.keyClick(window, Qt.Key.Key_9, Qt.KeyboardModifier.ControlModifier)
    view = window.views["labelling"]
    view.choose("generated-colour")
    view.rater_edit.setText("ann")
    qtbot.keyClick(view.rater_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: view.labelling is not None, timeout=30_000)
    seen = set()
    for _ in range(4):
        qtbot.waitUntil(lambda: view.canvas.grab().width() > 0, timeout=10_000)
        shot = view.canvas.grab().toImage()
        centre = shot.pixelColor(shot.width() // 2, shot.height() // 2)
        rgb = np.array([centre.red(), centre.green(), centre.blue()]) / 255.0
        seen.add(int(np.argmin(np.abs(PALETTE - rgb).sum(axis=1))))  # the palette colour it is nearest
        assert np.abs(PALETTE - rgb).sum(axis=1).min() < 0.1, rgb  # shown as stored, not grey or tinted
        qtbot.keyClick(view.canvas, Qt.Key.Key_Right)
    assert seen == {0, 1, 2}
    assert window.session.project.datasets == [str(colour_project.folder.parent / "squares.npz")]
