"""A neuron's gallery in the Importance view once the layer's relevance exists (issue 32, item 3): a click
shows the inputs importance kept for the neuron — no pass over the training split — and a relevance
result stored before inputs were kept still yields a gallery (by a pass, as before)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from workbench.core.data.dataset import Split

pytestmark = pytest.mark.gui

LAYER = "fc2"


def idle(window) -> bool:
    return window.session.is_ready and window.runner.is_idle()


@pytest.fixture
def batch_passes(monkeypatch) -> list:
    """Every `Split.batches` iteration from now on, as the split it went over."""
    passes = []
    original = Split.batches

    def spied(self, *args, **kwargs):
        passes.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Split, "batches", spied)
    return passes


def show_importance(qtbot, window):
    qtbot.keyClick(window, Qt.Key.Key_4, Qt.KeyboardModifier.ControlModifier)
    view = window.views["importance"]
    qtbot.waitUntil(lambda: view.result is not None and idle(window), timeout=60_000)
    return view


def click_neuron(qtbot, view, neuron: int) -> None:
    heatmap = view.heatmap
    point = heatmap.mapFromScene(heatmap.cell_center(0, neuron))
    qtbot.mouseClick(heatmap.viewport(), Qt.MouseButton.LeftButton, pos=point)


def indices(grid) -> list[int]:
    return [tile.index for tile in grid.tiles]


def test_a_click_shows_the_kept_inputs_without_a_pass_over_the_training_split(qtbot, settled_window,
                                                                              batch_passes, tmp_path):
    window = settled_window
    view = show_importance(qtbot, window)
    result = view.result
    assert result.top_inputs is not None and result.top_inputs.inputs == 2000  # kept while the relevance was summed
    train = window.session.datasets["fashion-mnist"].split("train")
    window.grab().save(str(tmp_path / "importance-before-click.png"))
    neuron = int(result.ranking[-1])  # not the one selected now
    kept = result.top_inputs.neuron(neuron)
    del batch_passes[:]

    click_neuron(qtbot, view, neuron)
    assert window.selection.neuron == neuron
    # The lists are there as soon as the click is handled: a lookup, whether or not the heatmaps are.
    assert view.gallery.has_tiles() and view.gallery.title.text() == f"Neuron {neuron} of {LAYER}"
    assert indices(view.gallery.by_relevance) == kept.columns["relevance"]["index"][:9].tolist()
    assert indices(view.gallery.by_activation) == kept.columns["activation"]["index"][:9].tolist()

    qtbot.waitUntil(lambda: idle(window), timeout=60_000)
    gallery = view.jobs.result("gallery", view.gallery_key())
    assert gallery.neuron == neuron and "kept by the importance result" in gallery.provenance["ranked"]
    assert not any(split is train for split in batch_passes)  # the job never iterated the training split
    assert indices(view.gallery.by_relevance) == [item.index for item in gallery.by_relevance]
    assert all(tile.heatmap is not None for tile in view.gallery.by_relevance.tiles + view.gallery.by_activation.tiles)
    np.testing.assert_allclose([t.score for t in view.gallery.by_relevance.tiles],
                               kept.columns["relevance"]["relevance"][:9])
    assert not view.gallery.note.isVisible()  # every training image was ranked: no sample to mention
    job = next(j for j in window.runner.jobs if j.name.startswith(f"Gallery of neuron {neuron} "))
    assert job.record.lane == "interactive"
    window.grab().save(str(tmp_path / "importance-after-click.png"))


def test_a_result_stored_before_inputs_were_kept_still_yields_a_gallery(qtbot, open_window, settle, batch_passes):
    from workbench.core.data.registry import load_dataset
    from workbench.core.execution.jobs import JobContext
    from workbench.core.importance.neuron_importance import compute_importance
    from workbench.core.models.model_io import load_model
    from workbench.gui.shell.demo import open_demo_project

    project, notices = open_demo_project()
    old = compute_importance(JobContext("cpu"), load_model("lenet5-fashion"), load_dataset("fashion-mnist"), LAYER,
                             per_class=True, project=project, top_inputs=0)  # as stored before this change
    window = open_window(project, notices)
    settle(window)
    view = show_importance(qtbot, window)
    assert view.result.reused and view.result.artifact == old.artifact and view.result.top_inputs is None
    train = window.session.datasets["fashion-mnist"].split("train")
    neuron = int(view.result.ranking[-1])
    del batch_passes[:]
    click_neuron(qtbot, view, neuron)
    qtbot.waitUntil(lambda: idle(window), timeout=60_000)
    gallery = view.jobs.result("gallery", view.gallery_key())
    assert gallery.neuron == neuron and "ranked" not in gallery.provenance
    assert any(split is train for split in batch_passes)  # ranked by a pass, as before
    assert view.gallery.has_tiles() and indices(view.gallery.by_relevance) == [i.index for i in gallery.by_relevance]
