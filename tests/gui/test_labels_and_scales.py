"""Labels that fit, colour scales for relevance overlays, the heatmap's legend, and status lines that
keep their place.

- Thumbnail, candidate and gallery captions show Fashion-MNIST's longest class names whole
  ("Ankle boot", "→ T-shirt/top") at the default sizes; colour-bar titles wrap to the bar's length
  instead of running off it, also in exported PNGs.
- The input inspector's colour scale shows the limit its overlay was drawn to; the gallery's says
  each image is scaled to its own largest |R|, and each tile's tooltip gives that limit.
- The relevance heatmap's legend says what its triangles and dots mean.
- Showing a status line moves nothing below it.
"""

from __future__ import annotations

import numpy as np
import pytest
from gui_helpers import flush_events
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QFontMetrics, QImage

from workbench.core.data.class_names import FASHION_CLASSES
from workbench.core.data.dataset import Split
from workbench.core.importance.gallery import InputExplanation
from workbench.gui.plotting.plot_style import text_lines
from workbench.gui.views.importance_view import NORMALISED_UNITS, RAW_UNITS
from workbench.gui.widgets.coverage_matrix import CoverageMatrix
from workbench.gui.widgets.empty_state import EmptyState
from workbench.gui.widgets.export import export_png
from workbench.gui.widgets.fuzz_pairs import FuzzPairs
from workbench.gui.widgets.gallery_strip import GalleryPanel, Tile
from workbench.gui.widgets.heatmap import Heatmap
from workbench.gui.widgets.input_inspector import InputInspector
from workbench.gui.widgets.relevance_heatmap import RelevanceHeatmap
from workbench.gui.widgets.relevance_overlay import overlay_rgb, symmetric_limit
from workbench.gui.widgets.selection_strip import SelectionStrip
from workbench.gui.widgets.thumbnail_grid import ThumbnailGrid

pytestmark = pytest.mark.gui

T_SHIRT, ANKLE_BOOT = FASHION_CLASSES.index("T-shirt/top"), FASHION_CLASSES.index("Ankle boot")


def shown(widget, qtbot, width: int, height: int):
    qtbot.addWidget(widget)
    widget.resize(width, height)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def save(widget, name: str) -> None:
    widget.grab().save(f"/tmp/item18-{name}.png")


def assert_whole(fm: QFontMetrics, lines, wanted: list[str]) -> None:
    """Each (rect, text) shows its full text, which fits the rect's width."""
    assert [text for _, text in lines] == wanted  # nothing elided
    for rect, text in lines:
        assert fm.horizontalAdvance(text) <= rect.width(), (text, rect.width())


def images(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, (n, 1, 28, 28), dtype=np.uint8)


# --- captions --------------------------------------------------------------------------------------

@pytest.mark.parametrize("image_size", [84, 56])  # the Data view's default; the coverage cell's inputs
def test_thumbnail_captions_show_the_longest_class_names_whole(qtbot, image_size):
    labels = np.array([ANKLE_BOOT, T_SHIRT, ANKLE_BOOT, T_SHIRT])
    predictions = np.array([T_SHIRT, ANKLE_BOOT, ANKLE_BOOT, T_SHIRT])
    grid = shown(ThumbnailGrid(image_size=image_size), qtbot, 700, 400)
    grid.thumbnails.set_split(Split(images(4), labels), FASHION_CLASSES, predictions)
    qtbot.waitUntil(lambda: grid.visualRect(grid.thumbnails.index(3)).isValid(), timeout=30_000)
    fm = grid.fontMetrics()
    for row in range(4):
        lines = grid.delegate.captions(grid.thumbnails, row, grid.visualRect(grid.thumbnails.index(row)), fm)
        assert_whole(fm, lines, [FASHION_CLASSES[labels[row]], "→ " + FASHION_CLASSES[predictions[row]]])
    save(grid, f"thumbnails-{image_size}")


