"""The project dock: a tree of the project's datasets, models, test sets, results and problems.

Results are grouped by kind (evaluations, importance, coverage, …) and each is labelled by what its
index entry records — what it is, for which model, layer and set, and when — with its artifact name
and the details in the tooltip. Double-clicking an entry opens the view that shows it; the context
menu offers what applies to it: open, export (copy its files to a folder) and delete (after a
confirmation). The tree is rebuilt from the project whenever the session says the project changed
(it is small).
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QAction, QBrush, QFont
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHeaderView,
    QMenu,
    QMessageBox,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.core.artifact_labels import created_at, describe_artifact, kind_heading, kind_order
from workbench.core.errors import WorkbenchError
from workbench.gui.plotting.colors import ERROR_TEXT
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.widgets.error_dialog import report_error
from workbench.gui.widgets.export import announce_export

MIN_WIDTH = 200  # the panel never gets narrower than this, whatever the views ask of the window
COLLAPSED_AT_FIRST = {"Coverage fits"}  # what a fitted criterion holds is read through its results


class ProjectItem(QTreeWidgetItem):
    """A tree entry that knows what it stands for (Python attributes, not item data)."""

    def __init__(self, text: str, kind: str, payload: dict | None = None):
        super().__init__([text])
        self.kind = kind  # "group", "dataset", "model", "testset", "result" or "problem"
        self.payload = payload or {}


class ProjectPanel(QWidget):
    open_requested = Signal(str, dict)  # kind, payload
    evaluate_requested = Signal(str)  # model name
    label_requested = Signal(str)  # a test set to label
    compare_requested = Signal(str)  # a test set to compare
    message = Signal(str)  # a confirmation for the status bar

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.session, self.selection = session, selection
        self.setMinimumWidth(MIN_WIDTH)
        self.tree = QTreeWidget()
        self.tree.setObjectName("projectTree")
        self.tree.setHeaderHidden(True)
        self.tree.setUniformRowHeights(True)
        self.tree.setIndentation(12)  # labels are long; the groups are one level deep
        # a long artifact name is scrolled to, never cut short
        self.tree.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.tree.header().setStretchLastSection(False)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._context_menu)
        self.tree.itemActivated.connect(self._activate)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.tree)
        self.groups: dict[str, ProjectItem] = {}
        self.export_folder = ""  # where the last export went: the next one starts there
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
        collapsed = {name for name, item in self.groups.items() if not item.isExpanded()} \
            if self.groups else set(COLLAPSED_AT_FIRST)
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

        self._add_testsets()
        self._add_results()

        if project.problems:
            problems = self._group("Problems", len(project.problems))
            for text in project.problems:
                item = ProjectItem(text, "problem", {"text": text})
                item.setToolTip(0, text)
                self._mark_problem(item)
                problems.addChild(item)
            self._mark_problem(problems)

        for name, group in self.groups.items():
            group.setExpanded(name not in collapsed or name == "Problems")
        self._mark_selected()

    def _add_testsets(self) -> None:
        """Dataset splits, then stored sets: pools, fp_test, fuzzer tests, selections, subsets."""
        project = self.session.project
        infos = self.session.testset_infos()
        stored = project.artifacts("testset")
        testsets = self._group("Test sets", len(infos))
        for info in infos:
            source, size = info.source, info.size
            dataset = next((spec for spec in project.datasets if source.dataset in self.session.dataset_names(spec)),
                           project.datasets[0] if project.datasets else "")
            name, tip = info.name, f"{info.name}: {source.describe()}"
            if source.kind == "split":
                data = self.session.datasets.get(source.dataset)
                size = len(data.splits[source.split]) if data is not None and source.split in data.splits else None
                if os.sep in source.dataset:  # a dataset the user added from a file: named by the file, not its path
                    name = f"{self.session.dataset_title(source.dataset)}:{source.split}"
                    tip = f"The {source.split} split of {source.dataset}"
            text = name + (f"  ({size:,} images)" if size is not None else "")
            if source.kind != "split":
                text += f"  — {source.role or source.kind}"
            split = source.split if source.kind == "split" else info.name
            payload = {"name": info.name, "dataset": dataset, "split": split, "source": source.describe()}
            if info.name in stored:
                payload["artifact"] = info.name
                when = created_at(stored[info.name].get("provenance", {}))
                if when is not None:
                    tip += f"\nMade {when.strftime('%Y-%m-%d %H:%M')}"
            if info.problem:
                payload["problem"] = info.problem
                tip += f"\nProblem: {info.problem}"
            item = ProjectItem(text, "testset", payload)
            item.setToolTip(0, tip)
            if info.problem:
                self._mark_problem(item)
            testsets.addChild(item)

    def _add_results(self) -> None:
        """One group per kind of result, each row labelled from its index entry, the newest first."""
        project = self.session.project
        by_kind: dict[str, list] = {}
        for name, entry in project.artifacts().items():
            if entry["kind"] == "testset":
                continue  # listed under Test sets
            label = self._label(name, entry)
            when = created_at(entry.get("provenance", {}))
            by_kind.setdefault(entry["kind"], []).append((when.timestamp() if when else 0.0, label, name, entry))
        for kind in sorted(by_kind, key=lambda k: (kind_order(k), k)):
            rows = sorted(by_kind[kind], key=lambda row: (-row[0], row[1].title))
            group = self._group(kind_heading(kind), len(rows))
            for _, label, name, entry in rows:
                item = ProjectItem(label.title, "result", {"name": name, **entry})
                tip = "\n".join(label.details)
                if "problem" in entry:
                    self._mark_problem(item)
                    tip += f"\nProblem: {entry['problem']}"
                item.setToolTip(0, tip)
                group.addChild(item)

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
        where = f"\n{spec}" if os.sep in spec else ""
        if data is not None:
            sizes = ", ".join(f"{k} {len(v):,}" for k, v in data.splits.items())
            return f"{data.card.title}\n{sizes} images, {data.num_classes} classes\n{data.card.licence}{where}"
        error = self.session.dataset_errors.get(spec)
        if error is not None:
            self._mark_problem(item)
            return f"Could not be loaded: {getattr(error, 'message', error)}\n{getattr(error, 'hint', '')}{where}"
        from workbench.core.data.registry import dataset_status

        status = next((s for s in dataset_status() if s["name"] == spec), None)
        if status is not None and not status["available"]:
            self._mark_problem(item)
            return f"Not available: {status['reason']}\nInstall it with: {status['install']}"
        return spec if os.path.exists(spec) or status else f"{spec} (not loaded yet)"

    @staticmethod
    def _mark_problem(item: ProjectItem) -> None:
        item.setForeground(0, QBrush(ERROR_TEXT))

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

    def result_item(self, name: str) -> ProjectItem | None:
        """The row of artifact `name`: a result, or a stored test set."""
        return next((item for item in self.items("result") + self.items("testset")
                     if item.payload.get("name") == name and (item.kind == "result" or "artifact" in item.payload)),
                    None)

    # --- interaction ---------------------------------------------------------------------------------

    def _activate(self, item: ProjectItem, _column: int = 0) -> None:
        if item.kind in ("dataset", "model", "result") or (item.kind == "testset" and "problem" not in item.payload):
            self.open_requested.emit(item.kind, item.payload)

    def menu_for(self, item: ProjectItem) -> QMenu | None:
        """The context menu of an entry (None for a group heading)."""
        if not isinstance(item, ProjectItem) or item.kind == "group":
            return None
        menu = QMenu(self)
        if item.kind == "dataset":
            menu.addAction("Browse images", lambda: self._activate(item))
        elif item.kind == "model":
            menu.addAction("Show model", lambda: self._activate(item))
            menu.addAction("Evaluate on the selected split",
                           lambda: self.evaluate_requested.emit(item.payload["name"]))
        elif item.kind == "testset":
            menu.addAction("Browse images", lambda: self._activate(item)).setEnabled("problem" not in item.payload)
            label = menu.addAction("Label…", lambda: self.label_requested.emit(item.payload["name"]))
            label.setToolTip("Judge its inputs for validity in the Labelling view")
            label.setEnabled("problem" not in item.payload)
            compare = menu.addAction("Compare…", lambda: self.compare_requested.emit(item.payload["name"]))
            compare.setToolTip("Add it to the sets the Compare view compares")
            compare.setEnabled("problem" not in item.payload)
        elif item.kind == "result":
            menu.addAction("Open", lambda: self._activate(item))
        elif item.kind == "problem":
            menu.addAction("Copy text", lambda: QApplication.clipboard().setText(item.payload["text"]))
        name = item.payload.get("artifact") or (item.payload["name"] if item.kind == "result" else None)
        if name is not None:
            menu.addSeparator()
            export = menu.addAction("Export…", lambda: self.export_result(name))
            export.setToolTip("Copy its file to a folder you choose")
            export.setEnabled("problem" not in item.payload)
            delete = menu.addAction("Delete…", lambda: self.confirm_delete(name))
            delete.setEnabled(not self.session.project.read_only)
        menu.setToolTipsVisible(True)
        return menu

    def menu_action(self, item: ProjectItem, text: str) -> QAction:
        """The action of `item`'s context menu whose text is `text` (tests trigger it)."""
        menu = self.menu_for(item)
        return next(a for a in menu.actions() if a.text() == text)

    def _context_menu(self, pos: QPoint) -> None:
        menu = self.menu_for(self.tree.itemAt(pos))
        if menu is not None:
            menu.exec(self.tree.viewport().mapToGlobal(pos))

    def _label(self, name: str, entry: dict):
        """The readable label of an artifact; the project's only model and dataset go unsaid."""
        project = self.session.project
        only_model = project.models[0]["name"] if len(project.models) == 1 else ""
        only_dataset = self.session.dataset_title(project.datasets[0]) if len(project.datasets) == 1 else ""
        return describe_artifact(name, entry, only_model=only_model, only_dataset=only_dataset)

    def _title(self, name: str) -> str:
        label = self._label(name, self.session.project.artifacts().get(name, {}))
        return name if label.kind == "testset" else label.title

    def export_result(self, name: str) -> list[Path]:
        """Copy the files of result `name` (a coverage result's fitted criterion with it) to a folder
        the user picks; the status bar says where they went."""
        project = self.session.project
        start = self.export_folder or str(Path.home())
        folder = QFileDialog.getExistingDirectory(self, f"Export “{self._title(name)}” to a folder", start)
        if not folder:
            return []
        try:
            existing = [p.name for p in project.artifact_files(name) if (Path(folder) / p.name).exists()]
            if existing and QMessageBox.question(
                    self, "Replace files", f"{', '.join(existing)} already exist{'s' * (len(existing) == 1)} in "
                    f"{folder}. Replace {'it' if len(existing) == 1 else 'them'}?") != QMessageBox.StandardButton.Yes:
                return []
            written = project.export_artifact(name, folder)
        except WorkbenchError as exc:
            report_error(self, exc, title="Export failed")
            return []
        self.export_folder = folder
        announce_export(*written)
        return written

    def confirm_delete(self, name: str) -> bool:
        """Delete result `name` once the user confirms; results that cannot be read without it (the
        coverage results of a fitted criterion) go with it. Returns whether it was deleted."""
        project = self.session.project
        entry = project.artifacts().get(name, {})
        label = self._label(name, entry)
        title = self._title(name)
        needing = project.needed_by(name)
        text = f"Delete the {label.noun} “{title}” from the project? Its file is removed; this cannot be undone."
        if needing:
            text += (f"\n\n{len(needing)} result{'s' * (len(needing) != 1)} cannot be read without it and "
                     f"{'are' if len(needing) != 1 else 'is'} deleted too.")
        answer = QMessageBox.question(self, f"Delete {label.noun}", text)
        if answer != QMessageBox.StandardButton.Yes:
            return False
        for other in needing:
            self.session.delete_result(other)
        self.session.delete_result(name)
        if name in project.artifacts():
            return False  # refused: the session has said why
        extra = f" and {len(needing)} result{'s' * (len(needing) != 1)} made with it" if needing else ""
        self.message.emit(f"Deleted {title}{extra}")
        return True
