"""The central area: one tab per view, in a scroll area, so no view can squeeze the docks.

A `QTabWidget` is as wide at least as its widest page, whichever page is shown; with a wide view
among the tabs the main window took the missing width from the project dock, down to a sliver, and
saved it so. Here the tabs ask only for the width of the page they show, and the scroll area around
them lets that page scroll when the window is narrower still; the docks keep their widths.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QRect, QSize, Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QTabWidget, QWidget

MIN_SIDE = 120  # the least width the area asks of the window: what it cannot show, it scrolls


class ViewTabs(QTabWidget):
    """Tabs whose minimum size is the shown page's, not the largest page's."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.currentChanged.connect(lambda _: self.updateGeometry())

    def minimumSizeHint(self) -> QSize:
        page = self.currentWidget()
        if page is None:
            return super().minimumSizeHint()
        hint = page.minimumSizeHint().expandedTo(page.minimumSize())
        bar = self.tabBar().sizeHint()
        return QSize(hint.width(), hint.height() + bar.height())


class ViewArea(QScrollArea):
    """A frameless scroll area holding the view tabs (`self.tabs`), resized to fill it; it scrolls
    sideways only."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.tabs = ViewTabs()
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        self.setWidget(self.tabs)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        # The height is the shown view's, as the window always gave it (the docks below yield it).
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.tabs.currentChanged.connect(lambda _: self._fit())
        self.tabs.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        if watched is self.tabs and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # the shown view needs more (or less) room: the window lays out again
        return super().eventFilter(watched, event)

    def _fit(self) -> None:
        """Size the tabs for the page now shown (a scroll area follows its widget's hints only on resize)."""
        self.updateGeometry()
        size = self.viewport().size().expandedTo(self.tabs.minimumSizeHint())
        self.tabs.resize(size)

    def minimumSizeHint(self) -> QSize:
        bar = self.horizontalScrollBar().sizeHint().height()
        return QSize(MIN_SIDE, max(MIN_SIDE, self.tabs.minimumSizeHint().height() + bar))


def lay_out_while_hidden(page: QWidget) -> None:
    """Give a hidden page of a stack (a view behind its tab) the size it will be shown at, and lay it
    out: Qt lays out a page only when it is shown, so its first show laid out and resized everything in
    it, and its plots then made their axes again, all in the turn that showed it."""
    stack = page.parentWidget()
    if stack is None or page.isVisible():
        return
    page.setGeometry(stack.contentsRect())
    page.grab(QRect(0, 0, 1, 1))  # Qt lays a hidden widget out to draw it: one pixel costs the layout only

