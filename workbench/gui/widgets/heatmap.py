"""A labelled matrix heatmap with a colour bar and a hover read-out (pyqtgraph).

Rows run top to bottom, columns left to right, each cell one unit wide, so cell (r, c) covers
[c, c+1] × [r, r+1]. Values go to the image as C-contiguous float32 with explicit levels and no
NaN. Small matrices print their values in the cells, in black or white, whichever
reads better on the cell's colour.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics

from workbench.gui.plotting.colors import COUNT_COLORMAP
from workbench.gui.plotting.plot_style import cache_axes, keep_axis_title_whole, set_tick_texts, set_ticks
from workbench.gui.widgets.view_labels import ViewLabels

MAX_ANNOTATED_CELLS = 400  # up to 20×20 the numbers are still readable inside the cells


class Heatmap(pg.GraphicsLayoutWidget):
    """`set_matrix(values, row_labels, column_labels)`; hovering a cell emits `hovered(row, col)`."""

    hovered = Signal(int, int)

    def __init__(self, parent=None, units: str = "images", row_title: str = "True class",
                 column_title: str = "Predicted class", colormap: str = COUNT_COLORMAP,
                 describe: Callable[[int, int, float], str] | None = None):
        super().__init__(parent)
        self.units, self.row_title, self.column_title = units, row_title, column_title
        self.describe = describe or (lambda r, c, v: f"row {r}, column {c}: {v:g} {self.units}")
        self.matrix = np.zeros((0, 0), np.float32)
        self.row_labels: list[str] = []
        self.column_labels: list[str] = []
        self.ci.setContentsMargins(6, 6, 6, 6)

        self.plot = cache_axes(self.addPlot(row=0, col=0))
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.setLabel("left", row_title)
        self.plot.setLabel("bottom", column_title)
        self.plot.getAxis("bottom").setStyle(tickLength=0)
        self.plot.getAxis("left").setStyle(tickLength=0)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.colormap = pg.colormap.get(colormap)
        self.bar = pg.ColorBarItem(values=(0, 1), colorMap=self.colormap, label=units, interactive=False,
                                   colorMapMenu=False, width=16)
        self.bar.setImageItem(self.image, insert_in=self.plot)
        # A long colour-bar title wraps instead of being cut (pyqtgraph puts it on the bar's left axis).
        keep_axis_title_whole(self.bar.getAxis("left"))
        self.readout = pg.LabelItem(justify="left")
        self.addItem(self.readout, row=1, col=0)
        self.cell_labels = ViewLabels()
        self.plot.addItem(self.cell_labels)
        self.readout_text = ""
        self.scene().sigMouseMoved.connect(self._on_mouse_moved)

    # --- content -----------------------------------------------------------------------------------

    def set_matrix(self, values: np.ndarray, row_labels: list[str], column_labels: list[str],
                   levels: tuple[float, float] | None = None, value_format: str = "{:.0f}") -> None:
        """Show a matrix; `levels` default to 0..max, which suits counts."""
        matrix = np.ascontiguousarray(np.nan_to_num(np.asarray(values, dtype=np.float32), nan=0.0))
        rows, cols = matrix.shape
        self.matrix, self.row_labels, self.column_labels = matrix, list(row_labels), list(column_labels)
        if levels is None:
            levels = (0.0, float(max(1.0, matrix.max(initial=0.0))))
        self.image.setImage(matrix, levels=levels)
        self.image.setRect(QRectF(0, 0, cols, rows))
        self.bar.setLevels(levels)
        self.plot.setXRange(0, cols, padding=0)
        self.plot.setYRange(0, rows, padding=0)
        self._annotate(value_format, levels)
        self._update_ticks()
        self._set_readout("Hover over a cell to read it.")

    def _annotate(self, value_format: str, levels: tuple[float, float]) -> None:
        rows, cols = self.matrix.shape
        if rows * cols > MAX_ANNOTATED_CELLS:
            self.cell_labels.set_labels([], QRectF())
            return
        lo, hi = levels
        scaled = (self.matrix - lo) / (hi - lo) if hi > lo else np.zeros_like(self.matrix)
        rgb = np.asarray(self.colormap.map(scaled.ravel(), mode="float"))[:, :3]  # one call for every cell
        luminance = rgb @ np.array([0.2126, 0.7152, 0.0722])
        black, white = QColor(Qt.GlobalColor.black), QColor(Qt.GlobalColor.white)
        labels = [(c + 0.5, r + 0.5, value_format.format(float(self.matrix[r, c])),
                   black if luminance[r * cols + c] > 0.5 else white) for r in range(rows) for c in range(cols)]
        self.cell_labels.set_labels(labels, QRectF(0, 0, cols, rows))

    def _update_ticks(self) -> None:
        """Class names on the bottom axis when they fit the columns, else indices (named on the left)."""
        rows, cols = self.matrix.shape
        if not cols:
            return
        bottom = self.plot.getAxis("bottom")
        column_px = self.plot.vb.width() / cols if self.plot.vb.width() > 0 else 0
        widest = max(QFontMetrics(bottom.font()).horizontalAdvance(t)
                     for t in self.column_labels)
        names_fit = widest + 6 <= column_px
        bottom_labels = self.column_labels if names_fit else [str(c) for c in range(cols)]
        if names_fit or self.column_labels != self.row_labels:
            left_labels = self.row_labels
        else:
            left_labels = [f"{label}  {r}" for r, label in enumerate(self.row_labels)]
        # Past ~25 classes every label cannot fit: label every n-th row and column.
        col_step, row_step = max(1, -(-cols // 25)), max(1, -(-rows // 25))
        set_ticks(bottom, [[(c + 0.5, t) for c, t in enumerate(bottom_labels) if c % col_step == 0]])
        left_ticks = [(r + 0.5, t) for r, t in enumerate(left_labels) if r % row_step == 0]
        set_tick_texts(self.plot.getAxis("left"), left_ticks)
        self.plot.setLabel("bottom", self.column_title if names_fit else f"{self.column_title} (numbered as on the left)")

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        # pyqtgraph resizes once while constructing the view, and again while closing it, when its
        # items are gone already (touching them then crashes).
        if hasattr(self, "plot") and not getattr(self, "closed", False):
            self._update_ticks()

    # --- hover -------------------------------------------------------------------------------------

    def _on_mouse_moved(self, scene_pos: QPointF) -> None:
        rows, cols = self.matrix.shape
        if not rows or not self.plot.vb.sceneBoundingRect().contains(scene_pos):
            return
        point = self.plot.vb.mapSceneToView(scene_pos)
        c, r = int(np.floor(point.x())), int(np.floor(point.y()))
        if 0 <= r < rows and 0 <= c < cols:
            self._set_readout(self.describe(r, c, float(self.matrix[r, c])))
            self.hovered.emit(r, c)

    def _set_readout(self, text: str) -> None:
        self.readout_text = text
        self.readout.setText(text, size="9pt")

    def show_cell(self, row: int, col: int) -> None:
        """Put the read-out of one cell up, as hovering it would."""
        self._set_readout(self.describe(row, col, float(self.matrix[row, col])))
