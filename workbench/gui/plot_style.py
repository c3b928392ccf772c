"""pyqtgraph's look, taken from the application palette so plots match light and dark themes."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication


def configure_pyqtgraph() -> None:
    """Anti-aliased plots on the palette's base colour with text-coloured axes; call before plotting."""
    app = QApplication.instance()
    palette = app.palette() if app is not None else QPalette()
    pg.setConfigOptions(antialias=True, background=palette.color(QPalette.ColorRole.Base),
                        foreground=palette.color(QPalette.ColorRole.Text))
