"""The input inspector: one image with its relevance heatmap over it, and its relevance per neuron.

The user picks an image by split and index (or it arrives through the linked selection: a gallery
tile, the Data view); the view explains it in a job and hands the result here. The picture is the
grey image with the diverging heatmap blended over it at the chosen opacity, scaled by a whole
factor without blur, with a colour scale beside it from −limit to +limit (the image's largest
|relevance|, the levels the overlay is drawn to); the bars show that image's relevance at each neuron of the layer, the
dataset-level top-m marked as in the bar chart beside the heatmap.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QSpinBox, QToolButton, QVBoxLayout,
                               QWidget)

from workbench.gui.plotting.colors import MISMATCH
from workbench.gui.widgets.empty_state import MessageOrContent
from workbench.gui.widgets.neuron_bars import NeuronBars
from workbench.gui.widgets.relevance_overlay import overlay_image, symmetric_limit
from workbench.gui.widgets.relevance_scale import RelevanceScale

EXPLAIN_MODES = (("prediction", "prediction"), ("neuron", "selected neuron"))


def restyle(widget, sheet: str) -> None:
    """Set a style sheet only when it changes: each call re-polishes the widget, even with the same sheet."""
    if widget.styleSheet() != sheet:
        widget.setStyleSheet(sheet)


class InputInspector(QWidget):
    """Controls emit `input_chosen(split, index)` and `mode_changed()`; bars emit `neuron_clicked(n)`."""

    input_chosen = Signal(str, int)
    mode_changed = Signal()
    neuron_clicked = Signal(int)
    IMAGE_SIZE = 148  # 5× a 28×28 image, and its red frame

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.splits: dict[str, int] = {}  # split name → number of images
        self.pixels: np.ndarray | None = None
        self.heatmap: np.ndarray | None = None
        self.limit = 1.0  # the overlay's levels are ±limit, as the colour scale says
        self.opacity = 0.6
        self.explanation = None
        self._shown_split = ""  # the split of the image the explanation is of

        self.split_box = QComboBox()
        self.split_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.split_box.setToolTip("The split the image comes from")
        self.index_box = QSpinBox()
        self.index_box.setObjectName("inspectorIndex")
        self.index_box.setKeyboardTracking(False)  # typing "123" asks for one image, not three
        self.index_box.setToolTip("The image's index in its split")
        self.index_box.setMinimumWidth(80)
        self.previous_button, self.next_button = QToolButton(), QToolButton()
        self.previous_button.setArrowType(Qt.ArrowType.LeftArrow)
        self.next_button.setArrowType(Qt.ArrowType.RightArrow)
        self.previous_button.setToolTip("Previous image")
        self.next_button.setToolTip("Next image")
        self.mode_box = QComboBox()
        for _, text in EXPLAIN_MODES:
            self.mode_box.addItem(text)
        self.mode_box.setToolTip("Explain the predicted class, or only what flows through the selected neuron")
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Image"))
        controls.addWidget(self.split_box)
        controls.addWidget(QLabel("#"))
        controls.addWidget(self.index_box)
        controls.addWidget(self.previous_button)
        controls.addWidget(self.next_button)
        controls.addSpacing(8)
        controls.addWidget(QLabel("Explain"))
        controls.addWidget(self.mode_box)
        controls.addStretch(1)

        self.image = QLabel()
        self.image.setObjectName("inspectorImage")
        self.image.setFixedSize(self.IMAGE_SIZE, self.IMAGE_SIZE)
        self.image.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.scale = RelevanceScale(title="relevance", length=self.IMAGE_SIZE, tip=(
            "What the colours over the image mean: blue is relevance against the explained class, white "
            "none, red relevance for it, up to ±the image's largest |relevance|. The colour covers the "
            "image the more, the larger |relevance| is, times the overlay's opacity."))
        self.scale.setObjectName("inspectorScale")
        self.title = QLabel()
        self.title.setStyleSheet("font-weight: bold")
        self.truth = QLabel()
        self.prediction = QLabel()
        self.explained = QLabel()
        self.explained.setWordWrap(True)
        # Two lines reserved: the layout does not ask a wrapping label its height, and a second line
        # would otherwise push the image and its captions over each other in a short panel.
        self.explained.setMinimumHeight(2 * self.explained.fontMetrics().lineSpacing())
        # True class and prediction on one line: the Importance view, its gallery full, then fits a
        # 1440 × 900 window (one line more made the window grow, and lay out and draw everything again).
        classes = QHBoxLayout()
        classes.setContentsMargins(0, 0, 0, 0)
        for text, label in (("True:", self.truth), ("predicted:", self.prediction)):
            classes.addWidget(QLabel(text))
            classes.addWidget(label)
            classes.addSpacing(6)
        classes.addStretch(1)
        picture = QVBoxLayout()
        picture.setSpacing(2)
        picture.addWidget(self.title)
        image_row = QHBoxLayout()
        image_row.setSpacing(6)
        image_row.addWidget(self.image)
        image_row.addWidget(self.scale)
        image_row.addStretch(1)
        picture.addLayout(image_row)
        picture.addLayout(classes)
        picture.addWidget(self.explained)
        picture.addStretch(1)
        self.bars = NeuronBars(value_title="Relevance of this image", neuron_title="Neuron")
        self.bars.setObjectName("inspectorBars")
        self.bars.setMinimumHeight(120)
        body = QHBoxLayout()
        body.addLayout(picture)
        body.addWidget(self.bars, 1)
        self.content = QWidget()
        body_widget = QVBoxLayout(self.content)
        body_widget.setContentsMargins(0, 0, 0, 0)
        body_widget.addLayout(body)
        self.stack = MessageOrContent(self.content)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addLayout(controls)
        layout.addWidget(self.stack, 1)

        self.split_box.activated.connect(lambda _: self._choose())
        self.index_box.valueChanged.connect(lambda _: self._choose())
        self.previous_button.clicked.connect(lambda: self.index_box.stepBy(-1))
        self.next_button.clicked.connect(lambda: self.index_box.stepBy(1))
        self.mode_box.currentIndexChanged.connect(lambda _: self.mode_changed.emit())
        self.bars.neuron_clicked.connect(self.neuron_clicked)

    # --- picking -----------------------------------------------------------------------------------

    def set_splits(self, sizes: dict[str, int]) -> None:
        """The splits an image can come from, with their sizes."""
        if sizes == self.splits:
            return
        self.splits = dict(sizes)
        self.split_box.blockSignals(True)
        self.split_box.clear()
        for name, n in sizes.items():
            self.split_box.addItem(f"{name} ({n:,})", name)
        self.split_box.blockSignals(False)

    def show_choice(self, split: str, index: int) -> None:
        """Point the controls at (split, index) without asking for it again."""
        for box in (self.split_box, self.index_box):
            box.blockSignals(True)
        position = self.split_box.findData(split)
        if position >= 0:
            self.split_box.setCurrentIndex(position)
        self.index_box.setRange(0, max(0, self.splits.get(split, 1) - 1))
        self.index_box.setValue(index)
        for box in (self.split_box, self.index_box):
            box.blockSignals(False)

    def choose(self, split: str, index: int) -> None:
        """Pick an image as the user would: the controls move and `input_chosen` fires."""
        self.show_choice(split, index)
        self._choose()

    def _choose(self) -> None:
        split = self.split_box.currentData()
        if split is None:
            return
        self.index_box.setRange(0, max(0, self.splits.get(split, 1) - 1))
        index = self.index_box.value()
        shown = self.explanation is not None and (self._shown_split, self.explanation.index) == (split, index)
        if not shown:  # until its explanation comes, the heading names the image asked for, not the last one
            self.title.setText(f"{split.capitalize()} image #{index:,}: explaining…")
        self.input_chosen.emit(split, index)

    def mode(self) -> str:
        return EXPLAIN_MODES[max(0, self.mode_box.currentIndex())][0]

    # --- showing -----------------------------------------------------------------------------------

    def show_explanation(self, explanation, pixels: np.ndarray, split: str, class_names: list[str],
                         marked=(), selected: int | None = None, what: str = "") -> None:
        """Show an `InputExplanation` of the image `pixels` (H×W×C uint8)."""
        if explanation is self.explanation and split == self._shown_split:  # on screen already: only marks move
            self.explained.setText(what)
            self.set_marks(marked, selected)
            self.stack.show_content()
            return
        self.explanation, self.pixels, self._shown_split = explanation, pixels, split
        self.heatmap = np.asarray(explanation.heatmap, dtype=np.float32)

        def names(k: int) -> str:
            return class_names[k] if 0 <= k < len(class_names) else str(k)

        wrong = explanation.label != explanation.prediction
        self.title.setText(f"{split.capitalize()} image #{explanation.index:,}")
        self.truth.setText(names(int(explanation.label)))
        self.prediction.setText(names(int(explanation.prediction)) + ("  (wrong)" if wrong else ""))
        restyle(self.prediction, f"color: {MISMATCH.name()}; font-weight: bold" if wrong else "")
        self.explained.setText(what)
        self._draw_image()
        relevance = np.asarray(explanation.layer_relevance, dtype=np.float64)
        self.bars.set_values(relevance, marked, selected,
                             f"Relevance of {split} image #{explanation.index:,} at each neuron; "
                             "hover to read, click to select.")
        self.stack.show_content()

    def set_opacity(self, opacity: float) -> None:
        if opacity != self.opacity:
            self.opacity = opacity
            self._draw_image()

    def set_marks(self, marked, selected: int | None) -> None:
        if len(self.bars.plot.values):
            self.bars.plot.set_values(self.bars.plot.values, marked, selected)

    def _draw_image(self) -> None:
        if self.pixels is None:
            return
        self.limit = symmetric_limit(self.heatmap) if self.heatmap is not None else 1.0
        self.scale.set_limit(self.limit)
        image = overlay_image(self.pixels, self.heatmap, self.opacity, self.limit)
        scale = max(1, (self.IMAGE_SIZE - 8) // max(image.width(), image.height()))  # room for the red frame
        self.image.setPixmap(QPixmap.fromImage(image.scaled(image.width() * scale, image.height() * scale,
                                                            Qt.AspectRatioMode.KeepAspectRatio,
                                                            Qt.TransformationMode.FastTransformation)))
        wrong = self.explanation is not None and self.explanation.label != self.explanation.prediction
        restyle(self.image, f"border: 3px solid {MISMATCH.name()}" if wrong else "")
