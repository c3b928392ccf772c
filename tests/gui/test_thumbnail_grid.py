"""The virtualised thumbnail grid: 60,000 rows, class and outcome filters, nearest-neighbour cells,
red frames for wrong predictions, keyboard navigation, and a bounded image cache."""

from __future__ import annotations


import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QWidget

from workbench.core.data.dataset import Split
from workbench.gui.plotting.colors import MISMATCH
from workbench.gui.widgets.thumbnail_grid import CACHE_IMAGES, ThumbnailGrid

pytestmark = pytest.mark.gui

N = 60_000
CLASSES = [f"class {k}" for k in range(10)]


@pytest.fixture(scope="module")
def big_split():
    """60k 28×28 images; image i is a flat grey of value i % 251, with label i % 10."""
    grey = (np.arange(N) % 251).astype(np.uint8)
    images = np.broadcast_to(grey[:, None, None, None], (N, 1, 28, 28)).copy()
    return Split(images, (np.arange(N) % 10).astype(np.int64))


@pytest.fixture
def grid(qtbot, big_split):
    grid = ThumbnailGrid(image_size=56)
    qtbot.addWidget(grid)
    grid.resize(900, 600)
    grid.show()
    grid.thumbnails.set_split(big_split, CLASSES)
    qtbot.waitExposed(grid)
    return grid


def wait_laid_out(qtbot, grid):
    """After a reset the view lays out again on its next event-loop turn."""
    qtbot.waitUntil(lambda: grid.visualRect(grid.thumbnails.index(0)).isValid(), timeout=30_000)
    grid.viewport().repaint()


def cell_center(grid, row):
    rect = grid.visualRect(grid.thumbnails.index(row))
    image_box_top = rect.top() + grid.delegate.PAD
    return rect.center().x(), image_box_top + grid.delegate.image_size // 2


def test_sixty_thousand_rows_without_a_widget_or_pixmap_each(grid):
    assert grid.thumbnails.rowCount() == N
    grid.viewport().repaint()
    # Only the blocks around what was painted were converted to images.
    assert 0 < len(grid.thumbnails._cache) <= 1024
    assert grid.viewport().findChildren(QWidget) == []  # no widget per image


def test_scrolling_to_the_end_paints_the_last_images(qtbot, grid):
    """Scrolling 60k rows works with a bounded cache (frame times: benchmarks/bench_gui.py)."""
    last = grid.thumbnails.index(N - 1)
    # Batched layout finishes in the background, a few milliseconds per step.
    qtbot.waitUntil(lambda: grid.visualRect(last).isValid() and grid.verticalScrollBar().maximum() > 0, timeout=30_000)
    grid.scrollTo(last)
    qtbot.waitUntil(lambda: grid.viewport().rect().intersects(grid.visualRect(last)), timeout=30_000)
    bar = grid.verticalScrollBar()
    for fraction in np.linspace(0, 1, 25):
        bar.setValue(int(bar.maximum() * fraction))
        grid.viewport().repaint()
    assert grid.viewport().rect().intersects(grid.visualRect(last))
    assert len(grid.thumbnails._cache) <= CACHE_IMAGES


def test_painted_cells_show_the_image_pixels_unblurred(qtbot, grid):
    wait_laid_out(qtbot, grid)
    image = grid.viewport().grab().toImage()
    for row in (0, 1, 7):
        x, y = cell_center(grid, row)
        value = QColor(image.pixel(x, y)).red()
        assert value == row % 251


def test_class_filter_keeps_only_that_class(grid, big_split):
    grid.thumbnails.set_filter(3)
    rows = grid.thumbnails.rows
    assert len(rows) == N // 10 and grid.thumbnails.rowCount() == N // 10
    assert set(big_split.labels[rows]) == {3}
    assert grid.thumbnails.label_at(0) == 3
    grid.thumbnails.set_filter(None)
    assert grid.thumbnails.rowCount() == N


