"""At the window's default size (1440×900) every view shows its text whole: no label, button or table
cell is cut off or elided ("59.4 % — 153,374 / 258,000 …" once lost its end in the Coverage table, and
the ablation check's sentence its last words).

What fits is measured with the widget's own font against the room its layout gave it: a one-line
label, a button or a cell needs its text's width (plus the style's margins); a word-wrapped label needs
the height its text takes at its width."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QModelIndex, QRect, Qt
from PySide6 import QtGui
from PySide6.QtGui import QFontMetrics, QTextDocument
from PySide6.QtWidgets import QAbstractButton, QAbstractItemView, QLabel, QStyle, QWidget

from gui_helpers import flush_events

from workbench.gui.session import coverage_runs
from workbench.gui.shell.main_window import DEFAULT_SIZE, VIEW_TITLES
from workbench.gui.views import robustness_view

pytestmark = pytest.mark.gui



def label_cut(label: QLabel) -> bool:
    text = label.text()
    room = label.contentsRect()
    if not text or room.width() <= 0 or label.pixmap() is not None and not label.pixmap().isNull():
        return False
    if label.wordWrap():
        return label.heightForWidth(room.width()) > room.height() + 1
    if QtGui.Qt.mightBeRichText(text) and label.textFormat() != Qt.TextFormat.PlainText:
        document = QTextDocument()
        document.setDefaultFont(label.font())
        document.setHtml(text)
        document.setDocumentMargin(0)
        return document.idealWidth() > room.width() + 1
    return max(label.fontMetrics().horizontalAdvance(line) for line in text.split("\n")) > room.width() + 1


def cells_cut(view: QAbstractItemView) -> list[str]:
    """The texts of the cells in sight that are wider than their cell."""
    model, cut = view.model(), []
    if model is None:
        return cut
    port = view.viewport().rect()
    # a cell's text margin on each side, as Qt's styles lay out an item
    margins = 2 * (view.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, view) + 1)

    def walk(parent: QModelIndex) -> None:
        for row in range(model.rowCount(parent)):
            try:
                columns = model.columnCount(parent)
            except TypeError:  # a list model keeps its one column to itself
                columns = 1
            for column in range(columns):
                index = model.index(row, column, parent)
                rect = view.visualRect(index)
                text = index.data(Qt.ItemDataRole.DisplayRole)
                if not isinstance(text, str) or not text or not rect.isValid() or not port.intersects(rect):
                    continue
                if rect.right() > port.right() or rect.left() < port.left():
                    continue  # scrolled partly out of sight: the user scrolls to it, nothing is elided
                font = index.data(Qt.ItemDataRole.FontRole)
                metrics = QFontMetrics(font) if font is not None else view.fontMetrics()
                icon = view.iconSize().width() + 4 if index.data(Qt.ItemDataRole.DecorationRole) is not None else 0
                room = rect.width() - margins - icon
                if view.wordWrap():
                    needed = metrics.boundingRect(QRect(0, 0, room, 100_000), Qt.TextFlag.TextWordWrap, text)
                    if needed.width() > room or needed.height() > rect.height():
                        cut.append(text)
                    continue
                lines = text.split("\n")
                if max(metrics.horizontalAdvance(line) for line in lines) > room or \
                        len(lines) * metrics.lineSpacing() > rect.height():
                    cut.append(text)
            first = model.index(row, 0, parent)
            if getattr(view, "isExpanded", lambda _: False)(first) and model.rowCount(first):  # a tree's open rows
                walk(first)

    walk(QModelIndex())
    return cut


def cut_texts(root: QWidget) -> list[str]:
    """Every text in sight under `root` that does not fit the room it was given."""
    cut = []
    for label in root.findChildren(QLabel):
        if label.isVisible() and label_cut(label):
            cut.append(f"label {label.objectName() or ''}: {label.text()!r}")
    for button in root.findChildren(QAbstractButton):
        text = button.text().replace("&", "")
        if button.isVisible() and text and button.fontMetrics().horizontalAdvance(text) > button.contentsRect().width():
            cut.append(f"button: {text!r}")
    for view in root.findChildren(QAbstractItemView):
        if view.isVisible():
            cut += [f"cell of {view.objectName() or type(view).__name__}: {text!r}" for text in cells_cut(view)]
    return cut


def test_every_view_shows_its_text_whole_at_the_default_size(qtbot, settled_window, settle, monkeypatch, tmp_path):
    monkeypatch.setattr(robustness_view, "AUTO_START_S", 0.0)  # the same screen however busy the machine is
    monkeypatch.setattr(coverage_runs, "AUTO_START_S", float("inf"))
    window = settled_window
    window.resize(*DEFAULT_SIZE)
    found = {}
    for name in VIEW_TITLES:
        window.show_view(name)
        settle(window)
        qtbot.waitUntil(lambda: window.runner.is_idle(), timeout=120_000)
        # a result's widgets paint one per turn (StagedPaint): every one has its turn before it is read
        qtbot.waitUntil(lambda: all(w.updatesEnabled() for w in window.findChildren(QWidget)), timeout=30_000)
        # the last job's end changed texts ("1 job running" → "No jobs running"): their layout comes next turn
        flush_events()
        window.grab().save(str(tmp_path / f"{name}.png"))
        cut = cut_texts(window)
        if cut:
            found[name] = cut
    assert found == {}, "\n".join(f"{name}: {text}" for name, cut in found.items() for text in cut)
