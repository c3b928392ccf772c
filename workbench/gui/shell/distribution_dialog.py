"""Jobs → Run long jobs on…: this machine, or their shards on a Ray cluster.

The choice is the application's (a cluster belongs to the user, not to one project) and applies to the
long jobs that can shard — coverage over a set, relevance over a split, a pool's attacks, a latent
search over many seeds, a retraining grid — from the next one on; the others run here as before.
*Connect* tries the choice in a job of the long lane, so in the process whose connection the long jobs
then use (starting a local Ray instance takes a few seconds; behind a running long job, it waits its
turn), and says how many CPUs and GPUs the cluster offers, or what is wrong and what to do.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QButtonGroup, QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QPushButton, QRadioButton, QSpinBox, QVBoxLayout, QWidget)

from workbench.core.errors import WorkbenchError
from workbench.core.execution.sharding import LOCAL, Distribution
from workbench.gui.plotting.colors import ERROR_TEXT


def connect(ctx, distribution: Distribution) -> str:
    """A job: connect to the distribution's cluster and describe it ('2 CPUs, no GPU')."""
    from workbench.core.execution.sharding import executor_for

    ctx.progress(0, 1, "connecting to Ray")
    executor = executor_for(distribution)
    gpus = executor.gpus
    ctx.progress(1, 1, "connected")
    return f"{executor.workers} CPU{'s' if executor.workers != 1 else ''}, " + \
        (f"{gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "no GPU")


class DistributionDialog(QDialog):
    """Collects a `Distribution`; `connect_job(distribution) -> Job` runs `connect` for the Connect button."""

    chosen = Signal(object)  # the Distribution, on OK

    def __init__(self, current: Distribution | None, connect_job=None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Run long jobs on")
        self.setMinimumWidth(600)
        self._connect_job = connect_job
        current = current or LOCAL
        self.here = QRadioButton("This machine")
        self.here.setObjectName("runHere")
        self.ray = QRadioButton("A Ray cluster: each job that can shard runs its shards there")
        self.ray.setObjectName("runOnRay")
        group = QButtonGroup(self)
        group.addButton(self.here)
        group.addButton(self.ray)
        (self.ray if current.executor == "ray" else self.here).setChecked(True)
        self.address = QLineEdit(current.address or "")
        self.address.setObjectName("rayAddress")
        self.address.setPlaceholderText("empty: a local Ray instance with this machine's cores")
        self.address.setToolTip("auto (the cluster this machine belongs to) or ray://HOST:PORT of the head node")
        self.shards = QSpinBox()
        self.shards.setObjectName("shardCount")
        self.shards.setRange(0, 100_000)
        self.shards.setSpecialValueText("four per worker")
        self.shards.setValue(current.shards or 0)
        self.connect_button = QPushButton("Connect")
        self.connect_button.setObjectName("connectRay")
        self.connect_button.clicked.connect(self._connect)
        self.status = QLabel()
        self.status.setObjectName("rayStatus")
        self.status.setWordWrap(True)
        about = QLabel("Coverage over a set, relevance over a split, a pool's attacks, a latent search and a "
                       "retraining grid run as shards; the other jobs run here. The cluster's nodes need the "
                       "workbench installed at this version (pip install 'dl-testing-workbench[distributed]').")
        about.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(self.address, 1)
        row.addWidget(self.connect_button)
        form = QFormLayout()
        form.addRow("Address", row)
        form.addRow("Shards per job", self.shards)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        for widget in (self.here, self.ray):
            layout.addWidget(widget)
        layout.addLayout(form)
        layout.addWidget(about)
        layout.addWidget(self.status)
        layout.addWidget(buttons)
        self.here.toggled.connect(self._enable)
        self._enable()

    def distribution(self) -> Distribution:
        if self.here.isChecked():
            return LOCAL
        return Distribution("ray", self.address.text().strip() or None, self.shards.value() or None)

    def _enable(self) -> None:
        on_ray = self.ray.isChecked()
        for widget in (self.address, self.shards, self.connect_button):
            widget.setEnabled(on_ray)

    def _say(self, text: str, error: bool = False) -> None:
        self.status.setStyleSheet(f"color: {ERROR_TEXT.name()};" if error else "")
        self.status.setText(text)
        needed = self.layout().totalHeightForWidth(self.width())  # a long message (Ray did not start) is not cut off
        if needed > self.height():
            self.resize(self.width(), needed)

    def _connect(self) -> None:
        if self._connect_job is None:
            return
        self._say("Connecting…")
        self.connect_button.setEnabled(False)
        job = self._connect_job(self.distribution())
        job.finished.connect(lambda described: self._say(f"Connected: {described}."))
        job.failed.connect(lambda exc, details="": self._say(
            f"{exc.message} {exc.hint}" if isinstance(exc, WorkbenchError) else f"Could not connect: {exc}", True))
        job.ended.connect(lambda: self.connect_button.setEnabled(self.ray.isChecked()))

    def _accept(self) -> None:
        self.chosen.emit(self.distribution())
        self.accept()
