"""A generator's samples as one picture: a row per class, its name at the left, a column per sample.

`set_grid(grid, class_names)` takes float images in [0, 1] shaped (rows, per row, C, H, W) — a
class-conditional generator's samples per class, or a VAE's reconstructions of test images per
class — and draws them at a whole-number zoom with a 1-pixel gap, so no sample is resampled.
`picture()` is the pixmap as shown (what Export saves).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QFontMetrics, QImage, QPainter, QPixmap
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

GAP = 1  # pixels between samples, in screen pixels


def grid_image(grid: np.ndarray, zoom: int) -> QImage:
    """The samples as one grey (or RGB) image, `zoom` screen pixels per image pixel."""
    rows, per_row, channels, h, w = grid.shape
    pixels = np.clip(np.asarray(grid, dtype=np.float32) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    pixels = np.repeat(np.repeat(pixels, zoom, axis=3), zoom, axis=4)  # whole-number zoom: no resampling
    cell_h, cell_w = h * zoom + GAP, w * zoom + GAP
    canvas = np.full((channels, rows * cell_h - GAP, per_row * cell_w - GAP), 96, dtype=np.uint8)
    for r in range(rows):
        for c in range(per_row):
            canvas[:, r * cell_h:r * cell_h + h * zoom, c * cell_w:c * cell_w + w * zoom] = pixels[r, c]
    if channels == 1:
        data = np.ascontiguousarray(canvas[0])
        return QImage(data.tobytes(), data.shape[1], data.shape[0], data.shape[1], QImage.Format.Format_Grayscale8).copy()
    data = np.ascontiguousarray(canvas[:3].transpose(1, 2, 0))
    return QImage(data.tobytes(), data.shape[1], data.shape[0], 3 * data.shape[1], QImage.Format.Format_RGB888).copy()


class SampleGrid(QLabel):
    """Samples per class with the class names beside their rows."""

    def __init__(self, zoom: int = 2, parent: QWidget | None = None):
        super().__init__(parent)
        self.zoom = zoom
        self.grid: np.ndarray | None = None
        self.class_names: list[str] = []
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

    def set_grid(self, grid, class_names: list[str], row_labels: bool = True, max_height: int | None = None) -> None:
        """Show `grid`; with `max_height`, a taller picture is scaled down smoothly to that height."""
        grid = np.asarray(grid, dtype=np.float32)
        if grid.ndim != 5:
            raise ValueError(f"a sample grid is (rows, per row, C, H, W), not {grid.shape}")
        self.grid, self.class_names = grid, list(class_names)
        image = grid_image(grid, self.zoom)
        names = [self._name(r) for r in range(grid.shape[0])] if row_labels else []
        metrics = QFontMetrics(self.font())
        margin = max((metrics.horizontalAdvance(n) for n in names), default=-8) + 8
        pixmap = QPixmap(image.width() + margin, image.height())
        pixmap.fill(self.palette().color(self.backgroundRole()))
        painter = QPainter(pixmap)
        painter.setPen(self.palette().color(self.foregroundRole()))
        cell_h = grid.shape[3] * self.zoom + GAP
        for r, name in enumerate(names):
            painter.drawText(QRect(0, r * cell_h, margin - 6, cell_h - GAP),
                             Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, name)
        painter.drawImage(margin, 0, image)
        painter.end()
        if max_height is not None and pixmap.height() > max_height:
            pixmap = pixmap.scaledToHeight(max_height, Qt.TransformationMode.SmoothTransformation)
        self.setPixmap(pixmap)
        self.setToolTip(f"{grid.shape[0]} rows × {grid.shape[1]} samples")

    def _name(self, row: int) -> str:
        return self.class_names[row] if row < len(self.class_names) else str(row)

    def picture(self) -> QPixmap:
        return self.pixmap()
