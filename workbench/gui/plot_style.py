"""pyqtgraph's look, taken from the application palette so plots match light and dark themes."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication, QGraphicsItem


def configure_pyqtgraph() -> None:
    """Anti-aliased plots on the palette's base colour with text-coloured axes; call before plotting."""
    app = QApplication.instance()
    palette = app.palette() if app is not None else QPalette()
    pg.setConfigOptions(antialias=True, background=palette.color(QPalette.ColorRole.Base),
                        foreground=palette.color(QPalette.ColorRole.Text))


def cache_axes(plot: pg.PlotItem) -> pg.PlotItem:
    """Keep each axis of `plot` as a pixmap until what it shows changes: replaying every axis's tick text
    on each repaint of a plot whose data changed was most of the window's painting while views compute."""
    for side in ("left", "bottom", "right", "top"):
        plot.getAxis(side).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
    return plot
