"""pyqtgraph's look, taken from the application palette so plots match light and dark themes."""

from __future__ import annotations

import weakref

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFontMetrics, QPalette
from PySide6.QtWidgets import QApplication, QGraphicsItem


def configure_pyqtgraph() -> None:
    """Anti-aliased plots on the palette's base colour with text-coloured axes; call before plotting."""
    app = QApplication.instance()
    palette = app.palette() if app is not None else QPalette()
    pg.setConfigOptions(antialias=True, background=palette.color(QPalette.ColorRole.Base),
                        foreground=palette.color(QPalette.ColorRole.Text))


def cache_axes(plot: pg.PlotItem) -> pg.PlotItem:
    """Keep each axis of `plot` as a pixmap until what it shows changes: replaying every axis's tick text
    on each repaint of a plot whose data changed was most of the window's painting while views compute.

    The axes take no SI prefix either: their titles carry no units, and choosing the prefix set the
    title's text again (a rich-text layout) at every change of range, 40 times as the Model view showed."""
    for side in ("left", "bottom", "right", "top"):
        axis = plot.getAxis(side)
        axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        axis.enableAutoSIPrefix(False)
    return plot


BEHIND_THE_VIEW = -200  # a plot's view box is at z -100 among its axes


def mixed(background: QColor, color: QColor, share: float) -> QColor:
    """`color` laid over `background` with opacity `share`, as one opaque colour."""
    keep = 1.0 - share
    return QColor(round(background.red() * keep + color.red() * share),
                  round(background.green() * keep + color.green() * share),
                  round(background.blue() * keep + color.blue() * share))


def show_grid(plot: pg.PlotItem, x: bool = False, y: bool = False, alpha: float = 0.2) -> pg.PlotItem:
    """Grid lines, and ticks, at the major tick values only, in an opaque colour behind the data.

    - Major ticks only: pyqtgraph draws a line across the whole plot for every tick of each of its
      three levels, and replaying those lines was half the painting of a plot redrawn as results
      arrive (the relevance bars: 4–5 ms of each repaint's 9).
    - Opaque: a translucent line is blended pixel by pixel, and a vertical one a pixel per scan line;
      the growth plot's 50 grid lines took 11–15 ms of each repaint, opaque ones well under 1 ms. The
      colour is the text colour mixed into the background by `alpha`, so it looks as before.
    - Behind the data: the axes, which draw the grid, go under the view box, so an opaque line never
      crosses a curve or a bar."""
    plot.showGrid(x=x, y=y, alpha=alpha)
    background = QColor(pg.getConfigOption("background"))
    for side, on in (("bottom", x), ("left", y)):
        if on:
            axis = plot.getAxis(side)
            axis.setStyle(maxTickLevel=0, tickAlpha=255)
            axis.setTickPen(pg.mkPen(mixed(background, axis.pen().color(), alpha)))
            axis.setZValue(BEHIND_THE_VIEW)
    return plot


_ticks_set: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # axis → the levels `set_ticks` gave it


def set_ticks(axis: pg.AxisItem, levels: list) -> None:
    """Give `axis` these tick levels unless it has them already: an axis told its ticks again makes its
    picture, and lays out its texts, again (a heatmap's or bars' axes at every new batch of totals)."""
    if _ticks_set.get(axis) != levels:
        _ticks_set[axis] = levels
        axis.setTicks(levels)


def set_tick_texts(axis: pg.AxisItem, ticks: list[tuple[float, str]]) -> None:
    """Put `ticks` (value, text) on a vertical axis and make it as wide as their texts before it paints.
    pyqtgraph measures the texts only while painting; a wider axis then lays the plot out and paints it
    again (the confusion matrix's class names: a second paint of 11 ms on the Model view's first show)."""
    set_ticks(axis, [ticks])
    fix_text_width(axis, [text for _, text in ticks])


