"""How often, and in which turns, the window paints what a result changed.

- A result's staged widgets keep their new state at once but paint one per turn of the event loop, in
  staging order.
- The inspector's relevance bars and the relevance heatmap paint a new result once: their axes take
  their sizes, and their views their transforms, before the scene paints (it painted two to four times).
- The thumbnail grid reads a block of pixels at a time but converts only the images asked for, and
  gives the right image for every row whatever the filter did to the rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from gui_helpers import flush_events
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from workbench.core.data.class_names import FASHION_CLASSES
from workbench.core.data.dataset import Split
from workbench.gui.plotting.staged_paint import StagedPaint
from workbench.gui.widgets.neuron_bars import NeuronBars
from workbench.gui.widgets.relevance_heatmap import RelevanceHeatmap
from workbench.gui.widgets.thumbnail_grid import BLOCK_ROWS, ThumbnailModel, to_qimage

pytestmark = pytest.mark.gui


class PaintLog(QObject):
    """Records each Paint event its watched widgets get, and what `check` says at that moment."""

    def __init__(self, check=lambda widget: None):
        super().__init__()
        self.painted: list[tuple[QObject, object]] = []
        self.check = check

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.painted.append((watched, self.check(watched)))
        return False


def test_staged_widgets_change_at_once_and_paint_one_per_turn_in_order(qtbot):
    window = QWidget()
    layout = QVBoxLayout(window)
    labels = [QLabel(f"label {i}") for i in range(3)]
    for label in labels:
        layout.addWidget(label)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    flush_events()  # the window's first paint is over before the log starts
    staged = StagedPaint(window)
    # At each paint: which of the labels still wait for theirs.
    log = PaintLog(lambda watched: [not label.updatesEnabled() for label in labels])
    for label in labels:
        label.installEventFilter(log)

    staged.stage(*labels)
    for i, label in enumerate(labels):
        label.setText(f"new text {i}")
    assert [label.text() for label in labels] == ["new text 0", "new text 1", "new text 2"]  # state: now
    assert staged.queue and not any(label.updatesEnabled() for label in labels)
    qtbot.waitUntil(lambda: not staged.queue, timeout=30_000)
    flush_events()  # the last widget's paint, asked for when its updates came back

    order = [watched for watched, _ in log.painted]
    assert order[:3] == labels  # each painted, in staging order
    waiting = [still for watched, still in log.painted[:3]]
    assert waiting[0] == [False, True, True]  # the first paints while the other two still wait
    assert waiting[1] == [False, False, True]
    assert waiting[2] == [False, False, False]


def test_a_hidden_widget_is_not_staged_and_staging_twice_keeps_one_place(qtbot):
    window = QWidget()
    layout = QVBoxLayout(window)
    shown_label, hidden_label = QLabel("shown"), QLabel("hidden")
    layout.addWidget(shown_label)
    layout.addWidget(hidden_label)
    hidden_label.hide()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    staged = StagedPaint(window)
    staged.stage(shown_label, hidden_label)
    staged.stage(shown_label)
    assert staged.queue == [shown_label]
    assert hidden_label.updatesEnabled()
    qtbot.waitUntil(lambda: not staged.queue, timeout=30_000)
    assert shown_label.updatesEnabled()


def viewport_paints(widget, qtbot, change) -> int:
    log = PaintLog()
    widget.viewport().installEventFilter(log)
    change()
    flush_events()  # every layout and paint the change led to, however the machine schedules them
    widget.viewport().removeEventFilter(log)
    return len(log.painted)


@pytest.mark.parametrize("scale", [1.0, 1e-3, 250.0, 3e4, 1e-5])
def test_the_inspector_bars_paint_a_new_range_once(qtbot, scale):
    """Values of a new magnitude give the numeric axis a new width: it is set before the paint."""
    bars = NeuronBars()
    qtbot.addWidget(bars)
    bars.resize(360, 180)
    bars.show()
    qtbot.waitExposed(bars)
    bars.set_values(np.linspace(-1, 1, 84) * 7, [1, 2], 3)
    flush_events()
    values = np.random.default_rng(1).normal(size=84) * scale
    assert viewport_paints(bars, qtbot, lambda: bars.set_values(values, [4, 5], 6)) == 1


def test_the_relevance_heatmap_paints_its_first_matrix_and_the_next_totals_once(qtbot):
    heatmap = RelevanceHeatmap()
    qtbot.addWidget(heatmap)
    heatmap.resize(900, 420)
    heatmap.show()
    qtbot.waitExposed(heatmap)
    flush_events()
    totals = np.random.default_rng(0).random(84) * 40

    def show(values):
        heatmap.set_matrix(values[None, :], ["all classes, so far"], units="relevance", neuron_title="Neuron of fc2")
        heatmap.bars.set_values(values)

    assert viewport_paints(heatmap, qtbot, lambda: show(totals)) == 1
    assert viewport_paints(heatmap, qtbot, lambda: show(totals * 3)) == 1
    per_class = np.random.default_rng(2).normal(size=(10, 84))
    assert viewport_paints(heatmap, qtbot, lambda: (heatmap.set_matrix(per_class, FASHION_CLASSES),
                                                     heatmap.set_marks([3, 9, 40], [[1, 2]] * 10))) == 1


def test_thumbnails_are_right_for_every_row_after_filters_and_read_a_block_at_a_time():
    rng = np.random.default_rng(3)
    n = 3 * BLOCK_ROWS + 17
    images = rng.integers(0, 256, size=(n, 1, 6, 5), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n)
    split = Split(images, labels)
    reads = []
    thumbnails = split.thumbnails

    def counting(index):
        reads.append(len(index))
        return thumbnails(index)

    split.thumbnails = counting
    model = ThumbnailModel()
    model.set_split(split, FASHION_CLASSES, predictions=(labels + (rng.random(n) < 0.3)) % 10)

    def expected(row):
        return to_qimage(thumbnails(np.array([model.rows[row]]))[0])

    assert model.image(5) == expected(5)
    assert model.image(BLOCK_ROWS - 1) == expected(BLOCK_ROWS - 1)
    assert reads == [BLOCK_ROWS]  # one read for the block, whichever of its images are asked for
    for class_index, outcome in ((3, "all"), (None, "wrong"), (None, "all"), (7, "right")):
        model.set_filter(class_index, outcome)
        for row in rng.choice(len(model.rows), size=min(40, len(model.rows)), replace=False):
            assert model.image(int(row)) == expected(int(row))
    model.set_split(Split(255 - images, labels), FASHION_CLASSES)  # another split: no image of the first
    assert model.image(5) == to_qimage((255 - images)[model.rows[5]].transpose(1, 2, 0))


# --- grid lines and the growth plot --------------------------------------------------------------------

def test_grid_lines_are_opaque_and_behind_the_data(qtbot):
    """A grid line is the axis colour mixed into the background by the grid's alpha, drawn as one opaque
    colour, and a bar drawn over it hides it."""
    import pyqtgraph as pg
    from PySide6.QtGui import QColor

    from workbench.gui.plotting.plot_style import mixed, show_grid

    widget = pg.PlotWidget()
    widget.resize(400, 300)
    plot = widget.getPlotItem()
    show_grid(plot, x=True, y=True, alpha=0.25)
    plot.setRange(xRange=(0, 10), yRange=(0, 10), padding=0)
    plot.getAxis("bottom").setTicks([[(5.0, "5")]])
    plot.getAxis("left").setTicks([[(5.0, "5")]])
    plot.addItem(pg.BarGraphItem(x=[5.0], height=[3.0], width=2.0, brush="#ff0000", pen=None))
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    flush_events()
    image = widget.grab().toImage()
    vb = plot.vb

    def pixel(x: float, y: float) -> QColor:
        point = widget.mapFromScene(vb.mapViewToScene(pg.Point(x, y)))
        return image.pixelColor(point.x(), point.y())

    background = QColor(pg.getConfigOption("background"))
    line = mixed(background, plot.getAxis("left").pen().color(), 0.25)
    assert line.alpha() == 255 and line != background
    assert pixel(5.0, 8.0).name() == line.name()  # the vertical line at x = 5 above the bar
    assert pixel(8.0, 5.0).name() == line.name()  # the horizontal one at y = 5
    assert pixel(5.0, 1.5).name() == "#ff0000"  # where the bar covers the vertical line
    assert pixel(2.0, 8.0).name() == background.name()


def test_headroom_steps_by_one_two_five():
    from workbench.gui.widgets.growth_plot import headroom, power_of_ten_text

    # a tenth to spare, then the next of 1, 2, 5 × 10^k
    assert [headroom(t) for t in (0.5, 0.95, 3.0, 4.6, 45.0, 46.0, 60.0, 900.0, 1200.0)] == \
        pytest.approx([1.0, 2.0, 5.0, 10.0, 50.0, 100.0, 100.0, 1000.0, 2000.0])
    assert [headroom(t) for t in (0.0, -1.0, float("nan"))] == [1.0, 1.0, 1.0]  # nothing measured yet
    assert [power_of_ten_text(k) for k in (0, 1, 2, 3, 4, 5, 6, 9)] == \
        ["1", "10", "100", "1k", "10k", "100k", "1M", "1G"]


def test_the_growth_plot_keeps_its_axes_while_sets_are_measured(qtbot, monkeypatch):
    """Batches that grow the curves within the ranges repaint the curves only: the axes (and the grid
    they draw) are laid out again only when the y range steps up."""
    import pyqtgraph as pg
    from PySide6.QtGui import QColor

    from workbench.gui.widgets.growth_plot import Curve, GrowthPlot

    drawn = []
    original = pg.AxisItem.generateDrawSpecs
    monkeypatch.setattr(pg.AxisItem, "generateDrawSpecs",
                        lambda axis, painter: drawn.append(axis.orientation) or original(axis, painter))
    plot = GrowthPlot()
    plot.resize(600, 300)
    qtbot.addWidget(plot)
    plot.show()
    qtbot.waitExposed(plot)
    total, ranges = 8000, []

    def batch(n: int, top: float) -> None:
        inputs = np.unique(np.geomspace(1, n, 25).astype(int))
        curve = Curve("test", QColor("#1f77b4"), inputs, top * inputs / n, running=True, total=total)
        plot.set_curves("NC", [curve])
        flush_events()  # the batch's layout and paints (the first batch's come in two passes), all of them
        ranges.append(plot.plot.vb.viewRange())

    batch(500, 30.0)
    first_x = ranges[0][0]
    assert first_x[1] == pytest.approx(np.log10(total), abs=0.1)  # the whole set's extent from the start
    drawn.clear()
    for n, top in ((1000, 32.0), (2000, 36.0), (4000, 40.0), (6000, 44.0)):  # y stays at 50
        batch(n, top)
    assert all(r[0] == first_x and r[1] == ranges[0][1] for r in ranges)
    assert drawn == []
    batch(8000, 47.0)  # 51.7 % with a tenth to spare: the y range steps to 100
    assert ranges[-1][1][1] == pytest.approx(100.0, abs=3.0)
    assert "left" in drawn



# --- thumbnail cells within a frame's budget ------------------------------------------------------------

def test_new_thumbnail_cells_are_drawn_a_budget_per_frame_and_at_once_outside_frames(qtbot, monkeypatch):
    """With no time to spare, each frame of the window draws one new cell and the next frames draw
    the rest. A grab, which is not a frame, draws every cell at once."""
    from workbench.gui.plotting.frame_paint import window_event
    from workbench.gui.widgets import thumbnail_grid
    from workbench.gui.widgets.thumbnail_grid import ThumbnailGrid

    class Window(QWidget):
        def event(self, event) -> bool:
            return window_event(super().event, event)

    monkeypatch.setattr(thumbnail_grid, "FRAME_BUDGET_MS", 0.0)
    images = (np.arange(400) % 251).astype(np.uint8)[:, None, None, None] * np.ones((1, 1, 28, 28), np.uint8)
    split = Split(images, (np.arange(400) % 10).astype(np.int64))
    window = Window()
    grid = ThumbnailGrid(window, image_size=56)
    QVBoxLayout(window).addWidget(grid)
    qtbot.addWidget(window)
    window.resize(700, 400)
    paints = PaintLog()
    grid.viewport().installEventFilter(paints)
    drawn_in: list[int] = []  # for each new cell: the number of the viewport's paint it was drawn in
    original = grid.delegate._draw_cell
    monkeypatch.setattr(grid.delegate, "_draw_cell",
                        lambda *args: drawn_in.append(len(paints.painted)) or original(*args))
    grid.thumbnails.set_split(split, FASHION_CLASSES)
    window.show()
    qtbot.waitExposed(window)
    qtbot.waitUntil(lambda: grid.visualRect(grid.thumbnails.index(0)).isValid(), timeout=30_000)
    visible = [row for row in range(400)
               if grid.viewport().rect().intersects(grid.visualRect(grid.thumbnails.index(row)))]
    assert len(visible) >= 20
    flush_events()  # the window's first paint, on being exposed, is not a frame: every cell at once
    grid.delegate.forget_cells()
    drawn_in.clear()
    grid.viewport().update()
    qtbot.waitUntil(lambda: len(drawn_in) >= len(visible), timeout=30_000)
    flush_events()
    assert sorted(drawn_in) == drawn_in and len(drawn_in) == len(visible)  # each visible cell once
    assert max(drawn_in.count(paint) for paint in set(drawn_in)) == 1  # one new cell per frame

    # New predictions give every cell a new look: again one per frame, until all are drawn.
    drawn_in.clear()
    grid.thumbnails.set_predictions((np.arange(400) + 1) % 10)
    qtbot.waitUntil(lambda: len(drawn_in) >= len(visible), timeout=30_000)
    flush_events()
    assert len(drawn_in) == len(visible)
    assert max(drawn_in.count(paint) for paint in set(drawn_in)) == 1

    # A grab is not a frame: every cell at once.
    grid.delegate.forget_cells()
    drawn_in.clear()
    grid.viewport().grab()
    assert len(drawn_in) == len(visible)


def test_a_set_measured_in_one_batch_shows_its_one_point(qtbot):
    """A growth curve of one point (a set smaller than a batch) is a dot; a curve of many points a line alone."""
    from PySide6.QtGui import QColor

    from workbench.gui.widgets.growth_plot import Curve, GrowthPlot

    plot = GrowthPlot()
    qtbot.addWidget(plot)
    small = Curve("generated", QColor("#ff7f0e"), np.array([32.0]), np.array([3.9]))
    large = Curve("test", QColor("#1f77b4"), np.arange(1.0, 1001.0), np.linspace(0, 50, 1000))
    plot.set_curves("IDC", [small, large])
    dot, line = plot.plot.listDataItems()
    assert dot.opts["symbol"] == "o" and len(dot.getData()[0]) == 1
    assert line.opts["symbol"] is None
