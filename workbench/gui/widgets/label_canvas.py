"""The labelling canvas: one image, large and unblurred, that takes the rater's keys.

The image is enlarged by a whole factor with nearest-neighbour scaling (10× for 28×28 by default),
so every pixel the generator made is seen as it is. The canvas holds the keyboard focus while a
rater labels and reports each key press as text in Qt's notation (`X`, `Ctrl+Z`, `Left`), which the
view looks up in the key map. Pixmaps of the entries about to be shown are made ahead of time
(`prefetch`), so the next image is on screen in the frame after the key press.
"""

from __future__ import annotations

import time

import numpy as np
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor, QImage, QKeySequence, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QSizePolicy, QWidget

#: pixmaps kept ahead of and behind the shown entry
CACHE_LIMIT = 16


def image_pixmap(image: np.ndarray, zoom: int) -> QPixmap:
    """An image (C×H×W or H×W; floats 0–1, or bytes 0–255 as a split stores them) as a pixmap enlarged
    `zoom` times, nearest neighbour."""
    array = np.asarray(image)
    if array.ndim == 3:
        array = array[0] if array.shape[0] == 1 else np.moveaxis(array[:3], 0, -1)
    if array.dtype != np.uint8:
        array = np.clip(np.nan_to_num(array.astype(np.float32)) * 255 + 0.5, 0, 255).astype(np.uint8)
    pixels = np.ascontiguousarray(array)
    h, w = pixels.shape[:2]
    if pixels.ndim == 2:
        qimage = QImage(pixels.data, w, h, w, QImage.Format.Format_Grayscale8)
    else:
        qimage = QImage(pixels.data, w, h, 3 * w, QImage.Format.Format_RGB888)
    return QPixmap.fromImage(qimage.copy()).scaled(w * zoom, h * zoom, Qt.AspectRatioMode.IgnoreAspectRatio,
                                                   Qt.TransformationMode.FastTransformation)


class LabelCanvas(QWidget):
    key_pressed = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("labelCanvas")
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.zoom = 10
        self.pixmap: QPixmap | None = None
        self.shown_key = None  # what the shown pixmap is of
        self.frame = QColor(0, 0, 0, 0)  # a coloured frame (review mode: the consensus)
        self.message = ""
        self.painted_at = 0.0  # perf_counter() of the last paint of an image (for the benchmark)
        self._cache: dict = {}

    def sizeHint(self) -> QSize:
        return QSize(28 * self.zoom + 24, 28 * self.zoom + 24)

    def set_zoom(self, zoom: int) -> None:
        if zoom != self.zoom:
            self.zoom = zoom
            self._cache.clear()
            self.updateGeometry()

    def pixmap_for(self, key, image) -> QPixmap:
        pixmap = self._cache.get(key)
        if pixmap is None:
            pixmap = self._cache[key] = image_pixmap(image, self.zoom)
            while len(self._cache) > CACHE_LIMIT:
                self._cache.pop(next(iter(self._cache)))
        return pixmap

    def prefetch(self, entries) -> None:
        """Make the pixmaps of (key, image) pairs about to be shown."""
        for key, image in entries:
            self.pixmap_for(key, image)

    def show_image(self, key, image, frame: QColor | None = None) -> None:
        self.pixmap = self.pixmap_for(key, image)
        self.shown_key = key
        self.frame = frame or QColor(0, 0, 0, 0)
        self.message = ""
        self.update()

    def show_message(self, text: str) -> None:
        self.pixmap, self.shown_key, self.message = None, None, text
        self.update()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), self.palette().base())
        if self.pixmap is None:
            painter.setPen(self.palette().text().color())
            painter.drawText(self.rect().adjusted(12, 12, -12, -12),
                             Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap, self.message)
            return
        x = (self.width() - self.pixmap.width()) // 2
        y = (self.height() - self.pixmap.height()) // 2
        if self.frame.alpha():
            painter.setPen(QPen(self.frame, 4))
            painter.drawRect(x - 4, y - 4, self.pixmap.width() + 7, self.pixmap.height() + 7)
        painter.drawPixmap(x, y, self.pixmap)
        self.painted_at = time.perf_counter()
        if self.hasFocus():
            painter.setPen(QPen(self.palette().highlight().color(), 1, Qt.PenStyle.DashLine))
            painter.drawRect(self.rect().adjusted(1, 1, -2, -2))

    def keyPressEvent(self, event) -> None:
        key = event.key()
        if key in (Qt.Key.Key_Control, Qt.Key.Key_Shift, Qt.Key.Key_Alt, Qt.Key.Key_Meta, Qt.Key.Key_unknown):
            return super().keyPressEvent(event)
        text = QKeySequence(event.keyCombination()).toString(QKeySequence.SequenceFormat.PortableText)
        if text:
            self.key_pressed.emit(text)
            event.accept()
        else:
            super().keyPressEvent(event)

    def focusInEvent(self, event) -> None:
        super().focusInEvent(event)
        self.update()

    def focusOutEvent(self, event) -> None:
        super().focusOutEvent(event)
        self.update()