def test_predictions_outcome_filter_and_red_frame(qtbot, grid, big_split):
    predictions = big_split.labels.copy()
    predictions[::4] = (predictions[::4] + 1) % 10  # every fourth image is misclassified
    grid.thumbnails.set_predictions(predictions)
    assert grid.thumbnails.wrong_count() == N // 4
    grid.thumbnails.set_filter(None, "wrong")
    assert grid.thumbnails.rowCount() == N // 4
    assert all(grid.thumbnails.prediction_at(r) != grid.thumbnails.label_at(r) for r in range(20))
    grid.thumbnails.set_filter(None, "right")
    assert grid.thumbnails.rowCount() == N - N // 4
    grid.thumbnails.set_filter(None, "all")
    wait_laid_out(qtbot, grid)
    image = grid.viewport().grab().toImage()
    rect = grid.visualRect(grid.thumbnails.index(0))  # image 0 is wrong: framed in red
    frame_y = rect.top() + grid.delegate.PAD - 1
    assert QColor(image.pixel(rect.center().x(), frame_y)) == MISMATCH
    rect = grid.visualRect(grid.thumbnails.index(1))  # image 1 is right: no frame
    assert QColor(image.pixel(rect.center().x(), rect.top() + grid.delegate.PAD - 1)) != MISMATCH


def test_arrow_keys_move_through_the_grid(qtbot, grid):
    grid.setFocus()
    grid.setCurrentIndex(grid.thumbnails.index(0))
    qtbot.keyClick(grid, Qt.Key.Key_Right)
    assert grid.currentIndex().row() == 1
    qtbot.keyClick(grid, Qt.Key.Key_Down)
    assert grid.currentIndex().row() > 1


def test_larger_thumbnails_use_whole_number_scaling(qtbot, grid):
    grid.set_image_size(112)
    qtbot.waitUntil(lambda: grid.visualRect(grid.thumbnails.index(0)).width() >= 112, timeout=30_000)
    grid.viewport().repaint()
    image = grid.viewport().grab().toImage()
    x, y = cell_center(grid, 2)
    assert QColor(image.pixel(x, y)).red() == 2


def test_cells_drawn_from_their_pictures_look_as_drawn_afresh_and_follow_state(qtbot, grid):
    wait_laid_out(qtbot, grid)
    grid.thumbnails.set_predictions((np.arange(N) + (np.arange(N) % 3 == 0)) % 10)  # every third one wrong
    grid.viewport().repaint()
    first = grid.viewport().grab().toImage()
    grid.viewport().repaint()  # from the cells' pictures
    assert grid.viewport().grab().toImage() == first
    grid.delegate.forget_cells()
    assert grid.viewport().grab().toImage() == first  # drawn afresh: the same pixels
    rect = grid.visualRect(grid.thumbnails.index(3))
    frame_at = (rect.center().x(), rect.top() + grid.delegate.PAD - 1)
    assert QColor(first.pixel(*frame_at)) == MISMATCH  # image 3 is predicted wrong: framed
    grid.setCurrentIndex(grid.thumbnails.index(3))
    grid.selectionModel().select(grid.thumbnails.index(3), grid.selectionModel().SelectionFlag.ClearAndSelect)
    grid.viewport().repaint()
    selected = grid.viewport().grab().toImage()
    corner = (rect.left() + 1, rect.bottom() - 1)
    assert QColor(selected.pixel(*corner)) == grid.palette().color(grid.palette().ColorRole.Highlight)
    grid.selectionModel().clearSelection()
    grid.viewport().repaint()
    assert QColor(grid.viewport().grab().toImage().pixel(*corner)) == QColor(first.pixel(*corner))
    grid.thumbnails.set_predictions(np.arange(N) % 10)  # all right now: no red frames are left over
    grid.viewport().repaint()
    assert QColor(grid.viewport().grab().toImage().pixel(*frame_at)) != MISMATCH
