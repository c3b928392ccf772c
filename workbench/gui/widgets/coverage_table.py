"""The coverage summary: every chosen criterion (rows) on every chosen test set (columns).

A cell reads "28.9 % — 74 / 256": one decimal and the count behind it. While a set is measured its cells show the
running value in grey; a criterion that could not be measured says so in red, with the reason as
the tooltip; a result with warnings (neurons that can never be covered, undefined surprise) is
marked ⚠ and lists them in its tooltip. Choosing a row emits `criterion_chosen(name)`.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
)

from workbench.gui.plotting.colors import MISMATCH
from workbench.gui.session.coverage_choices import criterion_help, criterion_titles

CRITERION_ROLE = Qt.ItemDataRole.UserRole + 1


class CoverageTable(QTableWidget):
    criterion_chosen = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.criteria: list[str] = []
        self.set_keys: list[str] = []
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.verticalHeader().setVisible(False)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.horizontalHeader().setHighlightSections(False)
        # A cell too narrow for its whole text ("48.0 % — 123,951 / 258,000  ⚠" beside two other sets) wraps
        # onto a second line rather than losing its end.
        self.setWordWrap(True)
        self.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.itemSelectionChanged.connect(self._on_selection)

    def set_layout(self, criteria: list[str], sets: list[tuple[str, str, QColor]], notes: dict[str, str]) -> None:
        """Rows for `criteria`, a column per (key, title, colour) set; `notes` say where each criterion measures."""
        chosen = self.current_criterion()
        self.blockSignals(True)
        self.criteria, self.set_keys = list(criteria), [key for key, _, _ in sets]
        self.clear()
        self.setRowCount(len(criteria))
        self.setColumnCount(1 + len(sets))
        header = QTableWidgetItem("Criterion")
        self.setHorizontalHeaderItem(0, header)
        for c, (_, title, color) in enumerate(sets, start=1):
            item = QTableWidgetItem(f"■ {title}")
            item.setForeground(QBrush(color))
            self.setHorizontalHeaderItem(c, item)
        self.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        for r, name in enumerate(criteria):
            item = QTableWidgetItem(f"{criterion_titles().get(name, name.upper())}  {notes.get(name, '')}".strip())
            item.setData(CRITERION_ROLE, name)
            item.setToolTip(criterion_help().get(name, name))
            font = item.font()
            font.setBold(True)
            item.setFont(font)
            self.setItem(r, 0, item)
            for c in range(1, 1 + len(sets)):
                self.setItem(r, c, QTableWidgetItem(""))
        self.blockSignals(False)
        row = self.criteria.index(chosen) if chosen in self.criteria else 0
        if self.criteria:
            self.selectRow(row)

    def set_cell(self, criterion: str, set_key: str, text: str, state: str = "done", tip: str = "") -> None:
        """`state`: "done", "running" (grey italics), "waiting" (grey) or "failed" (red)."""
        if criterion not in self.criteria or set_key not in self.set_keys:
            return
        item = self.item(self.criteria.index(criterion), 1 + self.set_keys.index(set_key))
        item.setText(text)
        item.setToolTip(tip)
        font = QFont(item.font())
        font.setItalic(state in ("running", "waiting"))
        item.setFont(font)
        if state == "failed":
            item.setForeground(QBrush(MISMATCH))
        elif state in ("running", "waiting"):
            item.setForeground(QBrush(self.palette().placeholderText()))
        else:
            item.setForeground(QBrush(self.palette().text()))

    def text(self, criterion: str, set_key: str) -> str:
        return self.item(self.criteria.index(criterion), 1 + self.set_keys.index(set_key)).text()

    def current_criterion(self) -> str | None:
        rows = self.selectionModel().selectedRows() if self.selectionModel() else []
        return self.criteria[rows[0].row()] if rows and rows[0].row() < len(self.criteria) else None

    def choose(self, criterion: str) -> None:
        if criterion in self.criteria:
            self.selectRow(self.criteria.index(criterion))

    def _on_selection(self) -> None:
        criterion = self.current_criterion()
        if criterion is not None:
            self.criterion_chosen.emit(criterion)
