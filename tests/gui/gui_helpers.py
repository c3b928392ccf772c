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


def flush_events(max_rounds: int = 200) -> None:
    """Run the event loop until a turn delivers nothing: every posted event (a layout request, a window's
    update request and the paints it makes, a queued signal, a zero-time timer) and whatever those post
    in turn, however long each takes.

    A fixed `qtbot.wait(ms)` guesses how long that is; on a loaded machine a late layout or paint then
    lands in the next part of the test (and is counted there). Timers with an interval are not waited
    for: wait for what they do with `qtbot.waitUntil`."""
    from PySide6.QtCore import QCoreApplication, QObject

    class Deliveries(QObject):
        count = 0

        def eventFilter(self, watched, event) -> bool:
            Deliveries.count += 1
            return False

    app = QCoreApplication.instance()
    deliveries = Deliveries()
    app.installEventFilter(deliveries)
    try:
        quiet = 0
        for _ in range(max_rounds):
            before = Deliveries.count
            QCoreApplication.sendPostedEvents()
            QCoreApplication.processEvents()
            quiet = quiet + 1 if Deliveries.count == before else 0
            if quiet == 2:  # a second empty turn: nothing was waiting behind the first
                return
    finally:
        app.removeEventFilter(deliveries)
