"""A torchvision ResNet-18's bare state_dict on the user's own colour images, in the GUI: the Importance and
Coverage views compute importance for it at once (two jobs tracing the network at the same time), each to a
result, with no error."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

pytestmark = pytest.mark.gui


def idle(window) -> bool:
    return window.session.is_ready and window.runner.is_idle()


def coverage_measured(window) -> bool:
    view = window.views["coverage"]
    runs = [view.runs.runs.get(k) for k in view.set_keys or []]
    return bool(runs) and all(r is not None and r.state in ("done", "failed") for r in runs)


def test_importance_and_coverage_views_compute_for_resnet18_at_once(qtbot, open_window, settle, tmp_path,
                                                                    error_dialogs, resnet18_on_photos):
    from workbench.core.project.folder import Project

    model, photos = resnet18_on_photos
    window = open_window(Project.create(tmp_path / "project", str(photos), [str(model)]))
    settle(window)
    importance, coverage = window.views["importance"], window.views["coverage"]
    titles_at_once: list[list[str]] = []

    def both_done() -> bool:
        titles_at_once.append([job.record.name for job in window.runner.active_jobs()
                               if job.record.started is not None and job.record.ended is None])
        return coverage_measured(window) and idle(window)

    qtbot.keyClick(window, Qt.Key.Key_4, Qt.KeyboardModifier.ControlModifier)  # starts the relevance of the layer
    qtbot.keyClick(window, Qt.Key.Key_5, Qt.KeyboardModifier.ControlModifier)  # and coverage, before it ends
    assert window.tabs.currentWidget() is coverage
    qtbot.waitUntil(both_done, timeout=240_000)
    assert max(len(titles) for titles in titles_at_once) >= 2, titles_at_once  # the two ran at once
    qtbot.keyClick(window, Qt.Key.Key_4, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: importance.result is not None, timeout=60_000)
    assert not error_dialogs, [d.message for d in error_dialogs]
    layer = window.selection.layer
    assert layer == "layer4.1.conv2"  # the last convolution before the classifier
    assert importance.result.per_class.shape == (4, 512)
    runs = [coverage.runs.runs[k] for k in coverage.set_keys]
    assert all(run.state == "done" for run in runs), [(run.state, getattr(run, "error", None)) for run in runs]
    window.grab().save(str(tmp_path / "resnet18-coverage.png"))
