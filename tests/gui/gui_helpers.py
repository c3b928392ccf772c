"""Helpers the GUI tests share (imported by name; fixtures live in conftest.py)."""

from __future__ import annotations

BUILD_POOL = "Build the candidate pool"


def robustness_set_up(qtbot, window, timeout: int) -> None:
    """Wait for the Robustness view's set-up; on a busy machine its timing may say it is too long to
    start by itself, and then the button that offers it is pressed, as a user would."""
    view = window.views["robustness"]

    def offered() -> list[str]:
        return [t for t in view.histogram.stack.empty.button_texts() if t.startswith(BUILD_POOL)]

    qtbot.waitUntil(lambda: view.base is not None or (bool(offered()) and window.runner.is_idle()), timeout=timeout)
    if view.base is None:
        view.histogram.stack.empty.click(offered()[0])
    qtbot.waitUntil(lambda: view.base is not None and window.session.is_ready and window.runner.is_idle(),
                    timeout=timeout)
