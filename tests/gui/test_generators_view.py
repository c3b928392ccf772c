"""The Generators view on the demo project with tiny generators trained into it: the overview tiles and
their samples, a generator's card, a seeded resample and a latent walk that equal the core's own, export,
training a new generator with live curves, stopping one (its last finished epoch is kept and listed with
a warning), and a damaged folder that is named, not fatal."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from workbench.core.execution.jobs import JobContext
from workbench.core.generation.assessment import latent_walk, sample_grid
from workbench.core.generation.training import train_generator

pytestmark = pytest.mark.gui

TIMEOUT_MS = 60_000


def idle(window) -> bool:
    return window.session.is_ready and window.runner.is_idle()


@pytest.fixture
def window_with_generators(settled_window, fashion_tiny, tiny_generators):
    window = settled_window
    root = window.session.project.folder / "generators"
    for kind in ("vae", "gan"):
        train_generator(JobContext("cpu"), kind, fashion_tiny, root / f"{kind}-tiny", epochs=1,
                        config=tiny_generators[kind], latent_samples=50)
    return window


def tile(view, name: str):
    return next(t for t in view.tiles if t.entry["name"] == name)


def test_overview_card_samples_walk_and_export(qtbot, window_with_generators, tmp_path, monkeypatch):
    window = window_with_generators
    qtbot.keyClick(window, Qt.Key.Key_7, Qt.KeyboardModifier.ControlModifier)
    view = window.views["generators"]
    assert window.tabs.currentWidget() is view
    names = [e["name"] for e in view.entries]
    assert {"vae-tiny", "gan-tiny"} <= set(names)
    assert tile(view, "gan-tiny").grid.pixmap() is not None and not tile(view, "gan-tiny").grid.pixmap().isNull()
    qtbot.mouseClick(tile(view, "gan-tiny"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.generator is not None and idle(window), timeout=TIMEOUT_MS)
    assert view.main_tabs.currentWidget() is view.detail and "gan-tiny" in view.header.text()
    assert "Latent range" in view.card_text.text() and len(view.loss_curves.rows) == 1
    # Resampling with a seed shows what the core's sample grid gives for that seed.
    view.tabs.setCurrentIndex(1)
    view.seed_box.setValue(3)
    view.per_class_box.setValue(2)
    qtbot.mouseClick(view.resample_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Seed 3" in view.samples_status.text(), timeout=TIMEOUT_MS)
    expected = sample_grid(JobContext("cpu"), view.generator, 2, 3)
    np.testing.assert_array_equal(view.samples.grid, expected)
    # A walk along one latent dimension across the card's latent range, at the chosen class.
    view.tabs.setCurrentIndex(2)
    view.walk_class_box.setCurrentIndex(4)
    view.walk_dimension_box.setValue(5)
    qtbot.waitUntil(lambda: view.walk_row.grid is not None and idle(window), timeout=TIMEOUT_MS)
    r = view.generator.card.latent_range
    values = np.linspace(r["low"], r["high"], 9, dtype=np.float32)
    expected = latent_walk(JobContext("cpu"), view.generator, 5, values, 4, 0)
    np.testing.assert_array_equal(view.walk_row.grid[0], expected)
    first = values[0][None]
    column = view.generator.decode(  # the dimension really moves: its first and last images differ
        *_latent(view.generator, 5, np.concatenate([first, values[-1][None]]), 4)).numpy()
    assert not np.array_equal(column[0], column[1])
    # Export writes the shown samples as PNG and says where.
    path = tmp_path / "samples.png"
    monkeypatch.setattr("workbench.gui.views.generators_view.QFileDialog.getSaveFileName",
                        lambda *a, **k: (str(path), "PNG (*.png)"))
    view.tabs.setCurrentIndex(1)
    qtbot.mouseClick(view.export_button, Qt.MouseButton.LeftButton)
    assert path.is_file() and "Exported to" in window.statusBar().currentMessage()
    view.grab().save(str(tmp_path / "generators.png"))


def _latent(generator, dimension, values, label):
    import torch

    z = generator.sample_latent(1, torch.Generator().manual_seed(0)).repeat(len(values), 1)
    z[:, dimension] = torch.as_tensor(values)
    return z, torch.full((len(values),), label)


def test_training_a_generator_and_stopping_one(qtbot, window_with_generators):
    window = window_with_generators
    window.show_view("generators")
    view = window.views["generators"]
    view.main_tabs.setCurrentIndex(2)
    kinds = [view.kind_box.itemData(i) for i in range(view.kind_box.count())]
    assert kinds[:4] == ["vae", "conv-vae", "gan", "diffusion"] and "tiny-cvae" in kinds  # a plugin's kind, loaded at start-up
    view.kind_box.setCurrentIndex(view.kind_box.findData("vae"))
    view.preset_box.setCurrentIndex(view.preset_box.findData("small"))
    view.epochs_box.setValue(2)
    qtbot.mouseClick(view.train_button, Qt.MouseButton.LeftButton)
    assert view.train_button.text() == "Stop"
    qtbot.waitUntil(lambda: "Trained 2 epochs" in view.train_status.text() and idle(window), timeout=TIMEOUT_MS)
    assert len(view.train_curves.rows) == 2 and view.train_samples.grid is not None  # grew per epoch
    trained = next(e for e in view.entries if not e["bundled"] and e["name"].startswith("vae-fashion-mnist"))
    assert trained["name"] == "vae-fashion-mnist-2"  # the bundled generator has the plain name
    assert trained["epochs"] == 2 and trained["seed_acceptance"] is not None  # the bundled LeNet-5 measured it
    # A long run stopped after its first epoch keeps that epoch, listed with a warning.
    view.epochs_box.setValue(200)
    qtbot.mouseClick(view.train_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(view.train_curves.rows) >= 1, timeout=TIMEOUT_MS)
    qtbot.mouseClick(view.train_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.train_button.text() == "Train" and idle(window), timeout=TIMEOUT_MS)
    stopped = next(e for e in view.entries if e["name"] == "vae-fashion-mnist-3")
    qtbot.mouseClick(tile(view, "vae-fashion-mnist-3"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.generator is not None and view.chosen is stopped and idle(window),
                    timeout=TIMEOUT_MS)
    assert "Training stopped after" in view.warning.text() and view.warning.isVisible()


def test_a_damaged_generator_folder_is_named_not_fatal(qtbot, window_with_generators):
    window = window_with_generators
    damaged = window.session.project.folder / "generators" / "broken"
    damaged.mkdir()
    (damaged / "generator.json").write_text("{not json")
    window.show_view("generators")
    view = window.views["generators"]
    view.refresh()
    broken = tile(view, "broken")
    assert "damaged" in broken.entry["problem"]
    qtbot.mouseClick(broken, Qt.MouseButton.LeftButton)
    assert "cannot be read" in view.detail.empty.title.text()
    qtbot.mouseClick(tile(view, "vae-tiny"), Qt.MouseButton.LeftButton)  # the others still work
    qtbot.waitUntil(lambda: view.generator is not None and idle(window), timeout=TIMEOUT_MS)
    assert "vae-tiny" in view.header.text()


def test_a_stable_diffusion_pipeline_shows_as_pretrained_and_is_not_offered_for_training(qtbot, settled_window,
                                                                                         tmp_path):
    pytest.importorskip("transformers")
    from tiny_pipelines import tiny_pipeline

    from workbench.core.data.registry import load_dataset
    from workbench.core.generation.pipeline_import import add_diffusers_generator

    window = settled_window
    pipeline = tiny_pipeline(tmp_path / "sd")
    add_diffusers_generator(JobContext("cpu"), pipeline, window.session.project.folder / "generators" / "sd-tiny",
                            load_dataset("fashion-mnist"), steps=2, grid_per_class=1)
    qtbot.keyClick(window, Qt.Key.Key_7, Qt.KeyboardModifier.ControlModifier)
    view = window.views["generators"]
    view.refresh()
    assert "stable-diffusion" not in [view.kind_box.itemData(i) for i in range(view.kind_box.count())]
    qtbot.mouseClick(tile(view, "sd-tiny"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.generator is not None and idle(window), timeout=TIMEOUT_MS)
    assert "a pretrained pipeline" in view.header.text() and "epochs" not in view.header.text()
    assert "not trained by the workbench" in view.card_text.text() and "Training" not in view.card_text.text()
    assert view.loss_curves.isHidden() and view.samples.grid.shape == (10, 1, 1, 28, 28)