def test_candidate_strip_captions_show_the_longest_class_names_whole(qtbot):
    strip = shown(SelectionStrip(), qtbot, 800, 260)
    labels = np.array([ANKLE_BOOT, T_SHIRT])
    strip.set_candidates(images(2).astype(np.float32) / 255, [0.5, 1.25], labels, labels[::-1], "PGD",
                         FASHION_CLASSES)
    grid = strip.grid
    qtbot.waitUntil(lambda: grid.visualRect(grid.thumbnails.index(1)).isValid(), timeout=30_000)
    fm = grid.fontMetrics()
    for row in range(2):
        model = grid.thumbnails
        lines = grid.delegate.captions(model, row, grid.visualRect(model.index(row)), fm)
        label, prediction = model.label_at(row), model.prediction_at(row)
        assert_whole(fm, lines, [FASHION_CLASSES[label], "→ " + FASHION_CLASSES[prediction]])
    save(strip, "selection-strip")


def gallery_tiles(scales=(1.0, 1.0, 1.0)) -> list[Tile]:
    rng = np.random.default_rng(1)
    tiles = []
    for i, scale in enumerate(scales):
        label, prediction = (ANKLE_BOOT, T_SHIRT) if i % 2 == 0 else (T_SHIRT, T_SHIRT)
        heat = (rng.normal(size=(28, 28)) * scale).astype(np.float32)
        tiles.append(Tile(i, images(1)[0].transpose(1, 2, 0), heat, label, prediction, 18.75 - i, f"{18.75 - i:.1f}",
                          FASHION_CLASSES[label], FASHION_CLASSES[prediction]))
    return tiles


def test_gallery_captions_show_the_longest_class_names_whole_also_in_the_png(qtbot, tmp_path):
    panel = shown(GalleryPanel(), qtbot, 560, 330)  # the Importance view's gallery at 1440 × 900
    tiles = gallery_tiles()
    panel.set_tiles(tiles, tiles)
    grid = panel.by_relevance
    fm = grid.fontMetrics()
    for position, tile in enumerate(tiles):
        second = f"→ {tile.prediction_name}" if tile.wrong else tile.caption
        assert_whole(fm, grid.captions(position), [tile.label_name, second])
        for rect, _ in grid.captions(position):
            assert grid.tile_rect(position).contains(rect)
    # Both grids side by side still fit the view's right-hand column.
    assert panel.sizeHint().width() <= 560
    path = tmp_path / "gallery.png"
    assert panel.grab_png(str(path))
    exported = QImage(str(path))
    assert exported.width() == 2 * panel.width()  # the same layout, at twice the scale
    save(panel, "gallery")


# --- colour-bar titles ------------------------------------------------------------------------------

def assert_title_whole(widget, axis, full: bool = True, ticks: bool = True) -> None:
    """The axis title is laid out within the bar's length, clear of the tick values, inside the view:
    the whole title (`full`), or where the bar is too short even for two lines, its first word with
    the whole title as the tooltip — never a cut or elided one."""
    label = axis.label
    document = label.document()
    title = axis.labelText.strip()
    shown_text = document.toPlainText().strip()
    if full or shown_text == title:
        assert shown_text == title and not label.toolTip()
    else:
        assert shown_text == title.split()[0] and label.toolTip() == title
    width = label.textWidth()
    if width > 0:  # wrapped: every line fits the width it was wrapped to
        assert document.size().width() <= width + 0.5
    length = label.boundingRect().width()  # along the axis (the label is rotated)
    assert length <= axis.size().height() + 0.5
    rect = label.sceneBoundingRect()
    if ticks:  # the title stands right of the tick values
        ticks_end = axis.sceneBoundingRect().left() + axis.style["tickTextOffset"][0] + axis.textWidth
        assert rect.left() + document.documentMargin() >= ticks_end - 0.5  # no overlap with "−0.5"
    assert QRectF(widget.rect()).contains(rect.adjusted(2, 2, -2, -2))  # not cut by the widget's edge


def exported_title_has_ink(scene, axis, path) -> None:
    """In the exported PNG the title's area holds text pixels along its whole length."""
    export_png(scene, path)
    image = QImage(str(path))
    factor = image.width() / scene.sceneRect().width()
    rect = axis.label.sceneBoundingRect()
    top, bottom = int(rect.top() * factor), int(rect.bottom() * factor)
    left, right = int(rect.left() * factor), int(rect.right() * factor)
    assert 0 <= left and right <= image.width() and 0 <= top and bottom <= image.height()
    rows = [y for y in range(top, bottom) if any(QColor(image.pixel(x, y)).lightness() < 120
                                                   for x in range(left, right, 2))]
    assert rows and rows[0] - top < 0.25 * (bottom - top) and bottom - rows[-1] < 0.25 * (bottom - top)


