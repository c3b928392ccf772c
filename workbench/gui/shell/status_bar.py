"""The status bar's permanent read-outs: running jobs, compute device, project folder, memory."""

from __future__ import annotations

import os
import resource

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QStatusBar, QWidget

from workbench.gui.session.jobs import JobRunner
from workbench.gui.session.session import Session

MEMORY_INTERVAL_MS = 2000


def memory_in_use() -> str:
    """Resident memory of this process ('812 MB'); the peak where the current value is unknown."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return f"{pages * os.sysconf('SC_PAGE_SIZE') / 2 ** 20:,.0f} MB"
    except (OSError, ValueError, IndexError):
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return f"{peak_kb / 1024:,.0f} MB peak"


class StatusBar(QStatusBar):
    def __init__(self, session: Session, runner: JobRunner, parent: QWidget | None = None):
        super().__init__(parent)
        self.runner = runner
        self.jobs_label = QLabel()
        self.device_label = QLabel("Device: starting…")
        self.device_label.setObjectName("deviceLabel")
        self.device_label.setToolTip("Where jobs compute: a CUDA GPU when present, else the CPU")
        self.project_label = QLabel(f"Project: {session.project.folder.name}")  # the whole path in the tooltip
        self.project_label.setToolTip(str(session.project.folder))
        self.memory_label = QLabel()
        self.memory_label.setToolTip("Memory this process uses")
        for widget in (self.jobs_label, self.device_label, self.project_label, self.memory_label):
            self.addPermanentWidget(widget)
        runner.device_found.connect(self.show_device)
        runner.job_added.connect(lambda _: self.update_jobs())
        runner.job_ended.connect(lambda _: self.update_jobs())
        self.memory_timer = QTimer(self)
        self.memory_timer.setInterval(MEMORY_INTERVAL_MS)
        self.memory_timer.timeout.connect(self.update_memory)
        self.memory_timer.start()
        self.update_memory()
        self.update_jobs()

    def show_device(self, description: str) -> None:
        self.device_label.setText(f"Device: {description}")

    def update_memory(self) -> None:
        self.memory_label.setText(f"Memory: {memory_in_use()}")

    def update_jobs(self) -> None:
        active = len(self.runner.active_jobs())
        self.jobs_label.setText(f"{active} job{'s' * (active != 1)} running" if active else "No jobs running")
