"""The project dock: a tree of the project's datasets, models, test sets, results and problems.

Double-clicking an entry opens the view that shows it; the context menu offers what applies to it.
The tree is rebuilt from the project whenever the session says the project changed (it is small).
"""

from __future__ import annotations

import os

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QApplication, QMenu, QMessageBox, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from workbench.gui.selection import Selection
from workbench.gui.session import Session

PROBLEM_COLOR = QColor("#c62828")


class ProjectItem(QTreeWidgetItem):
    """A tree entry that knows what it stands for (Python attributes, not item data)."""

    def __init__(self, text: str, kind: str, payload: dict | None = None):
        super().__init__([text])
        self.kind = kind  # "group", "dataset", "model", "testset", "result" or "problem"
        self.payload = payload or {}


class ProjectPanel(QWidget):
    open_requested = Signal(str, dict)  # kind, payload
    evaluate_requested = Signal(str)  # model name

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.session, self.selection = session, selection
        self.tree = QTreeWidget()
        self.tree.setObjectName("projectTree")
        self.tree.setHeaderHidden(True)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._context_menu)
        self.tree.itemActivated.connect(self._activate)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.tree)
        self.groups: dict[str, ProjectItem] = {}
        session.project_changed.connect(self.refresh)
        session.dataset_loaded.connect(lambda _: self.refresh())
        session.dataset_failed.connect(lambda _: self.refresh())
        session.model_failed.connect(lambda _: self.refresh())
        session.ready.connect(self.refresh)
        selection.changed.connect(lambda what: what in ("model", "dataset", "split") and self._mark_selected())
        self.refresh()

    # --- building the tree ---------------------------------------------------------------------------

    def refresh(self) -> None:
        project = self.session.project
        expanded = {name for name, item in self.groups.items() if item.isExpanded()} if self.groups else None
        self.tree.clear()
        self.groups = {}

        datasets = self._group("Datasets", len(project.datasets))
        for spec in project.datasets:
            item = ProjectItem(self.session.dataset_title(spec), "dataset", {"spec": spec})
            item.setToolTip(0, self._dataset_tip(spec, item))
            datasets.addChild(item)

        models = self._group("Models", len(project.models))
        for entry in project.models:
            item = ProjectItem(entry["name"], "model", dict(entry))
            bundle = self.session.models.get(entry["name"])
            tip = entry["spec"]
            if bundle is not None and bundle.model.info.card.get("title"):
                tip = f"{bundle.model.info.card['title']}\n{bundle.model.info.source}"
            error = self.session.model_errors.get(entry["name"])
            if error is not None:
                self._mark_problem(item)
                tip += f"\nCould not be loaded: {getattr(error, 'message', error)}"
            item.setToolTip(0, tip)
            models.addChild(item)

        infos = [info for info in self.session.testset_infos() if not info.problem]
        testsets = self._group("Test sets", len(infos))
        for info in infos:  # dataset splits, then stored sets: pools, fp_test, fuzzer tests, selections, subsets
            source, size = info.source, info.size
            dataset = next((spec for spec in project.datasets if source.dataset in self.session.dataset_names(spec)),
                           project.datasets[0] if project.datasets else "")
            if source.kind == "split":
                data = self.session.datasets.get(source.dataset)
                size = len(data.splits[source.split]) if data is not None and source.split in data.splits else None
            text = info.name + (f"  ({size:,} images)" if size is not None else "")
            if source.kind != "split":
                text += f"  — {source.role or source.kind}"
            split = source.split if source.kind == "split" else info.name
            item = ProjectItem(text, "testset", {"name": info.name, "dataset": dataset, "split": split,
                                                 "source": source.describe()})
            item.setToolTip(0, f"{info.name}: {source.describe()}")
            testsets.addChild(item)

        artifacts = project.artifacts()
        results = self._group("Results", len(artifacts))
        for name, entry in artifacts.items():
            how = entry.get("provenance", {})
            text = name
            if how.get("accuracy") is not None:
                text += f"  — {how['accuracy'] * 100:.1f} %"
            item = ProjectItem(text, "result", {"name": name, **entry})
            tip = f"{entry['kind']} · {entry['file']}\ncreated {how.get('created', '?')}"
            if "problem" in entry:
                self._mark_problem(item)
                tip += f"\nProblem: {entry['problem']}"
            item.setToolTip(0, tip)
            results.addChild(item)

        if project.problems:
            problems = self._group("Problems", len(project.problems))
            for text in project.problems:
                item = ProjectItem(text, "problem", {"text": text})
                item.setToolTip(0, text)
                self._mark_problem(item)
                problems.addChild(item)
            self._mark_problem(problems)

        for name, group in self.groups.items():
            group.setExpanded(expanded is None or name in expanded or name == "Problems")
        self._mark_selected()

    def _group(self, name: str, count: int) -> ProjectItem:
        item = ProjectItem(f"{name} ({count})", "group", {"name": name})
        font = item.font(0)
        font.setBold(True)
        item.setFont(0, font)
        item.setFlags(Qt.ItemFlag.ItemIsEnabled)
        self.tree.addTopLevelItem(item)
        self.groups[name] = item
        return item

    def _dataset_tip(self, spec: str, item: ProjectItem) -> str:
        data = self.session.datasets.get(spec)
        if data is not None:
            sizes = ", ".join(f"{k} {len(v):,}" for k, v in data.splits.items())
            return f"{data.card.title}\n{sizes} images, {data.num_classes} classes\n{data.card.licence}"
        error = self.session.dataset_errors.get(spec)
        if error is not None:
            self._mark_problem(item)
            return f"Could not be loaded: {getattr(error, 'message', error)}\n{getattr(error, 'hint', '')}"
        from workbench.core.dataset_registry import dataset_status

        status = next((s for s in dataset_status() if s["name"] == spec), None)
        if status is not None and not status["available"]:
            self._mark_problem(item)
            return f"Not available: {status['reason']}\nInstall it with: {status['install']}"
        return spec if os.path.exists(spec) or status else f"{spec} (not loaded yet)"

    @staticmethod
    def _mark_problem(item: ProjectItem) -> None:
        item.setForeground(0, QBrush(PROBLEM_COLOR))

    def _mark_selected(self) -> None:
        """The selected model and dataset are shown in bold."""
        chosen = {("dataset", self.selection.dataset), ("model", self.selection.model)}
        for group in self.groups.values():
            for i in range(group.childCount()):
                item = group.child(i)
                key = (item.kind, item.payload.get("spec") if item.kind == "dataset" else item.payload.get("name"))
                font = QFont(item.font(0))
                font.setBold(key in chosen)
                item.setFont(0, font)

    def items(self, kind: str) -> list[ProjectItem]:
        return [group.child(i) for group in self.groups.values() for i in range(group.childCount())
                if group.child(i).kind == kind]

    # --- interaction ---------------------------------------------------------------------------------

    def _activate(self, item: ProjectItem, _column: int = 0) -> None:
        if item.kind in ("dataset", "model", "testset", "result"):
            self.open_requested.emit(item.kind, item.payload)

    def _context_menu(self, pos: QPoint) -> None:
        item = self.tree.itemAt(pos)
        if not isinstance(item, ProjectItem) or item.kind == "group":
            return
        menu = QMenu(self)
        if item.kind == "dataset":
            menu.addAction("Browse images", lambda: self._activate(item))
        elif item.kind == "model":
            menu.addAction("Show model", lambda: self._activate(item))
            menu.addAction("Evaluate on the selected split",
                           lambda: self.evaluate_requested.emit(item.payload["name"]))
        elif item.kind == "testset":
            menu.addAction("Browse images", lambda: self._activate(item))
        elif item.kind == "result":
            menu.addAction("Open", lambda: self._activate(item))
            delete = menu.addAction("Delete…", lambda: self.confirm_delete(item.payload["name"]))
            delete.setEnabled(not self.session.project.read_only)
        elif item.kind == "problem":
            menu.addAction("Copy text", lambda: QApplication.clipboard().setText(item.payload["text"]))
        menu.exec(self.tree.viewport().mapToGlobal(pos))

    def confirm_delete(self, name: str) -> None:
        answer = QMessageBox.question(self, "Delete result",
                                      f"Delete “{name}” from the project? Its file is removed; this cannot be undone.")
        if answer == QMessageBox.StandardButton.Yes:
            self.session.delete_result(name)
