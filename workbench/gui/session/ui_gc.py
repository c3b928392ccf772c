"""While jobs can run, Python's cyclic garbage collector runs on the UI thread only.

A reference cycle that holds Qt objects (a slot that refers to its sender, a pyqtgraph item) can
become garbage at any moment. If the collector then happens to run on a worker thread, it destroys
those Qt objects there: PySide disconnects their signals under Qt's connection lock and waits for
the GIL, which the UI thread holds while it waits for that same lock to connect a signal. That
deadlock froze the Robustness view's tests. So while a `JobRunner` lives, automatic collection is
off and a timer on the UI thread collects instead (the approach of pyqtgraph's GarbageCollector);
when the last runner shuts down, automatic collection is restored.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QTimer

COLLECT_EVERY_MS = 500

_users = 0
_timer: QTimer | None = None
_was_enabled = True


def _collect() -> None:
    """Collect the oldest generation whose allocation count passed its threshold, as gc itself would."""
    counts, limits = gc.get_count(), gc.get_threshold()
    for generation in (2, 1, 0):
        if counts[generation] > limits[generation]:
            gc.collect(generation)
            return


def acquire() -> None:
    """Called on the UI thread by each new job runner."""
    global _users, _timer, _was_enabled
    if _users == 0:
        _was_enabled = gc.isenabled()
        gc.disable()
        _timer = QTimer()
        _timer.timeout.connect(_collect)
        _timer.start(COLLECT_EVERY_MS)
    _users += 1


def release() -> None:
    """Called on the UI thread by each runner once its threads have stopped."""
    global _users, _timer
    _users = max(0, _users - 1)
    if _users == 0 and _timer is not None:
        _timer.stop()
        _timer = None
        gc.collect()
        if _was_enabled:
            gc.enable()


def freeze() -> None:
    """Move every object alive now (the imported libraries, the window) out of the collector's view,
    once start-up is done: a full collection then scans only what was made since, not all of PyTorch."""
    gc.collect()
    gc.freeze()