@pytest.mark.parametrize("size", [(574, 425), (420, 260)])  # its size at 1440 × 900; its minimum in the view
def test_relevance_heatmap_colour_bar_titles_are_whole(qtbot, tmp_path, size):
    heatmap = shown(RelevanceHeatmap(), qtbot, *size)
    values = np.random.default_rng(2).normal(size=(10, 84))
    for units in (NORMALISED_UNITS, RAW_UNITS):
        heatmap.set_matrix(values / np.abs(values).max(axis=1, keepdims=True), FASHION_CLASSES, units=units)
        heatmap.set_marks([3, 7, 9], [[1, 2]] * 10)
        heatmap.grab()  # paints the ticks: their width is known from then on
        flush_events()
        assert_title_whole(heatmap, heatmap.bar.axis, full=size[1] > 300)
        if units == NORMALISED_UNITS and size[1] > 300:
            assert text_lines(heatmap.bar.axis.label.document()) == 2  # wrapped, not cut
    exported_title_has_ink(heatmap.scene(), heatmap.bar.axis, tmp_path / "heatmap.png")
    save(heatmap, f"relevance-heatmap-{size[1]}")


def test_coverage_and_confusion_colour_bar_titles_are_whole(qtbot, tmp_path):
    matrix = shown(CoverageMatrix(), qtbot, 540, 260)
    counts = np.random.default_rng(3).integers(0, 20_000, (8, 8))
    for log in (True, False):
        matrix.set_counts(counts, log=log, units="inputs per cell")
        matrix.grab()
        flush_events()
        assert_title_whole(matrix, matrix.bar.axis)
    exported_title_has_ink(matrix.scene(), matrix.bar.axis, tmp_path / "coverage.png")
    confusion = shown(Heatmap(units="images"), qtbot, 420, 360)
    confusion.set_matrix(np.random.default_rng(4).integers(0, 900, (10, 10)), FASHION_CLASSES, FASHION_CLASSES)
    confusion.grab()
    flush_events()
    assert confusion.bar.getAxis("left").labelText == "images"  # pyqtgraph puts a bar's title left of it
    assert_title_whole(confusion, confusion.bar.getAxis("left"), ticks=False)
    save(matrix, "coverage-matrix")
    save(confusion, "confusion")


# --- colour scales of the overlays -----------------------------------------------------------------

def test_inspector_colour_scale_shows_the_limit_of_its_overlay(qtbot):
    inspector = shown(InputInspector(), qtbot, 560, 300)
    heat = np.random.default_rng(5).normal(size=(28, 28)).astype(np.float32) * 0.05
    heat[3, 4] = -0.3123  # the largest |relevance|: the overlay's levels are ±0.312
    pixels = images(1)[0].transpose(1, 2, 0)
    explanation = InputExplanation(7, ANKLE_BOOT, T_SHIRT, heat, np.zeros(84, np.float32), np.zeros(84, np.float32))
    inspector.show_explanation(explanation, pixels, "test", FASHION_CLASSES)
    limit = symmetric_limit(heat)
    assert inspector.limit == pytest.approx(0.3123) and inspector.scale.limit == limit
    assert inspector.scale.texts() == ["relevance", "+0.312", "0", "−0.312"]
    # The picture is the overlay drawn to exactly that limit (not to another one).
    shown_image = inspector.image.pixmap().toImage()
    scale = shown_image.width() // 28
    drawn = np.array([[QColor(shown_image.pixel(x * scale, y * scale)).getRgb()[:3] for x in range(28)]
                      for y in range(28)])
    np.testing.assert_array_equal(drawn, overlay_rgb(pixels, heat, inspector.opacity, limit))
    assert not np.array_equal(drawn, overlay_rgb(pixels, heat, inspector.opacity, 2 * limit))
    # Its texts fit the scale, which sits beside the image.
    fm = inspector.scale.fontMetrics()
    for rect, text in inspector.scale.text_rects():
        assert fm.horizontalAdvance(text) <= rect.width() and inspector.scale.rect().contains(rect)
    assert inspector.scale.isVisible() and inspector.scale.geometry().left() > inspector.image.geometry().right()
    inspector.set_opacity(0.3)
    assert inspector.scale.limit == limit
    save(inspector, "inspector")


