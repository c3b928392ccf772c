"""A colour scale for relevance drawn over images: what the overlay's colours stand for.

The overlay (`relevance_overlay.py`) maps −limit … 0 … +limit onto the diverging relevance map:
blue against the explained class, white for none, red for it. This small bar shows that map with
its three values and a title, beside one image (vertical) or over a gallery (horizontal). Every
text gets the room it needs — the widget's size is computed from its font — so nothing is elided.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from workbench.gui.widgets.relevance_overlay import relevance_lut, to_rgb_qimage

MINUS = "\u2212"


def limit_text(value: float) -> str:
    """A colour-scale end without a sign: three significant digits, whole numbers from 1,000 up."""
    value = abs(float(value))
    if not np.isfinite(value):
        return "?"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


class RelevanceScale(QWidget):
    """`set_limit(limit)`: the bar runs from −limit (blue) through 0 (white) to +limit (red).

    Vertical: the title on top, the bar under it with +limit at its top end; `length` is the whole
    widget's height. Horizontal: one line high, "title  −limit [bar] +limit" with 0 written in the
    bar's white middle; `length` is the bar's. `texts()` and `text_rects()` say what is written
    where (the paint uses the same rects).
    """

    BAR = 10  # px: the bar's thickness
    GAP = 4  # px between the bar and its texts

    def __init__(self, parent: QWidget | None = None, title: str = "relevance",
                 orientation: Qt.Orientation = Qt.Orientation.Vertical, length: int = 140, tip: str = ""):
        super().__init__(parent)
        self.title, self.orientation, self.length = title, orientation, int(length)
        self.limit = 1.0
        font = self.font()
        font.setPointSizeF(font.pointSizeF() * 0.9)
        self.setFont(font)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.setToolTip(tip or ("What the colours over the image mean: blue is relevance against the explained "
                                "class, white none, red relevance for it. The colour covers the image the more, "
                                "the larger |relevance| is, times the overlay's opacity."))
        lut = relevance_lut()
        # Vertical bars put +limit on top: the first row of the image is the top of the bar.
        gradient = lut[::-1][:, None, :] if self.vertical else lut[None, :, :]
        self.gradient = to_rgb_qimage(np.ascontiguousarray(gradient))

    @property
    def vertical(self) -> bool:
        return self.orientation == Qt.Orientation.Vertical

    def set_limit(self, limit: float, title: str | None = None) -> None:
        self.limit = float(limit)
        if title is not None:
            self.title = title
        self.updateGeometry()
        self.update()

    def texts(self) -> list[str]:
        """[title, +limit, 0, −limit]: what the scale says."""
        value = limit_text(self.limit)
        return [self.title, f"+{value}", "0", f"{MINUS}{value}"]

    # --- geometry ------------------------------------------------------------------------------------

    def _line(self) -> int:
        return self.fontMetrics().height()

    def _widest_value(self) -> int:
        fm = self.fontMetrics()
        return max(fm.horizontalAdvance(t) for t in self.texts()[1:]) + 1

    def sizeHint(self) -> QSize:
        fm, line = self.fontMetrics(), self._line()
        title_w = fm.horizontalAdvance(self.title) + 1
        if self.vertical:
            return QSize(max(title_w, self.BAR + self.GAP + self._widest_value()), max(self.length, 3 * line))
        low, high = (fm.horizontalAdvance(t) + 1 for t in self.texts()[3:0:-2])
        return QSize(title_w + 2 * self.GAP + low + self.GAP + self.length + self.GAP + high, line + 1)

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

    def bar_rect(self) -> QRect:
        line = self._line()
        if self.vertical:
            top = line + line // 2  # under the title, with half a line for the +limit text centred on the end
            return QRect(0, top, self.BAR, max(1, self.height() - top - line // 2 - 1))
        fm = self.fontMetrics()
        left = fm.horizontalAdvance(self.title) + 1 + 2 * self.GAP + fm.horizontalAdvance(self.texts()[3]) + 1
        return QRect(left + self.GAP, 1, self.length, line - 1)

    def text_rects(self) -> list[tuple[QRect, str]]:
        """Where each text is drawn: the title, then +limit, 0 and −limit (in this order)."""
        fm, line = self.fontMetrics(), self._line()
        bar = self.bar_rect()
        title, high, zero, low = self.texts()
        if self.vertical:
            x = bar.right() + 1 + self.GAP
            width = self.width() - x
            rects = [(QRect(0, 0, self.width(), line), title)]
            for y, text in ((bar.top(), high), (bar.center().y(), zero), (bar.bottom(), low)):
                rects.append((QRect(x, y - line // 2, width, line), text))
            return rects
        high_w, zero_w, low_w = (fm.horizontalAdvance(t) + 1 for t in (high, zero, low))
        return [(QRect(0, 0, fm.horizontalAdvance(title) + 1, self.height()), title),
                (QRect(bar.right() + 1 + self.GAP, 0, high_w, self.height()), high),
                (QRect(bar.center().x() - zero_w // 2, 0, zero_w, self.height()), zero),
                (QRect(bar.left() - self.GAP - low_w, 0, low_w, self.height()), low)]

    # --- painting ------------------------------------------------------------------------------------

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, True)
        bar = self.bar_rect()
        painter.drawImage(bar, self.gradient)
        text = self.palette().color(QPalette.ColorRole.WindowText)
        frame = QColor(text)
        frame.setAlphaF(0.5)
        painter.setPen(QPen(frame, 1))
        painter.drawRect(bar.adjusted(0, 0, -1, -1))
        painter.setPen(text)
        rects = self.text_rects()
        title_rect, title = rects[0]
        align = Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft
        painter.drawText(title_rect, align, title)
        for position, (rect, value) in enumerate(rects[1:]):
            if self.vertical:
                painter.drawLine(QPoint(bar.right() + 1, rect.center().y()), QPoint(bar.right() + 3, rect.center().y()))
                painter.drawText(rect, align, value)
            else:
                # 0 sits on the bar's white middle: black there whatever the palette.
                painter.setPen(QColor("black") if position == 1 else text)
                painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, value)
        painter.end()
