"""The IDC matrix: every combination of the important neurons' clusters as one cell (pyqtgraph).

Rows enumerate the cluster combinations of the first half of the important neurons, columns those
of the second half (core `IDC.layout()`), the most important neuron varying slowest. Instead of
numeric axes the matrix has hierarchical headers: one strip per neuron along the top (column
neurons) and the left (row neurons), each run of cells in the same cluster shaded by the cluster
(darker = higher centroid) and labelled with the centroid value where the label fits. The neuron
names sit at the strips' ends; hovering a strip reads the neuron and its cluster out, clicking it
emits `neuron_clicked(neuron)`, and the selected neuron's strip is outlined.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QCursor, QFont, QFontMetrics, QPen
from PySide6.QtWidgets import QGraphicsRectItem, QToolTip

from workbench.gui.plotting.colors import MARKED
from workbench.gui.widgets.coverage_matrix import CoverageMatrix
from workbench.gui.widgets.view_labels import ViewLabels

STRIP_HEIGHT = 20  # px of one neuron's strip above the matrix
STRIP_WIDTH = 48  # px of one neuron's strip left of the matrix: room for a centroid such as "12.34"
NAME_HEIGHT = 18  # px of the row neurons' names under the left strips
LIGHTEST, DARKEST = 238, 150  # grey levels of a neuron's lowest and highest cluster


LABEL_COLOR = "#202020"


def centroid_text(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"


def cluster_shades(k: int) -> list[int]:
    """Grey levels for clusters 0 … k−1, lighter for lower centroids."""
    return [LIGHTEST] if k <= 1 else [round(v) for v in np.linspace(LIGHTEST, DARKEST, k)]


@dataclass
class Axis:
    """One side of the matrix: its neurons, their centroids, and each row's (or column's) cluster indices."""

    neurons: list[int]
    centroids: list[np.ndarray]
    indices: np.ndarray  # (cells, len(neurons)) the cluster of each neuron in each row/column



def bare_strip_plot(plot: pg.PlotItem) -> None:
    """A plot the matrix's strips and names are drawn on: no axes, menu, buttons or mouse, rows downwards."""
    plot.setMenuEnabled(False)
    plot.setMouseEnabled(False, False)
    plot.hideButtons()
    plot.hideAxis("left")
    plot.hideAxis("bottom")
    plot.invertY(True)

