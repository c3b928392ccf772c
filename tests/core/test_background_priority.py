"""Background work's scheduling priority: nice 10 by default, `WORKBENCH_BACKGROUND_NICENESS` where a machine
is shared with other work of normal priority, and a thread's own priority changed, not its process's."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from workbench.core.execution.jobs import BACKGROUND_NICENESS, NICENESS_VARIABLE, background_niceness, run_in_background


@pytest.mark.parametrize(("value", "niceness"), [
    (None, BACKGROUND_NICENESS), ("", BACKGROUND_NICENESS), ("0", 0), (" 5 ", 5), ("19", 19),
    ("25", 19), ("-3", 0), ("abc", BACKGROUND_NICENESS), ("2.5", BACKGROUND_NICENESS)])
def test_the_niceness_is_read_from_the_environment_and_kept_in_range(monkeypatch, value, niceness):
    if value is None:
        monkeypatch.delenv(NICENESS_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(NICENESS_VARIABLE, value)
    assert background_niceness() == niceness


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread has its own priority on Linux only")
def test_a_background_thread_steps_back_and_the_caller_does_not(monkeypatch):
    monkeypatch.setenv(NICENESS_VARIABLE, "7")
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen: list[int] = []

    def background() -> None:
        run_in_background()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    assert seen == [max(before, 7)]  # a priority is never raised: a thread already further back stays there
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
