"""Colours shared by every view, so a class has the same colour everywhere."""

from __future__ import annotations

from PySide6.QtGui import QColor

# Tableau 10: a qualitative palette of ten colours that stay distinguishable on light and dark.
CLASS_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                 "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"]
ERROR_TEXT = QColor("#c62828")  # what went wrong, said in text: a failed job, a damaged artifact, a refused choice
MISMATCH = QColor("#d62728")  # the frame of a thumbnail whose prediction differs from its label
COUNT_COLORMAP = "viridis"  # non-negative counts: perceptually uniform, sequential


def class_color(index: int) -> QColor:
    """The colour of class `index`; beyond ten classes the palette repeats (and views say so)."""
    return QColor(CLASS_PALETTE[index % len(CLASS_PALETTE)])
RELEVANCE_COLORMAP = "CET-D1"  # signed relevance: blue–white–red, centred at 0 with symmetric levels
MARKED = QColor("#e8710a")  # the top-m neurons, in bars and markers: outside both colour maps
UNMARKED = QColor("#9aa0a6")  # every other neuron's bar
EMPTY_CELL = QColor("#8a8a8a")  # cells with no value (a class without correctly classified inputs, NaN)
UNCOVERED = QColor("#cfcfcf")  # coverage cells no input reached: a neutral grey outside the count colour map
BOTH_SETS = QColor("#332288")  # difference view: cells both test sets cover (each set alone: its own colour)
NEVER_COVERABLE = QColor("#7a7a7a")  # KMNC neurons constant on the training data: hatched in this grey
