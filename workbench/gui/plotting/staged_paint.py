"""Paint the widgets one result changes in turns of the event loop, one widget a turn.

A result that reaches a view changes several of its widgets at once, and Qt paints every one of them
between the same two turns: the result's handler, then each plot's scene, each repainting the window.
Together that is longer than a frame on a slow machine (the Importance view's result: 40 ms), so
the window stutters although no single widget is slow. `StagedPaint` keeps all the state changes where
they are (synchronous, so a job started by the result starts at once) and holds back only the
painting: a staged widget has its updates switched off, and they come back on (with a full repaint)
one widget per turn, the first staged first, with a timer of a millisecond between them, so that the
window's other timers and input run between the paints.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QWidget
from shiboken6 import isValid

STEP_MS = 1  # between two staged paints: a real timer, so the event loop takes a turn between them


class StagedPaint(QObject):
    """`stage(*widgets)` holds back their painting; they then paint one per turn, in staging order."""

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.queue: list[QWidget] = []
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(STEP_MS)
        self.timer.timeout.connect(self._paint_next)

    def stage(self, *widgets: QWidget) -> None:
        """Paint `widgets` in later turns (a widget staged already keeps its place in the queue).
        A hidden widget does not paint now anyway and is left alone."""
        for widget in widgets:
            if widget.isVisible() and widget not in self.queue:
                widget.setUpdatesEnabled(False)
                self.queue.append(widget)
        if self.queue and not self.timer.isActive():
            self.timer.start()

    def _paint_next(self) -> None:
        if self.queue:
            widget = self.queue.pop(0)
            if isValid(widget):  # (a widget closed meanwhile is gone)
                widget.setUpdatesEnabled(True)  # Qt repaints the whole widget when its updates come back
        if self.queue:
            self.timer.start()
