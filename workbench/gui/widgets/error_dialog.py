"""The error dialog: what went wrong, what to do, and the technical text under "Details".

Every `WorkbenchError` a user can cause ends here, and so does any unexpected exception (as an
"unexpected error" with its traceback), so the application keeps running instead of crashing.
The dialog is window-modal but opened with `open()`, so jobs and timers carry on behind it.
"""

from __future__ import annotations

import sys
import traceback
from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QPlainTextEdit, QStyle,
                               QToolButton, QVBoxLayout, QWidget)

from workbench.core.errors import WorkbenchError


def describe(exc: BaseException, details: str = "") -> tuple[str, str, str]:
    """(message, hint, details) for any exception; unexpected ones keep their traceback."""
    if isinstance(exc, WorkbenchError):
        return exc.message, exc.hint, "\n\n".join(t for t in (exc.details, details) if t)
    text = details or "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return (f"Unexpected error: {type(exc).__name__}: {exc}",
            "The workbench kept running. If this repeats, report it with the details below.", text)


class ErrorDialog(QDialog):
    """Message in bold, the hint beneath it, and a collapsible "Details" box."""

    def __init__(self, message: str, hint: str = "", details: str = "", title: str = "Something went wrong",
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setObjectName("errorDialog")
        self.message, self.hint, self.details = message, hint, details

        icon = QLabel()
        icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning).pixmap(40, 40))
        icon.setAlignment(Qt.AlignmentFlag.AlignTop)
        text = QVBoxLayout()
        self.message_label = QLabel(f"<b>{_escape(message)}</b>")
        self.hint_label = QLabel(_escape(hint))
        for label in (self.message_label, self.hint_label):
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            text.addWidget(label)
        self.hint_label.setVisible(bool(hint))
        head = QHBoxLayout()
        head.addWidget(icon)
        head.addLayout(text, 1)

        self.details_button = QToolButton()
        self.details_button.setText("Details")
        self.details_button.setCheckable(True)
        self.details_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.details_button.setArrowType(Qt.ArrowType.RightArrow)
        self.details_button.setVisible(bool(details))
        self.details_box = QPlainTextEdit(details)
        self.details_box.setReadOnly(True)
        self.details_box.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.details_box.setMinimumHeight(160)
        self.details_box.setVisible(False)
        self.details_button.toggled.connect(self._show_details)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok)
        buttons.accepted.connect(self.accept)

        layout = QVBoxLayout(self)
        layout.addLayout(head)
        layout.addWidget(self.details_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.details_box, 1)
        layout.addWidget(buttons)
        self.setMinimumWidth(480)

    def _show_details(self, shown: bool) -> None:
        self.details_button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.details_box.setVisible(shown)
        self.adjustSize()


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\n", "<br>")


def report_error(parent: QWidget | None, exc: BaseException, details: str = "",
                 title: str = "Something went wrong") -> ErrorDialog:
    """Show an exception in an error dialog without blocking; returns the dialog."""
    message, hint, text = describe(exc, details)
    dialog = ErrorDialog(message, hint, text, title, parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()
    return dialog


def report_problems(parent: QWidget | None, title: str, summary: str, problems: list[str],
                    hint: str = "") -> ErrorDialog:
    """Show a list of problems found at start-up (broken plugins, damaged results)."""
    dialog = ErrorDialog(summary, hint, "\n".join(f"• {p}" for p in problems), title, parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.details_button.setChecked(True)
    dialog.open()
    return dialog


def install_excepthook(parent_of_dialogs) -> Callable[[], None]:
    """Route exceptions escaping Qt slots to the error dialog instead of only stderr.

    `parent_of_dialogs` is a callable returning the widget to parent dialogs on (or None).
    Returns a function that puts the previous hook back.
    """
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        if issubclass(exc_type, KeyboardInterrupt):
            previous(exc_type, exc, tb)
            return
        traceback.print_exception(exc_type, exc, tb)
        try:
            report_error(parent_of_dialogs(), exc, "".join(traceback.format_exception(exc_type, exc, tb)))
        except Exception:  # never let the error reporter raise
            previous(exc_type, exc, tb)

    sys.excepthook = hook

    def restore() -> None:
        if sys.excepthook is hook:
            sys.excepthook = previous
    return restore
