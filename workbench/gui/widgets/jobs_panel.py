"""The jobs panel: one row per job with progress, elapsed / estimated time, device and cancel.

Finished jobs stay listed with their outcome (done, cancelled, failed and why); double-clicking
one opens its result or, for a failure, the error dialog again.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QHBoxLayout, QHeaderView, QProgressBar, QPushButton, QToolButton, QTreeWidget,
                               QTreeWidgetItem, QVBoxLayout, QWidget)

from workbench.gui.plotting.colors import ERROR_TEXT
from workbench.gui.session.jobs import CANCELLED, DONE, FAILED, QUEUED, RUNNING, Job, JobRunner

COLUMNS = ["Job", "Progress", "Time", "Device", "Status", ""]
PROGRESS_REDRAW_MS = 100
OUTCOME_COLORS = {DONE: "#2e7d32", CANCELLED: "#8d6e63", FAILED: ERROR_TEXT.name()}


def format_seconds(seconds: float) -> str:
    """'0.4 s', '12 s', '3 min 05 s', '1 h 02 min'."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class _JobItem(QTreeWidgetItem):
    """A row that knows its job (a Python attribute, not item data)."""

    def __init__(self, job: Job):
        super().__init__([job.name, "", "", "", "", ""])
        self.job = job
        self.shown_state, self.shown_done = "", 0  # the job's state and progress when the row was last drawn


