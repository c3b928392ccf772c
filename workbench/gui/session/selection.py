"""The selection shared by every view: model, dataset, split, layer, neuron and input.

One small state object, views bound to it (glue's linked views): the tool bar, the project panel
and the views all set it, and all follow its `changed` signal.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal


class Selection(QObject):
    """Names and indices, not objects.

    `layer` and `neuron` name parts of the selected model, so choosing another model clears both,
    and choosing another layer clears the neuron. `input` is a (split, index) pair of the selected
    dataset, so choosing another dataset clears it.
    """

    changed = Signal(str)  # "model", "dataset", "split", "layer", "neuron" or "input"

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.model: str | None = None
        self.dataset: str | None = None
        self.split: str = "test"
        self.layer: str | None = None
        self.neuron: int | None = None
        self.input: tuple[str, int] | None = None

    def set_model(self, name: str | None) -> None:
        if name != self.model:
            self.model, self.layer, self.neuron = name, None, None
            self.changed.emit("model")

    def set_dataset(self, spec: str | None) -> None:
        if spec != self.dataset:
            self.dataset, self.input = spec, None
            self.changed.emit("dataset")

    def set_split(self, split: str) -> None:
        if split and split != self.split:
            self.split = split
            self.changed.emit("split")

    def set_layer(self, layer: str | None) -> None:
        if layer != self.layer:
            self.layer, self.neuron = layer, None
            self.changed.emit("layer")

    def set_neuron(self, neuron: int | None) -> None:
        neuron = None if neuron is None else int(neuron)
        if neuron != self.neuron:
            self.neuron = neuron
            self.changed.emit("neuron")

    def set_input(self, split: str, index: int) -> None:
        chosen = (split, int(index))
        if chosen != self.input:
            self.input = chosen
            self.changed.emit("input")
