"""Whether the window is painting a frame: the paints Qt makes when a window handles its update
request (the event loop's, or a widget's `repaint()`), as opposed to a grab or a render.

A widget may spread slow drawing over several frames (the thumbnail grid draws new cells for a few
milliseconds per frame and the rest in the next ones): on screen a cell drawn a frame later is not
seen, and the window keeps its frame rate. A grab is asked for by code that wants the picture now
(a screenshot, an export, a test), so outside a frame everything is drawn at once.
"""

from __future__ import annotations

from contextlib import contextmanager

from PySide6.QtCore import QEvent

_frames = 0  # frames being painted, nested


def painting_frame() -> bool:
    return _frames > 0


@contextmanager
def frame():
    global _frames
    _frames += 1
    try:
        yield
    finally:
        _frames -= 1


def window_event(handle, event: QEvent) -> bool:
    """A top-level window's `event()`: `handle(event)` (the base class's), inside a frame when the
    event is the window's update request, in which Qt paints every dirty widget of the window."""
    if event.type() == QEvent.Type.UpdateRequest:
        with frame():
            return handle(event)
    return handle(event)
