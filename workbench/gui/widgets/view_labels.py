"""Many short texts at points of a pyqtgraph view, painted by one item at the font's size whatever the zoom.

One item for all of them, where a `TextItem` per text is a scene item each: a 10×10 confusion matrix's
values, a plot's per-bar values or an IDC header's centroids as text items took the window tens of
milliseconds to build, lay out and paint every time they changed.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QColor


class ViewLabels(pg.GraphicsObject):
    """`set_labels([(x, y, text, colour), …], bounds)`: each text anchored at (x, y) in view coordinates.

    `anchor` is where on the text that point lies, as fractions of its width and height: (0.5, 0.5)
    centres it, (0, 0.5) starts it there. `bounds` (view coordinates) is the area the texts are drawn
    in; by default the points' own extent, one unit wider on every side.
    """

    def __init__(self, anchor: tuple[float, float] = (0.5, 0.5), color: QColor | str | None = None):
        super().__init__()
        self.anchor = anchor
        self.color = QColor(color) if color is not None else None
        self.labels: list[tuple[float, float, str, QColor | None]] = []
        self._bounds = QRectF()

    def set_labels(self, labels: list[tuple[float, float, str, QColor | None]], bounds: QRectF | None = None) -> None:
        self.prepareGeometryChange()
        self.labels = list(labels)
        if bounds is None and self.labels:
            xs, ys = [x for x, *_ in self.labels], [y for _, y, *_ in self.labels]
            bounds = QRectF(min(xs) - 1, min(ys) - 1, max(xs) - min(xs) + 2, max(ys) - min(ys) + 2)
        self._bounds = QRectF(bounds) if bounds is not None else QRectF()
        self.update()

    def texts(self) -> list[str]:
        return [text for _, _, text, _ in self.labels]

    def boundingRect(self) -> QRectF:
        return self._bounds

    def paint(self, painter, *_args) -> None:
        if not self.labels:
            return
        to_device = painter.transform()
        painter.save()
        painter.resetTransform()  # the text at the font's size, not stretched by the view's scale
        metrics = painter.fontMetrics()
        body = metrics.ascent() - metrics.descent()  # what the eye takes for a line's height
        across, down = self.anchor
        default = self.color or painter.pen().color()
        for x, y, text, color in self.labels:
            point = to_device.map(QPointF(x, y))
            painter.setPen(color or default)
            baseline = point.y() + (1 - down) * body
            painter.drawText(QPointF(point.x() - across * metrics.horizontalAdvance(text), baseline), text)
        painter.restore()