def test_gallery_scale_says_each_image_is_scaled_to_its_own_largest_relevance(qtbot):
    panel = shown(GalleryPanel(), qtbot, 560, 330)
    assert not panel.scale.isVisible()
    tiles = gallery_tiles(scales=(1.0, 10.0, 0.01))
    panel.set_tiles(tiles, tiles[:1])
    grid = panel.by_relevance
    assert panel.scale.isVisible()
    assert panel.scale.texts() == ["relevance ÷ each image's largest |R|", "+1", "0", "−1"]
    limits = [symmetric_limit(t.heatmap) for t in tiles]
    assert grid.limits == limits and limits[1] > 100 * limits[2]
    for position, tile in enumerate(tiles):
        rgb = overlay_rgb(tile.pixels, tile.heatmap, grid.opacity, limits[position])
        image = grid.images[position]
        assert QColor(image.pixel(5, 5)).getRgb()[:3] == tuple(int(v) for v in rgb[5, 5])
        assert f"±{limits[position]:.3g}" in grid.tooltip_for(position)


# --- the heatmap's legend ---------------------------------------------------------------------------

def test_relevance_heatmap_legend_says_what_triangles_and_dots_mean(qtbot):
    heatmap = shown(RelevanceHeatmap(), qtbot, 574, 425)
    values = np.random.default_rng(6).normal(size=(10, 84))
    heatmap.set_matrix(values, FASHION_CLASSES, empty_rows=[4])
    heatmap.set_marks([3, 7, 9, 11], [[1, 2, 5, 6]] * 10)
    entries = heatmap.legend_entries()
    assert entries[0] == "▼ top 4 neurons over all classes"
    assert entries[1] == "● a class's own top 4"
    assert any("hatched" in e for e in entries) and any("selected neuron" in e for e in entries)
    assert "top 4 neurons over all classes" in heatmap.legend_text
    # It is part of the scene (exports carry it) and inside the view.
    assert heatmap.legend.scene() is heatmap.scene()
    assert QRectF(heatmap.rect()).contains(heatmap.legend.sceneBoundingRect())
    assert heatmap.legend.sceneBoundingRect().top() >= heatmap.readout.sceneBoundingRect().bottom() - 1
    heatmap.set_marks([], [])
    assert not any(e.startswith(("▼", "●")) for e in heatmap.legend_entries())


# --- status lines keep their place ---------------------------------------------------------------------

def test_fuzz_counter_appearing_moves_nothing_below_it(qtbot):
    widget = shown(FuzzPairs(), qtbot, 900, 440)
    assert not widget.counter.isVisible()
    before = widget.stack.geometry().top()
    widget.set_progress(12, 87, 1.2)
    flush_events()
    assert widget.counter.isVisible() and widget.counter.text()
    assert widget.stack.geometry().top() == before


def test_busy_bar_going_away_moves_no_button(qtbot):
    empty = shown(EmptyState(), qtbot, 600, 400)
    empty.show_message("Explaining test image #3…", "The relevance of each pixel.", [("Cancel", lambda: None)],
                       busy=True)
    flush_events()
    button = empty.buttons.itemAt(1).widget()
    before = button.mapTo(empty, button.rect().topLeft()).y()
    empty.show_message("Explaining test image #3 failed", "The relevance of each pixel.", [("Try again", lambda: None)])
    flush_events()
    button = empty.buttons.itemAt(1).widget()
    assert button.text() == "Try again" and not empty.busy.isVisible()
    assert button.mapTo(empty, button.rect().topLeft()).y() == before