class JobsPanel(QWidget):
    """Rows for a runner's jobs, refreshed by its signals and, for the clocks, a timer."""

    open_requested = Signal(object)  # a finished Job the user double-clicked

    def __init__(self, runner: JobRunner, parent: QWidget | None = None):
        super().__init__(parent)
        self.runner = runner
        self.tree = QTreeWidget()
        self.tree.setObjectName("jobsTree")
        self.tree.setColumnCount(len(COLUMNS))
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        header = self.tree.header()
        header.setStretchLastSection(False)
        # The job's name takes the room the status leaves: a name says what runs, and is never cut short.
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(4, QHeaderView.ResizeMode.ResizeToContents)
        for col, width in ((1, 160), (2, 130), (3, 120), (5, 80)):  # device: "CPU · 3 shards"
            self.tree.setColumnWidth(col, width)
        self.tree.itemDoubleClicked.connect(lambda item, _: self.open_requested.emit(item.job))

        self.cancel_all_button = QPushButton("Cancel all")
        self.cancel_all_button.clicked.connect(runner.cancel_all)
        self.clear_button = QPushButton("Clear finished")
        self.clear_button.clicked.connect(self.clear_finished)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.clear_button)
        buttons.addWidget(self.cancel_all_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.tree)
        layout.addLayout(buttons)

        self._items: dict[int, _JobItem] = {}
        self.clock = QTimer(self)
        self.clock.setInterval(500)
        self.clock.timeout.connect(self._tick)
        # A running job's progress is shown at most ten times a second, all rows at once: redrawing a
        # row per report would cost the window more than the bar's smoothness is worth.
        self._progressed: set[int] = set()
        self.progress_clock = QTimer(self)
        self.progress_clock.setSingleShot(True)
        self.progress_clock.setInterval(PROGRESS_REDRAW_MS)
        self.progress_clock.timeout.connect(self._show_progress)
        runner.job_added.connect(self.add_job)
        runner.job_changed.connect(self._on_changed)
        runner.job_ended.connect(self._update_waiting)
        runner.job_forgotten.connect(self._drop)
        for job in runner.jobs:
            self.add_job(job)
        self._update_buttons()

    def item(self, job: Job) -> _JobItem | None:
        return self._items.get(job.record.id)

    def _on_changed(self, job: Job) -> None:
        item = self.item(job)
        if item is None:
            return
        if job.record.state == RUNNING and item.shown_state == RUNNING and item.shown_done > 0:
            # progress: shown with the next batch (the first report at once, so the bar gets its scale)
            self._progressed.add(job.record.id)
            if not self.progress_clock.isActive():
                self.progress_clock.start()
            return
        started = job.record.state == RUNNING
        self.update_job(job)
        if started:  # what the queued jobs wait for has changed
            self._update_waiting()

    def _show_progress(self) -> None:
        progressed, self._progressed = self._progressed, set()
        for job_id in progressed:
            item = self._items.get(job_id)
            if item is not None:
                self.update_job(item.job)

    def add_job(self, job: Job) -> None:
        item = _JobItem(job)
        self.tree.insertTopLevelItem(0, item)  # newest first
        self._items[job.record.id] = item
        bar = QProgressBar()
        bar.setRange(0, 0)  # busy until the job reports a total
        bar.setTextVisible(True)
        bar.setMaximumHeight(18)
        self.tree.setItemWidget(item, 1, bar)
        cancel = QToolButton()
        cancel.setText("Cancel")
        cancel.setToolTip(f"Stop “{job.name}”; nothing half-done is kept")
        cancel.clicked.connect(job.cancel)
        cancel.clicked.connect(lambda: self.update_job(job))
        self.tree.setItemWidget(item, 5, cancel)
        item.setToolTip(0, job.name)
        self.update_job(job)
        if not self.clock.isActive():
            self.clock.start()

    def update_job(self, job: Job) -> None:
        item = self.item(job)
        if item is None:
            return
        r = job.record
        item.shown_state, item.shown_done = r.state, r.done
        bar: QProgressBar = self.tree.itemWidget(item, 1)
        # A progress bar repaints at once when its value changes, and that repaint draws every widget of
        # the window waiting to be redrawn, there and then. With its updates off while it changes, the
        # bar is drawn with the rest of the window in the next frame instead.
        bar.setUpdatesEnabled(False)
        if r.state == RUNNING and r.total:
            bar.setRange(0, 1000)
            bar.setValue(int(1000 * r.done / r.total))
            bar.setFormat(f"{100 * r.done / r.total:.0f} %")
        elif r.state == DONE:
            bar.setRange(0, 1)
            bar.setValue(1)
            bar.setFormat("100 %")
        elif r.state in (CANCELLED, FAILED):
            bar.setRange(0, max(1, r.total))
            bar.setValue(min(r.done, max(1, r.total)))
            bar.setFormat("stopped" if r.state == CANCELLED else "failed")
        bar.setUpdatesEnabled(True)
        item.setText(2, self._time_text(job))
        item.setText(3, (r.device or "—") + (f" · {r.shards_short}" if r.shards_short else ""))
        where = f"{r.device}; runs in the {r.where}" if r.where else r.device
        item.setToolTip(3, where + (f"; its shards run on {r.shards}" if r.shards else ""))
        status = {QUEUED: self._waiting_text(job), RUNNING: r.message or "running"}.get(r.state, r.state)
        if r.state in (CANCELLED, FAILED) and r.message:
            status = f"{r.state}: {r.message}"
        if r.state == DONE and r.notices:
            status = f"done; {r.notices[-1]}"
        item.setText(4, status)
        item.setToolTip(4, "\n".join([status, *r.notices[:-1]]) if r.notices else status)
        color = OUTCOME_COLORS.get(r.state)
        item.setForeground(4, QColor(color) if color else self.palette().text())
        cancel = self.tree.itemWidget(item, 5)
        if cancel is not None:
            if r.active:
                cancel.setEnabled(not job.ctx.cancelled)
            else:  # the view re-shows index widgets it holds, so a finished row loses its button
                self.tree.removeItemWidget(item, 5)
        self._update_buttons()

    def _waiting_text(self, job: Job) -> str:
        """Why a queued job has not started: the job running in its lane."""
        ahead = self.runner.waiting_for(job)
        lane = {"long": "the lane of long jobs", "interactive": "the lane of quick jobs",
                "io": "the file-reading lane"}.get(job.record.lane, "its lane")
        if not ahead:
            return "waiting to start"
        return f"waiting for “{ahead[0].name}” to finish ({lane})"

    def _update_waiting(self, _job: Job = None) -> None:
        for item in self._items.values():
            if item.job.record.state == QUEUED:
                self.update_job(item.job)

    def _time_text(self, job: Job) -> str:
        r = job.record
        if r.state == QUEUED:
            return ""
        text = format_seconds(r.elapsed)
        if r.eta is not None and r.done < r.total:
            text += f" / ~{format_seconds(r.eta)} left"
        return text

    def _tick(self) -> None:
        active = [item for item in self._items.values() if item.job.record.active]
        for item in active:
            item.setText(2, self._time_text(item.job))
        if not active:
            self.clock.stop()

    def _update_buttons(self) -> None:
        self.cancel_all_button.setEnabled(any(j.record.active for j in self.runner.jobs))
        self.clear_button.setEnabled(any(not j.record.active for j in self.runner.jobs))

    def _drop(self, job: Job) -> None:
        item = self._items.pop(job.record.id, None)
        if item is not None:
            self.tree.takeTopLevelItem(self.tree.indexOfTopLevelItem(item))

    def clear_finished(self) -> None:
        self.runner.clear_finished()
        for job_id, item in list(self._items.items()):
            if not item.job.record.active:
                self.tree.takeTopLevelItem(self.tree.indexOfTopLevelItem(item))
                del self._items[job_id]
        self._update_buttons()