class ClusterHeader(pg.PlotItem):
    """The strips of one side; `vertical` strips stand left of the rows, the others above the columns."""

    def __init__(self, vertical: bool):
        super().__init__()
        self.vertical = vertical
        self.axis = Axis([], [], np.zeros((0, 0), np.int64))
        self.selected: int | None = None
        bare_strip_plot(self)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.addItem(self.image)
        self.separators = pg.PlotCurveItem(connect="pairs")
        self.addItem(self.separators)
        self.outline = QGraphicsRectItem()
        pen = QPen(MARKED, 2.5)
        pen.setCosmetic(True)
        self.outline.setPen(pen)
        self.outline.setZValue(10)
        self.outline.setVisible(False)
        self.addItem(self.outline)
        self.labels = ViewLabels(color=LABEL_COLOR)
        self.labels.setZValue(5)
        self.addItem(self.labels)
        self.vb.sigResized.connect(self._draw_labels)

    def set_axis(self, axis: Axis) -> None:
        self.axis = axis
        n, cells = len(axis.neurons), len(axis.indices)
        size = n * (STRIP_WIDTH if self.vertical else STRIP_HEIGHT)
        if self.vertical:
            self.setFixedWidth(size)
        else:
            self.setFixedHeight(size)
        self.setVisible(n > 0)
        if not n:
            return
        shades = np.zeros((n, cells), np.uint8)
        for j in range(n):
            levels = np.array(cluster_shades(len(axis.centroids[j])), np.uint8)
            shades[j] = levels[axis.indices[:, j]]
        grey = np.ascontiguousarray(shades.T if self.vertical else shades)
        self.image.setImage(grey, levels=(0, 255))
        if self.vertical:
            self.image.setRect(QRectF(0, 0, n, cells))
            self.setXRange(0, n, padding=0)
        else:
            self.image.setRect(QRectF(0, 0, cells, n))
            self.setYRange(0, n, padding=0)
        self._draw_separators()
        self._draw_labels()
        self.set_selected(self.selected)

    def runs(self, j: int) -> list[tuple[int, int, int]]:
        """(start, stop, cluster) of each run of equal clusters along neuron j's strip."""
        column = self.axis.indices[:, j]
        edges = np.flatnonzero(np.diff(column)) + 1
        starts = np.concatenate([[0], edges])
        stops = np.concatenate([edges, [len(column)]])
        return [(int(a), int(b), int(column[a])) for a, b in zip(starts, stops)]

    def _draw_separators(self) -> None:
        xs, ys = [], []
        n = len(self.axis.neurons)
        for j in range(n):
            for start, _, _ in self.runs(j)[1:]:
                a, b = (j, j + 1)
                if self.vertical:
                    xs += [a, b]
                    ys += [start, start]
                else:
                    xs += [start, start]
                    ys += [a, b]
        for j in range(1, n):  # between the strips
            cells = len(self.axis.indices)
            if self.vertical:
                xs += [j, j]
                ys += [0, cells]
            else:
                xs += [0, cells]
                ys += [j, j]
        self.separators.setData(np.array(xs, float), np.array(ys, float), pen=pg.mkPen("w", width=1))

    def _draw_labels(self) -> None:
        """Each run's centroid value, where the run is wide enough to hold it."""
        cells = len(self.axis.indices)
        if not cells or self.vb.width() <= 0:
            self.labels.set_labels([])
            return
        along_px = (self.vb.height() if self.vertical else self.vb.width()) / cells
        metrics = QFontMetrics(QFont())
        labels = []
        for j, centroids in enumerate(self.axis.centroids):
            for start, stop, cluster in self.runs(j):
                text = centroid_text(float(centroids[cluster]))
                room = (stop - start) * along_px
                needed = metrics.height() if self.vertical else metrics.horizontalAdvance(text) + 6
                if room >= needed:
                    middle = (start + stop) / 2
                    labels.append((j + 0.5, middle, text, None) if self.vertical else (middle, j + 0.5, text, None))
        self.labels.set_labels(labels)

    def label_texts(self) -> list[str]:
        return self.labels.texts()

    def set_selected(self, neuron: int | None) -> None:
        self.selected = neuron
        if neuron is None or neuron not in self.axis.neurons:
            self.outline.setVisible(False)
            return
        j, cells = self.axis.neurons.index(neuron), len(self.axis.indices)
        self.outline.setRect(QRectF(j, 0, 1, cells) if self.vertical else QRectF(0, j, cells, 1))
        self.outline.setVisible(True)

    def strip_at(self, scene_pos: QPointF) -> tuple[int, int] | None:
        """(neuron position, cell) under a scene position."""
        if not self.isVisible() or not self.vb.sceneBoundingRect().contains(scene_pos):
            return None
        point = self.vb.mapSceneToView(scene_pos)
        strip, cell = (point.x(), point.y()) if self.vertical else (point.y(), point.x())
        j, c = int(np.floor(strip)), int(np.floor(cell))
        return (j, c) if 0 <= j < len(self.axis.neurons) and 0 <= c < len(self.axis.indices) else None


class NeuronNames(pg.PlotItem):
    """The names of one side's neurons, one per strip: right-aligned beside the top strips, or under
    the left strips."""

    def __init__(self, vertical: bool):
        super().__init__()
        self.vertical = vertical
        self.neurons: list[int] = []
        self.selected: int | None = None
        bare_strip_plot(self)
        self._labels: list[pg.TextItem] = []
        if vertical:
            self.setFixedHeight(NAME_HEIGHT)

    def set_neurons(self, neurons: list[int], selected: int | None, color: QColor) -> None:
        for item in self._labels:
            self.removeItem(item)
        self.neurons, self.selected, self._labels = list(neurons), selected, []
        n = len(self.neurons)
        self.setXRange(0, 1 if not self.vertical else max(n, 1), padding=0)
        self.setYRange(0, max(n, 1) if not self.vertical else 1, padding=0)
        for j, neuron in enumerate(self.neurons):
            chosen = neuron == selected
            style = f"color:{(MARKED if chosen else color).name()}; font-weight:{700 if chosen else 400}"
            text = f"<span style='{style}'>n{neuron}{'' if self.vertical else ' ▸'}</span>"
            label = pg.TextItem(html=text, anchor=(0.5, 0.5) if self.vertical else (1.0, 0.5))
            label.setPos(*((j + 0.5, 0.5) if self.vertical else (0.98, j + 0.5)))
            self.addItem(label)
            self._labels.append(label)

    def name_at(self, scene_pos: QPointF) -> int | None:
        if not self.neurons or not self.vb.sceneBoundingRect().contains(scene_pos):
            return None
        point = self.vb.mapSceneToView(scene_pos)
        j = int(np.floor(point.x() if self.vertical else point.y()))
        return j if 0 <= j < len(self.neurons) else None


