"""The tool bar's pickers for the shared selection: model, dataset and split (or stored test set).

Bound both ways: choosing in a picker sets the selection, and the pickers follow the selection and
the project's contents, however they change.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLabel, QToolBar, QWidget

from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session


class SelectionToolBar(QToolBar):
    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__("Selection", parent)
        self.session, self.selection = session, selection
        self.setObjectName("selectionToolBar")
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.model_box, self.dataset_box, self.split_box = QComboBox(), QComboBox(), QComboBox()
        self.model_box.setObjectName("modelPicker")
        self.dataset_box.setObjectName("datasetPicker")
        self.split_box.setObjectName("splitPicker")
        self.split_box.setToolTip("The dataset split, or a test set the project stores (a pool, a selection, …)")
        self.model_names: list[str] = []  # what each picker entry stands for, by position
        self.dataset_specs: list[str] = []
        self.split_names: list[str] = []
        for label, box, width in (("Model", self.model_box, 200), ("Dataset", self.dataset_box, 170),
                                  ("Split", self.split_box, 120)):
            text = QLabel(f"  {label} ")
            text.setBuddy(box)
            box.setMinimumWidth(width)
            box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
            self.addWidget(text)
            self.addWidget(box)
        # Stored test sets have long names: the split picker grows to a point, then elides in its list
        self.split_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.split_box.setMinimumContentsLength(16)
        self.split_box.view().setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.model_box.activated.connect(lambda i: self._choose(self.model_names, i, selection.set_model))
        self.dataset_box.activated.connect(lambda i: self._choose(self.dataset_specs, i, selection.set_dataset))
        self.split_box.activated.connect(lambda i: self._choose(self.split_names, i, selection.set_split))
        self.addSeparator()
        selection.changed.connect(lambda what: what in ("model", "dataset", "split") and self.refill())
        session.project_changed.connect(self.refill)
        session.dataset_loaded.connect(lambda _: self.refill())
        session.ready.connect(self.refill)
        self.refill()

    @staticmethod
    def _choose(values: list[str], index: int, setter) -> None:
        if 0 <= index < len(values):
            setter(values[index])

    def refill(self) -> None:
        """Refill the pickers from the project and point them at the selection."""
        project, selection = self.session.project, self.selection
        self.model_names = [m["name"] for m in project.models]
        self.dataset_specs = project.datasets
        data = self.session.datasets.get(selection.dataset)
        self.split_names = [s for s in data.splits if len(data.splits[s])] if data else ["train", "test"]
        split_texts = [f"{s} ({len(data.splits[s]):,})" if data else s for s in self.split_names]
        if data is not None:  # the project's stored test sets of this dataset: pools, selections, fuzzer tests, …
            for info in self.session.stored_testsets(selection.dataset):
                self.split_names.append(info.name)
                split_texts.append(f"{info.name} ({info.size:,})" if info.size is not None else info.name)
        for box, values, texts, current in (
                (self.model_box, self.model_names, self.model_names, selection.model),
                (self.dataset_box, self.dataset_specs, [self.session.dataset_title(s) for s in self.dataset_specs],
                 selection.dataset),
                (self.split_box, self.split_names, split_texts, selection.split)):
            box.blockSignals(True)
            box.clear()
            box.addItems(texts)
            box.setCurrentIndex(values.index(current) if current in values else -1)
            box.setEnabled(bool(values))
            box.blockSignals(False)
        if not self.model_names:
            self.model_box.setPlaceholderText("no model yet")