def test_gallery_grids_do_not_move_when_the_scale_and_tiles_come(qtbot):
    panel = shown(GalleryPanel(), qtbot, 560, 330)
    panel.stack.show_message("Finding the images of neuron 3…", busy=True)
    flush_events()
    before = panel.stack.geometry().top()
    tiles = gallery_tiles()
    panel.set_tiles(tiles, tiles, note="From a seeded sample of 10,000 training images.")
    flush_events()
    assert panel.scale.isVisible() and panel.stack.geometry().top() == before


def test_inspector_shows_the_same_explanation_again_by_moving_its_marks_only(qtbot):
    inspector = shown(InputInspector(), qtbot, 560, 300)
    relevance = np.linspace(-1, 1, 84).astype(np.float32)
    explanation = InputExplanation(7, ANKLE_BOOT, ANKLE_BOOT, np.zeros((28, 28), np.float32), relevance,
                                   np.zeros(84, np.float32))
    pixels = images(1)[0].transpose(1, 2, 0)
    inspector.show_explanation(explanation, pixels, "test", FASHION_CLASSES, marked=[3], selected=3)
    drawn = inspector.image.pixmap().cacheKey()
    inspector.show_explanation(explanation, pixels.copy(), "test", FASHION_CLASSES, marked=[5, 6], selected=6,
                               what="for neuron 6")
    assert inspector.image.pixmap().cacheKey() == drawn  # the same picture: not rendered again
    assert list(inspector.bars.plot.marked) == [5, 6] and inspector.bars.plot.selected == 6
    assert inspector.explained.text() == "for neuron 6"
    inspector.set_opacity(inspector.opacity)
    assert inspector.image.pixmap().cacheKey() == drawn
    inspector.set_opacity(0.2)
    assert inspector.image.pixmap().cacheKey() != drawn
    other = InputExplanation(8, T_SHIRT, ANKLE_BOOT, np.ones((28, 28), np.float32), relevance, relevance)
    inspector.show_explanation(other, pixels, "test", FASHION_CLASSES)
    assert inspector.title.text() == "Test image #8" and "(wrong)" in inspector.prediction.text()
    assert "border" in inspector.image.styleSheet()


def test_class_bars_print_each_value_at_its_bar_end_in_one_item(qtbot):
    from pyqtgraph import TextItem

    from workbench.gui.widgets.class_bars import VALUE_GAP, ClassBars

    bars = shown(ClassBars(), qtbot, 400, 260)
    bars.set_values(["a", "b", "c"], [0.5, None, 0.9751])
    assert bars.labels.texts() == ["50.0 %", "—", "97.5 %"]
    assert [c for x, y, *_ in bars.labels.labels for c in (x, y)] == pytest.approx([50 + VALUE_GAP, 0, 0, 1, 97.51 + VALUE_GAP, 2])
    assert not [item for item in bars.plot.items if isinstance(item, TextItem)]
    bars.set_values(["a"], [0.25])  # a second result replaces the first's texts
    assert bars.labels.texts() == ["25.0 %"]
    image = bars.grab().toImage()
    assert image.width() > 0  # painted without errors


@pytest.mark.parametrize("make", ["confusion", "class bars"])
def test_class_name_axes_are_as_wide_as_their_names_before_the_first_paint(qtbot, make):
    """pyqtgraph measures tick texts while painting; an axis that widened then laid its plot out and
    painted it a second time. Axes of known class names take their width before they paint."""
    from workbench.gui.widgets.class_bars import ClassBars

    if make == "confusion":
        widget = shown(Heatmap(units="images"), qtbot, 420, 360)
        widget.set_matrix(np.arange(100).reshape(10, 10), FASHION_CLASSES, FASHION_CLASSES)
    else:
        widget = shown(ClassBars(), qtbot, 400, 260)
        widget.set_values(FASHION_CLASSES, [0.5] * 10)
    axis = widget.plot.getAxis("left")
    before = axis.maximumWidth()
    widget.grab()
    flush_events()
    assert axis.maximumWidth() == before  # no second layout
    widest = max(QFontMetrics(axis.font()).horizontalAdvance(name) for name in FASHION_CLASSES)
    assert axis.width() >= widest  # and no name is cut


