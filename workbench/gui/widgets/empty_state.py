"""What a view shows when it has nothing to show yet: what is happening or what to do next.

A view never shows an empty canvas: a title, a sentence, and the buttons that move things on,
or a busy bar while a job fetches the data.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)


MAX_TEXT = 480  # characters a message shows; a longer one (an LRP refusal lists every layer) would push the
#                title and the text out of a panel, leaving only the buttons


def shortened(text: str, limit: int = MAX_TEXT) -> str:
    """`text`, or its first `limit` characters cut at a space with " …" after them (the whole text is the
    label's tooltip)."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    return (cut[:cut.rfind(" ")] if " " in cut else cut).rstrip(" ,;:") + " …"


class EmptyState(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = QLabel()
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.title.setWordWrap(True)  # a long title wraps: it never widens the view that shows it
        font = self.title.font()
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setBold(True)
        self.title.setFont(font)
        self.text = QLabel()
        self.text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.text.setWordWrap(True)
        self.text.setMaximumWidth(560)
        self.text.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(240)
        self.busy.setTextVisible(False)
        keep_space_when_hidden(self.busy)  # the buttons under it stay where they are, busy or not
        self.buttons = QHBoxLayout()
        self.buttons.addStretch(1)
        self.buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        layout.addWidget(self.title)
        text_row = QHBoxLayout()  # the text takes the width there is, up to its maximum, centred
        text_row.addStretch(0)
        text_row.addWidget(self.text, 1)  # it, not the stretches, takes the width: the width _fit_text measures
        text_row.addStretch(0)
        layout.addLayout(text_row)
        layout.addWidget(self.busy, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addLayout(self.buttons)
        layout.addStretch(2)

    def show_message(self, title: str, text: str = "", actions: list[tuple[str, Callable[[], None]]] = (),
                     busy: bool = False) -> None:
        self.busy.setVisible(busy)
        shown = shortened(text)
        if (title, shown, [label for label, _ in actions]) == (self.title.text(), self.text.text(), self.button_texts()):
            # The same message again (a view refreshed): its buttons stay and call the new handlers. New
            # buttons and the wrapped text's new height took a view's show 1–2 ms a message.
            for i, (_, handler) in enumerate(actions):
                button = self.buttons.itemAt(1 + i).widget()
                button.clicked.disconnect()
                button.clicked.connect(handler)
            return
        self.title.setText(title)
        self.text.setText(shown)
        self.text.setToolTip(text if shown != text else "")
        self.text.setVisible(bool(text))
        while self.buttons.count() > 2:
            widget = self.buttons.takeAt(1).widget()
            widget.deleteLater()
        for i, (label, handler) in enumerate(actions):
            button = QPushButton(label)
            button.clicked.connect(handler)
            if i == 0:
                button.setDefault(True)
            self.buttons.insertWidget(1 + i, button)
        self._fit_text()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_text()

    def _fit_text(self) -> None:
        """Reserve the height the wrapped text needs at the width it gets: stacked widgets do not ask
        labels their height for a width, so a narrow panel would cut the message off."""
        margins = self.layout().contentsMargins()
        width = min(self.text.maximumWidth(), self.width() - margins.left() - margins.right())
        if width > 0 and self.text.text():
            self.text.setMinimumHeight(max(0, self.text.heightForWidth(width)))

    def button_texts(self) -> list[str]:
        return [self.buttons.itemAt(i).widget().text() for i in range(1, self.buttons.count() - 1)]

    def click(self, text: str) -> None:
        """Press the button labelled `text` (tests and keyboard shortcuts use it)."""
        for i in range(1, self.buttons.count() - 1):
            button = self.buttons.itemAt(i).widget()
            if button.text() == text:
                button.click()
                return
        raise KeyError(text)


class MessageOrContent(QStackedWidget):
    """A view's body: its content, or an `EmptyState` saying what to do while there is none."""

    def __init__(self, content: QWidget, parent: QWidget | None = None):
        super().__init__(parent)
        self.empty = EmptyState()
        self.content = content
        self.addWidget(self.empty)
        self.addWidget(content)

    def show_message(self, *args, **kwargs) -> None:
        self.empty.show_message(*args, **kwargs)
        self.setCurrentWidget(self.empty)

    def show_content(self) -> None:
        self.setCurrentWidget(self.content)


def keep_space_when_hidden(widget: QWidget) -> QWidget:
    """Let `widget` keep its place in its layout while hidden, so what is below it never moves when
    it appears or goes (a status line, a busy bar): a click aimed at a button does not land beside it."""
    policy = widget.sizePolicy()
    policy.setRetainSizeWhenHidden(True)
    widget.setSizePolicy(policy)
    return widget


def headed_stack(header, body: QWidget) -> MessageOrContent:
    """A header row (a layout) above `body`, as the content of a `MessageOrContent`: a plot's frame."""
    content = QWidget()
    layout = QVBoxLayout(content)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addLayout(header)
    layout.addWidget(body, 1)
    return MessageOrContent(content)


def fill(owner: QWidget, *widgets: QWidget) -> None:
    """Lay `widgets` out top to bottom over the whole of `owner`, the last one taking the spare height."""
    layout = QVBoxLayout(owner)
    layout.setContentsMargins(0, 0, 0, 0)
    for widget in widgets[:-1]:
        layout.addWidget(widget)
    layout.addWidget(widgets[-1], 1)


def view_frame(owner: QWidget, controls, summary: QWidget, body: QWidget) -> MessageOrContent:
    """An analysis view's layout over the whole of `owner`: a row of controls, a summary line and the
    body, inside a `MessageOrContent` that shows what is missing while there is nothing to show."""
    content = QWidget()
    layout = QVBoxLayout(content)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addLayout(controls)
    layout.addWidget(summary)
    layout.addWidget(body, 1)
    stack = MessageOrContent(content)
    outer = QVBoxLayout(owner)
    outer.setContentsMargins(6, 6, 6, 6)
    outer.addWidget(stack)
    return stack
