"""A dismissable strip above the views for things the user should know but need not act on now.

Used for start-up news: the demo fell back to another dataset, plugins failed to load, the project
folder is read-only or holds damaged results. Each notice can carry one action button.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QVBoxLayout, QWidget

LEVEL_COLORS = {"info": ("#e3f2fd", "#0d47a1"), "warning": ("#fff3e0", "#8a4b00"), "error": ("#ffebee", "#b71c1c")}


class Notice(QFrame):
    dismissed = Signal()

    def __init__(self, text: str, level: str = "info", action: tuple[str, Callable[[], None]] | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        background, foreground = LEVEL_COLORS[level]
        self.setObjectName("notice")
        self.setStyleSheet(f"#notice {{ background: {background}; border: 1px solid {foreground}40; "
                           f"border-radius: 3px; }} #notice QLabel {{ color: {foreground}; }}")
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        layout.addWidget(self.label, 1)
        self.button = None
        if action is not None:
            self.button = QPushButton(action[0])
            self.button.clicked.connect(action[1])
            layout.addWidget(self.button)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.dismissed)
        layout.addWidget(close)

    @property
    def text(self) -> str:
        return self.label.text()


class NoticeBar(QWidget):
    """A vertical stack of notices; hidden while empty."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(4, 4, 4, 0)
        self._layout.setSpacing(4)
        self.setVisible(False)

    def add(self, text: str, level: str = "info", action: tuple[str, Callable[[], None]] | None = None) -> Notice:
        notice = Notice(text, level, action, self)
        notice.dismissed.connect(lambda: self._dismiss(notice))
        self._layout.addWidget(notice)
        self.setVisible(True)
        return notice

    def notices(self) -> list[Notice]:
        return [w for w in self.findChildren(Notice) if not w.isHidden()]

    def clear(self) -> None:
        for notice in self.findChildren(Notice):
            notice.setParent(None)
            notice.deleteLater()
        self.setVisible(False)

    def _dismiss(self, notice: Notice) -> None:
        notice.hide()
        notice.deleteLater()
        self.setVisible(bool(self.notices()))