def test_training_curves_drawn_while_hidden_draw_when_shown(qtbot):
    from workbench.gui.widgets.training_curves import TrainingCurves

    curves = TrainingCurves()
    qtbot.addWidget(curves)
    rows = [{"epoch": e, "train_loss": 1 / e, "train_accuracy": 0.5 + e / 10, "test_accuracy": 0.4 + e / 10}
            for e in (1, 2, 3)]
    curves.set_history(rows)
    assert len(curves.csv_rows()[1]) == 3  # the rows are there at once
    assert curves.loss_curve.getData()[0] is None or not len(curves.loss_curve.getData()[0])  # not drawn yet
    curves.show()
    qtbot.waitExposed(curves)
    assert list(curves.loss_curve.getData()[0]) == [1.0, 2.0, 3.0]
    assert list(curves.test_curve.getData()[1]) == pytest.approx([50.0, 60.0, 70.0])


def test_the_same_empty_state_message_again_keeps_its_buttons_and_calls_the_new_handlers(qtbot):
    empty = shown(EmptyState(), qtbot, 500, 300)
    calls = []
    empty.show_message("Nothing yet", "Press a button.", [("Go", lambda: calls.append(1)), ("Stop", lambda: None)])
    first = empty.buttons.itemAt(1).widget()
    empty.show_message("Nothing yet", "Press a button.", [("Go", lambda: calls.append(2)), ("Stop", lambda: None)],
                       busy=True)
    assert empty.buttons.itemAt(1).widget() is first and empty.busy.isVisibleTo(empty)
    empty.click("Go")
    assert calls == [2]  # the new handler only
    empty.show_message("Something else", "", [("Retry", lambda: calls.append(3))])
    assert empty.button_texts() == ["Retry"] and empty.title.text() == "Something else"
    assert not empty.busy.isVisibleTo(empty) and not empty.text.isVisibleTo(empty)
    empty.click("Retry")
    assert calls == [2, 3]


def test_a_gallery_and_an_empty_state_need_no_more_room_when_their_content_comes(qtbot):
    """A view that needed more room when a result came made the window grow, then lay out and draw
    everything again (the Importance view's gallery: a 90 ms stall)."""
    panel = shown(GalleryPanel(capacity=9), qtbot, 560, 400)
    panel.stack.show_message("Finding the images of neuron 3…", busy=True)
    flush_events()
    before = panel.minimumSizeHint()
    tiles = gallery_tiles(scales=(1.0,) * 9)
    panel.set_tiles(tiles, tiles, note="From a seeded sample of 10,000 training images.")
    flush_events()
    assert panel.minimumSizeHint().height() == before.height()
    assert panel.by_relevance.height() == 3 * panel.by_relevance.tile_size().height()  # all nine tiles shown
    empty = shown(EmptyState(), qtbot, 400, 200)
    empty.show_message("Short")
    short = empty.minimumSizeHint().width()
    empty.show_message("A much longer title, as the ablation check's message while it computes, " * 3)
    assert empty.minimumSizeHint().width() <= max(short, 300)  # a long title wraps


def test_a_long_message_is_shortened_so_its_title_stays_in_sight(qtbot):
    """An LRP refusal lists every layer of the model: shown whole, it pushed the title and the text out of
    the panel and left only the buttons. The panel shows its start, the tooltip the whole of it."""
    empty = shown(EmptyState(), qtbot, 520, 360)
    text = "LRP cannot propagate relevance through layer 'x'. The model's layers: " + ", ".join(
        f"layer{i // 4}.{i % 4}.conv (Conv2d)" for i in range(60))
    empty.show_message("No relevance for layer layer3", text, [("Compute again", lambda: None)])
    flush_events()
    shown_text = empty.text.text()
    assert len(shown_text) <= 482 and shown_text.endswith(" …") and text.startswith(shown_text[:-2])
    assert empty.text.toolTip() == text
    for label in (empty.title, empty.text):
        top = label.mapTo(empty, label.rect().topLeft()).y()
        assert 0 <= top and top + label.height() <= empty.height()  # the whole label is in the panel
    empty.show_message("Nothing yet", "Short.", [])
    assert empty.text.text() == "Short." and empty.text.toolTip() == ""
