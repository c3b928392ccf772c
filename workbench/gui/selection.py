"""The selection shared by every view: current model, dataset and split.

One small state object, views bound to it (glue's linked views): the tool bar, the project panel
and the views all set it, and all follow its `changed` signal.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal


class Selection(QObject):
    """Names, not objects: the project's model name, the dataset spec and the split."""

    changed = Signal(str)  # "model", "dataset" or "split"

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.model: str | None = None
        self.dataset: str | None = None
        self.split: str = "test"

    def set_model(self, name: str | None) -> None:
        if name != self.model:
            self.model = name
            self.changed.emit("model")

    def set_dataset(self, spec: str | None) -> None:
        if spec != self.dataset:
            self.dataset = spec
            self.changed.emit("dataset")

    def set_split(self, split: str) -> None:
        if split and split != self.split:
            self.split = split
            self.changed.emit("split")
