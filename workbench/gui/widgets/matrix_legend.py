"""A legend of colour swatches — what the colours outside a matrix's colour map stand for — as one
wrapping line of rich text, so a long legend never widens the panel it sits in."""

from __future__ import annotations

from html import escape

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QLabel, QWidget

HATCH = "▨"  # stands for a hatched swatch: rich text draws no patterns


class MatrixLegend(QLabel):
    """`set_items([(colour, text, hatched), …])`; `texts()` lists what it says."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWordWrap(True)
        self._texts: list[str] = []

    def set_items(self, items: list[tuple[QColor, str, bool]]) -> None:
        self._texts = [text for _, text, _ in items]
        parts = []
        for color, text, hatched in items:
            if hatched:
                mark = f"<span style='color:{color.name()}; font-size:large'>{HATCH}</span>"
            else:
                mark = (f"<span style='background-color:{color.name()}; color:{color.name()}'>"
                        "&nbsp;&nbsp;&nbsp;&nbsp;</span>")
            parts.append(f"{mark}&nbsp;{escape(text)}")
        self.setText("&nbsp;&nbsp;&nbsp; ".join(parts))

    def texts(self) -> list[str]:
        return list(self._texts)