class IdcMatrix(CoverageMatrix):
    """`set_axes(rows, cols)` once per fitted IDC, then `set_counts` / `set_difference` per set."""

    neuron_clicked = Signal(int)

    def __init__(self, parent=None, describe=None, describe_neuron=None):
        super().__init__(parent, describe)
        self.hint = ("Hover over a cell or a strip to read it; click a cell for its inputs, a strip to select "
                     "its neuron.")
        self.describe_neuron = describe_neuron or (lambda neuron, cluster: f"neuron {neuron}, cluster {cluster}")
        self.plot.hideAxis("left")
        self.plot.hideAxis("bottom")
        self.top = ClusterHeader(vertical=False)
        self.left = ClusterHeader(vertical=True)
        self.top.setXLink(self.plot)
        self.left.setYLink(self.plot)
        self.top_names = NeuronNames(vertical=False)
        self.left_names = NeuronNames(vertical=True)
        self.top_names.setYLink(self.top)
        self.left_names.setXLink(self.left)
        self.addItem(self.top_names, row=0, col=0)
        self.addItem(self.top, row=0, col=1)
        self.addItem(self.left, row=1, col=0)
        self.addItem(self.left_names, row=2, col=0)
        self.selected_neuron: int | None = None

    def set_axes(self, rows: Axis, cols: Axis) -> None:
        self.left.set_axis(rows)
        self.top.set_axis(cols)
        self.top_names.setFixedHeight(len(cols.neurons) * STRIP_HEIGHT)
        self.left_names.setFixedWidth(max(len(rows.neurons), 1) * STRIP_WIDTH)
        self.top_names.setFixedWidth(max(len(rows.neurons), 1) * STRIP_WIDTH)
        self.set_selected_neuron(self.selected_neuron)

    def set_selected_neuron(self, neuron: int | None) -> None:
        self.selected_neuron = neuron
        self.top.set_selected(neuron)
        self.left.set_selected(neuron)
        color = self._text_color()
        self.top_names.set_neurons(self.top.axis.neurons, neuron, color)
        self.left_names.set_neurons(self.left.axis.neurons, neuron, color)

    def neuron_position(self, neuron: int) -> QPointF | None:
        """The scene position of the middle of a neuron's strip (tests click it)."""
        for header in (self.top, self.left):
            if neuron in header.axis.neurons:
                j, cells = header.axis.neurons.index(neuron), len(header.axis.indices)
                point = QPointF(j + 0.5, cells / 2) if header.vertical else QPointF(cells / 2, j + 0.5)
                return header.vb.mapViewToScene(point)
        return None

    def _neuron_under(self, scene_pos: QPointF) -> tuple[int, int | None] | None:
        """(neuron, its cluster under the mouse or None) for a strip or a name under `scene_pos`."""
        for header in (self.top, self.left):
            hit = header.strip_at(scene_pos)
            if hit is not None:
                j, cell = hit
                return header.axis.neurons[j], int(header.axis.indices[cell, j])
        for names in (self.top_names, self.left_names):
            j = names.name_at(scene_pos)
            if j is not None:
                return names.neurons[j], None
        return None

    def _on_mouse_moved(self, scene_pos: QPointF) -> None:
        hit = self._neuron_under(scene_pos)
        if hit is None:
            super()._on_mouse_moved(scene_pos)
            return
        self.set_readout(self.describe_neuron(*hit))
        QToolTip.showText(QCursor.pos(), self.readout_text, self)

    def _on_clicked(self, event) -> None:
        hit = self._neuron_under(event.scenePos()) if event.button() == Qt.MouseButton.LeftButton else None
        if hit is None:
            super()._on_clicked(event)
            return
        self.neuron_clicked.emit(int(hit[0]))