def fix_text_width(axis: pg.AxisItem, texts) -> None:
    """Make a vertical axis as wide as the widest of `texts`, and keep it so while it paints."""
    metrics = QFontMetrics(axis.style["tickFont"] or axis.font())
    width = max((metrics.horizontalAdvance(text) for text in texts), default=0) + 2
    if (axis.style["autoExpandTextSpace"], axis.style["tickTextWidth"]) != (False, width):
        axis.setStyle(autoExpandTextSpace=False, tickTextWidth=width)


def fit_value_axis(axis: pg.AxisItem, low: float, high: float, length: float) -> None:
    """Make a vertical axis of numbers as wide as the texts of its ticks over [low, high] before it paints
    (see `set_tick_texts`): the inspector's bars, given new values, painted, widened their axis, and
    laid out and painted again. An axis of a fixed width (`setWidth`) keeps it."""
    if axis.fixedWidth is None:
        fix_text_width(axis, [text for spacing, values in axis.tickValues(low, high, max(length, 50.0))
                              for text in axis.tickStrings(values, axis.scale, spacing)])


def fit_tick_text_height(axis: pg.AxisItem) -> None:
    """Make a horizontal axis one line of tick text high before it paints: pyqtgraph measures the texts
    while painting, and the new height laid the plot out and painted it again (the relevance bars' first
    paint: three paints, not one)."""
    metrics = QFontMetrics(axis.style["tickFont"] or axis.font())
    axis.setStyle(autoExpandTextSpace=False, tickTextHeight=metrics.height())


def lay_out_before_painting(*plots: pg.PlotItem) -> None:
    """Lay `plots` out for new axes and texts, and give their views their new transforms, now: left to
    the paint, each made the scene paint the plot again (a new result: two to four paints, not one)."""
    for plot in plots:
        plot.layout.activate()
        plot.vb.prepareForPaint()


TITLE_LINES = 2  # a wrapped axis title takes at most this many lines; past them it is shortened


def text_lines(document) -> int:
    """How many lines a laid-out text document takes."""
    document.documentLayout()  # lays it out
    lines, block = 0, document.begin()
    while block.isValid():
        lines += max(1, block.layout().lineCount())
        block = block.next()
    return lines


def fit_axis_title(axis: pg.AxisItem) -> None:
    """Show a vertical axis's title (a colour bar's units) whole: on one line where it fits the axis's
    length, wrapped onto two where it does not ("relevance (sum over images)" beside a short bar),
    and, on a bar too short for that, as its first word with the full title in the tooltip — never
    running off the plot or under the tick values.

    The axis widens by the extra line (pyqtgraph sizes an axis by its title's height). Call it after
    the title changes; `keep_axis_title_whole` calls it whenever the axis is resized, too.
    """
    label = axis.label
    if label is None or axis.orientation not in ("left", "right"):
        return
    length = axis.size().height() - 4
    label.setHtml(axis.labelString())  # the full title, also after a shortened one
    label.setToolTip("")
    label.setTextWidth(-1)
    short = False
    if 0 < length < label.boundingRect().width():
        label.setTextWidth(max(length, 24.0))
        option = label.document().defaultTextOption()
        option.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        label.document().setDefaultTextOption(option)
        short = text_lines(label.document()) > TITLE_LINES or label.document().size().width() > length + 0.5
        if short:
            label.setTextWidth(-1)
    axis.showLabel(label.isVisible())  # pyqtgraph sizes the axis again for the label's height (and sets it again)
    full = axis.labelText.strip()
    if short and full:
        label.setHtml(axis.labelString().replace(full, full.split()[0]))
        label.setToolTip(full)
    axis.resizeEvent()  # and centres the label along the axis


def keep_axis_title_whole(axis: pg.AxisItem) -> None:
    """Wrap `axis`'s title to its length now and after every resize (see `fit_axis_title`).

    The axis sizes itself to its tick values and its title (a colour bar's axis comes with a fixed
    width of 45 px, too narrow for "10,000" beside a title); it only grows, so it does not jitter
    while counts rise.
    """
    axis.setStyle(autoReduceTextSpace=False)
    axis.setWidth(None)
    axis.geometryChanged.connect(lambda: fit_axis_title(axis))
    fit_axis_title(axis)
