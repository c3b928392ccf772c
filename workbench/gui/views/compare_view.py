"""The Compare view: two or more test sets side by side, what each adds, and which gaps hold up.

Tick the sets to compare (any kind: splits, attack pools, fuzzed sets, selections, generated sets,
human-validated subsets; the project panel's *Compare* adds one), choose the model, IDC's layer and
m, and compare. The comparison runs as a long job (core `compare_testsets`); each set's profile —
covered items, predictions, FOL, uncertainty, novelty — is stored in the project, so comparing again
reads it back. The *Figures* tab has one column per set: size, misbehaviours, every criterion's
coverage, accuracy, FOL, DeepGini, novelty, validity and the coverage of the valid inputs, each with
its bootstrap interval; a figure whose difference from the first set the intervals do not support is
shown in grey. *Plots* has coverage bars with their intervals, overlaid FOL histograms, coverage
growth and the class distribution. *What each set adds* gives the items only one set covers, the
exact overlaps of all the sets (an UpSet plot's bars), the inputs that reach what no other set
reaches, and opens the Coverage view's matrices with one set against another. *Differences* lists
every pair and figure with its interval and verdict. The report exports as self-contained HTML,
CSV or JSON, and set algebra saves unions, intersections, differences and "the inputs that add new
combinations" as new test sets. See docs/methods/comparison.md.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (QComboBox, QFileDialog, QFormLayout, QGridLayout, QGroupBox, QHBoxLayout, QLabel,
                               QLineEdit, QListWidget, QListWidgetItem, QPushButton, QSpinBox, QTableWidget,
                               QTableWidgetItem, QTabWidget, QVBoxLayout, QWidget)

from workbench.core.comparison.report import (COLOURS, DIFFERENCE_COLUMNS, difference_rows, table_rows, write_csv,
                                              write_html, write_json)
from workbench.core.comparison.report import verdict as verdict_text
from workbench.gui.plotting.plot_style import set_tick_texts, show_grid
from workbench.gui.session.jobs import IO, LONG
from workbench.gui.session.keyed_jobs import KeyedJobs
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.views.view_inputs import error_text
from workbench.gui.widgets.empty_state import MessageOrContent
from workbench.gui.widgets.export import announce_export
from workbench.gui.widgets.thumbnail_grid import ThumbnailGrid

NAME_ROLE = Qt.ItemDataRole.UserRole + 1
OPERATIONS = (("union", "union (A ∪ B ∪ …)"), ("intersection", "intersection (A ∩ B ∩ …)"),
              ("difference", "difference (A − B − …)"), ("adds-new", "inputs of A that add new IDC combinations"))


def _plot(title: str, left: str, bottom: str, legend: bool = True) -> pg.PlotWidget:
    widget = pg.PlotWidget()
    widget.setBackground("w")
    item = widget.getPlotItem()
    item.setTitle(title, size="9pt")
    item.setLabel("left", left)
    item.setLabel("bottom", bottom)
    show_grid(item, y=True)
    if legend:
        item.addLegend(offset=(-5, 5), labelTextSize="8pt")
    return widget


class CompareView(QWidget):
    remembered = ("m_box", "resamples_box", "seed_box")
    remembered_values = {"chosen": list}
    #: a test set to measure in the Coverage view
    open_in_coverage = Signal(str)
    #: (A, B): show the Coverage view's IDC and KMNC matrices of A against B
    show_against = Signal(str, str)

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("compareView")
        self.session, self.selection = session, selection
        self.jobs = KeyedJobs(session.runner, self)
        self.comparison = None
        self.chosen: list[str] = []  # the sets ticked, remembered with the project

        # --- what to compare ---------------------------------------------------------------------------
        self.set_list = QListWidget()
        self.set_list.setObjectName("compareSets")
        self.set_list.itemChanged.connect(self._ticked)
        self.model_box = QComboBox()
        self.model_box.currentTextChanged.connect(lambda _: self._fill_layers())
        self.layer_box = QComboBox()
        self.layer_box.setToolTip("IDC's layer (the selected layer by default)")
        self.m_box = QSpinBox()
        self.m_box.setRange(1, 12)
        self.m_box.setValue(6)
        self.resamples_box = QSpinBox()
        self.resamples_box.setRange(100, 20_000)
        self.resamples_box.setSingleStep(100)
        self.resamples_box.setValue(1000)
        self.resamples_box.setToolTip("Bootstrap and size-matched resamples behind every interval")
        self.seed_box = QSpinBox()
        self.seed_box.setRange(0, 2 ** 31 - 1)
        self.compare_button = QPushButton("Compare")
        self.compare_button.setObjectName("compareButton")
        self.compare_button.clicked.connect(self.compare)
        self.status = QLabel("Tick two or more test sets.")
        self.status.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Model", self.model_box)
        form.addRow("IDC layer", self.layer_box)
        form.addRow("IDC m", self.m_box)
        form.addRow("Resamples", self.resamples_box)
        form.addRow("Seed", self.seed_box)
        box = QGroupBox("Test sets")
        box_layout = QVBoxLayout(box)
        box_layout.addWidget(self.set_list, 1)
        box_layout.addLayout(form)
        box_layout.addWidget(self.compare_button)
        box_layout.addWidget(self.status)
        self.export_buttons = {}
        exports = QGroupBox("Report")
        row = QHBoxLayout(exports)
        for kind in ("html", "csv", "json"):
            button = QPushButton(f"{kind.upper()}…")
            button.setToolTip({"html": "A self-contained HTML report: tables, plots, settings and provenance",
                               "csv": "Every figure of every set, and every difference", "json": "Everything"}[kind])
            button.clicked.connect(lambda _=False, k=kind: self.export(k))
            button.setEnabled(False)
            row.addWidget(button)
            self.export_buttons[kind] = button
        algebra = QGroupBox("Set algebra")
        grid = QGridLayout(algebra)
        self.operation_box = QComboBox()
        for value, text in OPERATIONS:
            self.operation_box.addItem(text, value)
        self.algebra_name = QLineEdit()
        self.algebra_name.setPlaceholderText("name of the new test set")
        self.algebra_button = QPushButton("Save as test set")
        self.algebra_button.clicked.connect(self.save_algebra)
        grid.addWidget(self.operation_box, 0, 0, 1, 2)
        grid.addWidget(self.algebra_name, 1, 0)
        grid.addWidget(self.algebra_button, 1, 1)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(box, 1)
        left_layout.addWidget(exports)
        left_layout.addWidget(algebra)
        left.setFixedWidth(320)

        # --- the comparison ----------------------------------------------------------------------------
        self.table = QTableWidget()
        self.table.setObjectName("compareTable")
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.coverage_plot = _plot("Coverage (bars: 95 % bootstrap interval)", "coverage (%)", "criterion")
        self.fol_plot = _plot("FOL∞ of the inputs", "density", "FOL∞")
        self.growth_plot = _plot("Coverage growth", "coverage (%)", "inputs (log)")
        self.growth_plot.getPlotItem().setLogMode(x=True)
        self.class_plot = _plot("Class distribution (colours as in the other plots)", "class",
                                "share of the inputs (%)", legend=False)
        self.class_plot.getPlotItem().invertY(True)
        self.growth_criterion = QComboBox()
        self.growth_criterion.currentIndexChanged.connect(lambda _: self._draw_growth())
        plots = QWidget()
        plots_layout = QGridLayout(plots)
        plots_layout.addWidget(self.coverage_plot, 0, 0)
        plots_layout.addWidget(self.fol_plot, 0, 1)
        growth = QWidget()
        growth_layout = QVBoxLayout(growth)
        growth_layout.setContentsMargins(0, 0, 0, 0)
        growth_layout.addWidget(self.growth_criterion)
        growth_layout.addWidget(self.growth_plot, 1)
        plots_layout.addWidget(growth, 1, 0)
        plots_layout.addWidget(self.class_plot, 1, 1)
        self.adds_criterion = QComboBox()
        self.adds_criterion.currentIndexChanged.connect(lambda _: self._show_adds())
        self.adds_set = QComboBox()
        self.adds_set.currentIndexChanged.connect(lambda _: self._show_unique_inputs())
        self.only_label = QLabel()
        self.only_label.setWordWrap(True)
        self.membership_plot = _plot("Items covered by exactly these sets", "", "items", legend=False)
        self.membership_plot.getPlotItem().invertY(True)
        self.unique_grid = ThumbnailGrid(image_size=56)
        self.unique_grid.setObjectName("uniqueInputs")
        self.unique_label = QLabel()
        adds = QWidget()
        adds_layout = QVBoxLayout(adds)
        choose = QHBoxLayout()
        choose.addWidget(QLabel("Criterion"))
        choose.addWidget(self.adds_criterion)
        choose.addStretch(1)
        adds_layout.addLayout(choose)
        adds_layout.addWidget(self.only_label)
        adds_layout.addWidget(self.membership_plot, 1)
        pick = QHBoxLayout()
        pick.addWidget(QLabel("Inputs that reach what no other set reaches, of"))
        pick.addWidget(self.adds_set)
        pick.addWidget(self.unique_label, 1)
        self.against_box = QComboBox()
        self.against_button = QPushButton("Show in the matrices")
        self.against_button.setToolTip("Open the Coverage view's IDC and KMNC matrices with this set against the "
                                       "chosen one: the cells only one of them covers, and those both cover")
        self.against_button.clicked.connect(lambda: self.show_against.emit(self.adds_set.currentText(),
                                                                           self.against_box.currentText()))
        pick.addWidget(QLabel("against"))
        pick.addWidget(self.against_box)
        pick.addWidget(self.against_button)
        adds_layout.addLayout(pick)
        adds_layout.addWidget(self.unique_grid, 1)
        self.differences = QTableWidget(0, len(DIFFERENCE_COLUMNS))
        self.differences.setObjectName("compareDifferences")
        self.differences.setHorizontalHeaderLabels([c[0].upper() + c[1:] for c in DIFFERENCE_COLUMNS])
        self.differences.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.differences.setSortingEnabled(True)
        self.differences.horizontalHeader().setStretchLastSection(True)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("compareTabs")
        self.tabs.addTab(self.table, "Figures")
        self.tabs.addTab(plots, "Plots")
        self.tabs.addTab(adds, "What each set adds")
        self.tabs.addTab(self.differences, "Differences")
        self.body = MessageOrContent(self.tabs)
        self.body.show_message("Nothing compared yet", "Tick two or more test sets on the left — the test split, "
                               "an attack pool, a generated set, a human-validated subset — and press Compare.")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(left)
        layout.addWidget(self.body, 1)

        session.project_changed.connect(lambda: self.isVisible() and self._fill())
        session.model_added.connect(lambda *_: self.isVisible() and self._fill())
        self._fill()

    # --- choices ----------------------------------------------------------------------------------------

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self.chosen:  # a first look: sets that mean something together, chosen from what is there now
            self.chosen = self._default_sets(self.session.testset_infos())
        self._fill()
        if self.comparison is None and len(self.chosen) >= 2 and not self.jobs.running("compare"):
            self.compare()  # stored profiles make this quick: the view shows where it was left

    def _fill(self) -> None:
        project = self.session.project
        infos = self.session.testset_infos()  # listed once per version of the settings, not per show
        self.set_list.blockSignals(True)
        self.set_list.clear()
        for info in infos:
            size = f" — {info.size:,}" if info.size is not None else ""
            item = QListWidgetItem(f"{info.name}{size}")
            item.setToolTip(info.source.describe())
            item.setData(NAME_ROLE, info.name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if info.name in self.chosen else Qt.CheckState.Unchecked)
            self.set_list.addItem(item)
        self.set_list.blockSignals(False)
        current = self.model_box.currentText() or self.selection.model
        self.model_box.clear()
        for entry in project.models:
            self.model_box.addItem(entry["name"])
        if current:
            self.model_box.setCurrentText(current)
        self._fill_layers()

    def _fill_layers(self) -> None:
        bundle = self.session.models.get(self.model_box.currentText())
        current = self.layer_box.currentData() or self.selection.layer
        self.layer_box.clear()
        self.layer_box.addItem("default (last before the output)", None)
        if bundle is not None:
            for info in bundle.catalogue:
                if info.type in ("Conv2d", "Linear"):
                    self.layer_box.addItem(info.name, info.name)
        index = self.layer_box.findData(current)
        if index >= 0:
            self.layer_box.setCurrentIndex(index)

    @staticmethod
    def _default_sets(infos) -> list[str]:
        """The test split, the newest generated set and its valid inputs (or the split's misclassified
        inputs): a first comparison that means something."""
        names = [i.name for i in infos]
        split = next((i.name for i in infos if i.source.kind == "split" and i.source.split == "test"), None)
        generated = sorted((i for i in infos if i.source.role == "generated"),
                           key=lambda i: str(i.extra.get("created", "")), reverse=True)
        chosen = [n for n in (split, generated[0].name if generated else None) if n]
        if generated and f"{generated[0].name}[valid]" in names:
            chosen.append(f"{generated[0].name}[valid]")
        elif split:
            chosen.append(f"{split}[misclassified]")
        return chosen if len(chosen) >= 2 else []

    def _ticked(self, item: QListWidgetItem) -> None:
        name = item.data(NAME_ROLE)
        if item.checkState() == Qt.CheckState.Checked and name not in self.chosen:
            self.chosen.append(name)
        elif item.checkState() != Qt.CheckState.Checked and name in self.chosen:
            self.chosen.remove(name)
        self.status.setText(f"{len(self.chosen)} sets ticked." if len(self.chosen) >= 2 else
                            "Tick two or more test sets.")

    def add_sets(self, names: list[str]) -> None:
        """Add `names` to the sets compared (e.g. sent from another view) and compare."""
        for name in names:
            if name not in self.chosen:
                self.chosen.append(name)
        self._fill()
        if len(self.chosen) >= 2:
            self.compare()

    # --- comparing --------------------------------------------------------------------------------------

    def compare(self) -> None:
        if len(self.chosen) < 2:
            self.status.setText("Tick two or more test sets.")
            return
        model_name = self.model_box.currentText()
        if not model_name:
            self.status.setText("Add a model to the project first (Project → Open model file).")
            return
        bundle = self.session.models.get(model_name)
        dataset = self.session.datasets.get(self.selection.dataset) if self.selection.dataset else None
        if bundle is None:
            self.session.load_model(model_name, then=lambda _: self.compare())
            self.status.setText(f"Loading {model_name}…")
            return
        if dataset is None:
            if not self.selection.dataset:
                self.status.setText("Choose the dataset the criteria are fitted on (the tool bar's Dataset).")
                return
            self.session.load_dataset(self.selection.dataset, then=lambda _: self.compare())
            self.status.setText("Loading the dataset…")
            return
        names = list(self.chosen)
        self.status.setText(f"Comparing {len(names)} sets…")
        self.compare_button.setEnabled(False)
        job = self.jobs.run("compare", f"Compare {', '.join(names)}", _compare, names, bundle.model, dataset,
                            self.layer_box.currentData(), self.m_box.value(), self.resamples_box.value(),
                            self.seed_box.value(), lane=LONG, view="compare", group="compare",
                            project=self.session.project, report_errors=False, then=self._show)
        if job is not None:
            job.progress.connect(lambda done, total, message: self.status.setText(message))
            job.failed.connect(self._failed)
            job.cancelled.connect(lambda: self._ready("Cancelled."))

    def _ready(self, text: str) -> None:
        self.compare_button.setEnabled(True)
        self.status.setText(text)

    def _failed(self, exc) -> None:
        self._ready(f"Cannot compare: {error_text(exc)}")

    def _show(self, comparison) -> None:
        self.comparison = comparison
        reused = sum(s.profile_reused for s in comparison.sets)
        self._ready(f"Compared {len(comparison.sets)} sets" + (f" ({reused} read back from the project)"
                                                               if reused else "") + ".")
        for button in self.export_buttons.values():
            button.setEnabled(True)
        self.body.show_content()
        self._fill_table()
        self._fill_differences()
        for box, values in ((self.growth_criterion, comparison.criteria), (self.adds_criterion, comparison.criteria),
                            (self.adds_set, comparison.names()), (self.against_box, comparison.names())):
            box.blockSignals(True)
            box.clear()
            box.addItems(values)
            box.blockSignals(False)
        self._draw_plots()
        self._show_adds()

    def _fill_table(self) -> None:
        data = self.comparison.to_dict()
        header, rows = table_rows(data)
        first = data["sets"][0]["name"]
        verdicts = {(d["figure"], d["b"]): d for d in data["differences"] if d["a"] == first}
        keys = ["", "", *dict.fromkeys(k for s in data["sets"] for k in s["figures"]), ""]
        self.table.clear()
        self.table.setColumnCount(len(header) - 1)
        self.table.setRowCount(len(rows))
        self.table.setHorizontalHeaderLabels(header[1:])
        self.table.setVerticalHeaderLabels([r[0] for r in rows])
        for r, row in enumerate(rows):
            for c, text in enumerate(row[1:]):
                item = QTableWidgetItem(text.replace(" [", "\n[", 1))  # the interval under the value: narrow columns
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                verdict = verdicts.get((keys[r], header[c + 1])) if r < len(keys) else None
                if verdict is not None:
                    item.setToolTip(f"Difference from {first}: {verdict_text(verdict)}")
                    if not verdict["supported"]:
                        item.setForeground(QBrush(QColor(140, 140, 140)))
                self.table.setItem(r, c, item)
        self.table.resizeColumnsToContents()
        self.table.resizeRowsToContents()

    def _fill_differences(self) -> None:
        rows = difference_rows(self.comparison.to_dict())
        self.differences.setSortingEnabled(False)
        self.differences.setRowCount(len(rows))
        sets = DIFFERENCE_COLUMNS.index("sets")
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                item = QTableWidgetItem(str(text).replace(" − ", " −\n", 1) if c == sets else str(text))
                item.setToolTip(str(text))
                self.differences.setItem(r, c, item)
        self.differences.setSortingEnabled(True)
        self.differences.resizeColumnsToContents()  # the last column, the longest text, stretches to the edge
        self.differences.resizeRowsToContents()

    # --- plots ------------------------------------------------------------------------------------------

    def _draw_plots(self) -> None:
        c = self.comparison
        data = c.to_dict()
        sets, criteria = data["sets"], data["criteria"]
        width = 0.8 / len(sets)
        plot = self.coverage_plot.getPlotItem()
        plot.clear()
        for k, s in enumerate(sets):
            x = np.arange(len(criteria)) + (k - (len(sets) - 1) / 2) * width
            values = np.array([100 * s["figures"][key]["value"] for key in criteria])
            low = np.array([100 * s["figures"][key].get("low", s["figures"][key]["value"]) for key in criteria])
            high = np.array([100 * s["figures"][key].get("high", s["figures"][key]["value"]) for key in criteria])
            colour = COLOURS[k % len(COLOURS)]
            plot.addItem(pg.BarGraphItem(x=x, height=values, width=width, brush=colour, name=s["name"]))
            plot.addItem(pg.ErrorBarItem(x=x, y=values, bottom=np.maximum(values - low, 0),
                                         top=np.maximum(high - values, 0), beam=width / 3, pen=pg.mkPen("k")))
        plot.getAxis("bottom").setTicks([[(i, key.upper()) for i, key in enumerate(criteria)]])
        tallest = max((100 * s["figures"][key].get("high", s["figures"][key]["value"]) for s in sets
                       for key in criteria), default=100.0)
        plot.setYRange(0, max(tallest, 1.0) * (1.25 + 0.08 * len(sets)))  # room for the legend above the bars
        fol = self.fol_plot.getPlotItem()
        fol.clear()
        values = {n: p.fol[np.isfinite(p.fol)] for n, p in c.profiles.items()}
        top = max((np.quantile(v, 0.99) for v in values.values() if len(v)), default=1.0) or 1.0
        bins = np.linspace(0, top, 40)
        for k, (name, v) in enumerate(values.items()):
            density, edges = np.histogram(np.clip(v, 0, top), bins=bins, density=True)
            fol.plot(edges, density, stepMode="center", fillLevel=0, fillOutline=True,
                     brush=(*QColor(COLOURS[k % len(COLOURS)]).getRgb()[:3], 60),
                     pen=pg.mkPen(COLOURS[k % len(COLOURS)], width=1.5), name=name)
        classes = self.class_plot.getPlotItem()
        classes.clear()
        names = data["class_names"]
        for k, s in enumerate(sets):  # horizontal bars: every class name can be read
            counts = np.asarray(s["class_counts"], dtype=np.float64)
            share = 100 * counts / counts.sum() if counts.sum() else counts
            classes.addItem(pg.BarGraphItem(x0=0, y=np.arange(len(names)) + (k - (len(sets) - 1) / 2) * width,
                                            width=share, height=width, brush=COLOURS[k % len(COLOURS)],
                                            name=s["name"]))
        set_tick_texts(classes.getAxis("left"), list(enumerate(names)))
        self._draw_growth()

    def _draw_growth(self) -> None:
        if self.comparison is None:
            return
        criterion = self.growth_criterion.currentText()
        plot = self.growth_plot.getPlotItem()
        plot.clear()
        plot.setLabel("left", f"{criterion.upper()} coverage (%)")
        for k, s in enumerate(self.comparison.sets):
            curve = s.growth.get(criterion)
            if curve is None or not len(curve):
                continue
            total = s.figures[criterion].total
            plot.plot(curve[:, 0], 100 * curve[:, 1] / total, pen=pg.mkPen(COLOURS[k % len(COLOURS)], width=2),
                      name=s.name)

    # --- what each set adds -----------------------------------------------------------------------------

    def _show_adds(self) -> None:
        if self.comparison is None:
            return
        criterion = self.adds_criterion.currentText()
        overlap = self.comparison.overlaps.get(criterion)
        if overlap is None:
            return
        self.only_label.setText(f"{criterion.upper()} items only one set covers: " + ", ".join(
            f"<b>{name}</b> {count:,}" for name, count in overlap["only"].items()))
        plot = self.membership_plot.getPlotItem()
        plot.clear()
        bars = list(overlap["membership"].items())[:12]
        if bars:
            plot.addItem(pg.BarGraphItem(x0=0, y=np.arange(len(bars)), height=0.7,
                                         width=[count for _, count in bars], brush=COLOURS[0]))
            set_tick_texts(plot.getAxis("left"), [(i, " ∩ ".join(m)) for i, (m, _) in enumerate(bars)])
        self._show_unique_inputs()

    def _show_unique_inputs(self) -> None:
        c = self.comparison
        if c is None:
            return
        name, criterion = self.adds_set.currentText(), self.adds_criterion.currentText()
        summary = next((s for s in c.sets if s.name == name), None)
        testset = c.testsets.get(name)
        if summary is None or testset is None:
            return
        rows = summary.unique_inputs.get(criterion, np.zeros(0, np.int64))
        subset = testset.subset(rows, rule=f"reaches {criterion} items no other set reaches")
        self.unique_grid.thumbnails.set_split(subset, c.class_names, c.profiles[name].predictions[rows])
        self.unique_label.setText(f"{len(rows):,} inputs")

    # --- files and set algebra -------------------------------------------------------------------------

    def export(self, kind: str) -> None:
        if self.comparison is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, f"Export the comparison as {kind.upper()}",
                                              f"comparison.{kind}", f"{kind.upper()} (*.{kind})")
        if path:
            self.export_to(path, kind)

    def export_to(self, path: str, kind: str) -> None:
        job = self.jobs.run(("export", path), "Export comparison", _export, self.comparison, path, kind,
                            uses_device=False, lane=IO, view="compare", report_errors=False,
                            then=lambda _: announce_export(path))
        if job is not None:
            job.failed.connect(lambda exc: self.status.setText(f"Not exported: {error_text(exc)}"))

    def save_algebra(self) -> None:
        name = self.algebra_name.text().strip()
        operation = self.operation_box.currentData()
        if len(self.chosen) < 2:
            self.status.setText("Tick two or more test sets to combine.")
            return
        if not name:
            self.status.setText("Name the new test set first.")
            return
        if operation == "adds-new" and (self.comparison is None or self.comparison.chosen != self.chosen):
            self.status.setText("Compare the ticked sets first: the new combinations come from the comparison.")
            return
        bundle = self.session.models.get(self.model_box.currentText())
        dataset = self.session.datasets.get(self.selection.dataset) if self.selection.dataset else None
        job = self.jobs.run(("algebra", name), f"Save {name}", _save_algebra, operation, list(self.chosen), name,
                            self.comparison, bundle.model if bundle else None, dataset, lane=LONG,
                            view="compare", report_errors=False, project=self.session.project,
                            then=lambda _: self.status.setText(f"Saved {name} as a test set."))
        if job is not None:
            job.failed.connect(lambda exc: self.status.setText(f"Not saved: {error_text(exc)}"))


# --- jobs (off the UI thread) ------------------------------------------------------------------------------

def _compare(ctx, names, model, dataset, layer, m, resamples, seed, project=None):
    from workbench.core.comparison.compare import compare_testsets

    return compare_testsets(ctx, project, names, model, dataset, layer, m, resamples=resamples, seed=seed)


def _export(ctx, comparison, path, kind):
    if kind == "html":
        return write_html(comparison, path)
    return (write_csv if kind == "csv" else write_json)(comparison.to_dict(), path)


def _save_algebra(ctx, operation, names, name, comparison, model, dataset, project=None):
    """Combine the sets `names` (those compared last where they are the same; a subset such as
    NAME[misclassified] needs the model to be made again) and store the result as test set `name`."""
    from workbench.core.comparison.set_algebra import save_combination, save_new_items
    from workbench.core.labeling.labelled_sets import resolve

    if operation == "adds-new":
        return save_new_items(project, comparison, comparison.names()[0], name, "idc")
    compared = dict(zip(comparison.chosen, comparison.testsets.values())) if comparison is not None else {}
    testsets = [compared.get(n) or resolve(project, n, dataset, model=model, ctx=ctx) for n in names]
    return save_combination(project, name, operation, testsets)

