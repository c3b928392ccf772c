"""Opening the Coverage view starts only what is quick on this machine now: the work is timed first (a
trial on a sample), and work that takes longer than `AUTO_START_S` is offered behind a button that says
how long it takes. What the project stored is read, never offered."""

from __future__ import annotations

import re

import pytest
from PySide6.QtCore import Qt

from workbench.core.coverage import estimate
from workbench.core.coverage.estimate import CoverageWork
from workbench.gui.session import coverage_runs

pytestmark = pytest.mark.gui

TEST, TRAIN = "fashion-mnist:test", "fashion-mnist:train"


def measured(window) -> bool:
    view = window.views["coverage"]
    runs = [view.runs.runs.get(k) for k in view.set_keys or []]
    return (window.session.is_ready and window.runner.is_idle() and bool(runs)
            and all(r is not None and r.state == "done" for r in runs))


def open_coverage(qtbot, window) -> None:
    qtbot.keyClick(window, Qt.Key.Key_5, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.currentWidget() is window.views["coverage"]


def timed_for_real(monkeypatch, limit: float) -> None:
    """The view times its work with the real trial (the suite's fixture skips it) against `limit`."""
    monkeypatch.setattr(coverage_runs, "coverage_work", estimate.coverage_work)
    monkeypatch.setattr(coverage_runs, "AUTO_START_S", limit)


def test_long_work_is_offered_with_its_time_and_starts_on_the_click(qtbot, settled_window, monkeypatch, tmp_path):
    timed_for_real(monkeypatch, 0.0)  # whatever the trial measures is longer than this
    window = settled_window
    submitted = []
    window.runner.job_added.connect(lambda job: submitted.append(job.name))
    open_coverage(qtbot, window)
    view = window.views["coverage"]
    qtbot.waitUntil(lambda: view.runs.offer is not None and window.runner.is_idle(), timeout=60_000)
    assert view.offer_bar.isVisible() and view.offer_button.isVisible()
    assert re.fullmatch(r"Measure \(about \d+ (s|min)\)", view.offer_button.text()), view.offer_button.text()
    text = view.offer_text.text()
    assert text.startswith("Not measured yet: test and train with IDC, NC") and "on this machine now" in text, text
    assert sorted(view.runs.offer.keys) == sorted([TEST, TRAIN])
    assert [name for name in submitted if name.startswith("Time the coverage")]
    # nothing long ran: neither a measurement nor the relevance pass IDC needs
    assert not [name for name in submitted if name.startswith(("Coverage of", "Importance of"))], submitted
    assert view.table.text("nc", TEST) == "not measured yet"
    window.grab().save(str(tmp_path / "coverage-offer.png"))

    qtbot.mouseClick(view.offer_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: measured(window), timeout=120_000)
    assert view.runs.offer is None and not view.offer_bar.isVisible()
    assert view.table.text("nc", TEST).endswith(tuple("0123456789"))  # "… % — covered / total"


def test_quick_work_starts_by_itself_and_stored_work_is_never_offered(qtbot, open_window, settle, monkeypatch):
    timed = []

    def five_seconds(*args, **kwargs):
        work = estimate.coverage_work(*args, **kwargs)
        timed.append(work)
        return CoverageWork(work.missing, 5.0 if work.missing else 0.0, work.parts)

    monkeypatch.setattr(coverage_runs, "coverage_work", five_seconds)
    window = open_window()
    settle(window)
    open_coverage(qtbot, window)
    qtbot.waitUntil(lambda: measured(window), timeout=120_000)
    assert timed and timed[0].missing and window.views["coverage"].runs.offer is None
    project = window.session.project
    window.close()

    timed_for_real(monkeypatch, 0.0)  # anything to measure would now be offered
    reopened = open_window(project)
    settle(reopened)
    open_coverage(qtbot, reopened)
    view = reopened.views["coverage"]
    qtbot.waitUntil(lambda: measured(reopened), timeout=120_000)
    assert view.runs.offer is None and not view.offer_bar.isVisible()
    assert all(view.runs.runs[key].result("kmnc").reused for key in (TEST, TRAIN))
