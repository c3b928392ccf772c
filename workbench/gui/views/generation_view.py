"""The Generation view: search generators' latent spaces for inputs the classifier misbehaves on.

Choose the generators (those of the chosen dataset, bundled or trained in the project), the
classifier, the extent, the budget, the number of seeds and the device, and run the latent genetic
search as a long job. Seed → result pairs fill the gallery as each seed's search ends, each with its
fitness curve and generations used; at the end every input is judged by the validity proxies (when
validators exist for the dataset) and the summary table gives, per generator and extent, the seeds
kept, misbehaviours, mean generations and how many misbehaviours the proxies accept. Stop keeps
what was found, marked partial. The result is saved as a test set of the project: Coverage
measures it like any other; the gallery exports as PNG and the records as CSV with the images.
What the search does: docs/methods/generation.md#the-latent-search.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QLabel,
                               QLineEdit, QListWidget, QListWidgetItem, QPushButton, QScrollArea, QSizePolicy,
                               QSpinBox, QSplitter, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from workbench.core.errors import WorkbenchError
from workbench.core.generation import storage
from workbench.core.generation.generated import default_name, generate_from_folders, latest_generated, load_generated
from workbench.core.generation.tig import BUDGET
from workbench.core.project.store import text_column
from workbench.gui.session.jobs import IO, LONG
from workbench.gui.session.keyed_jobs import KeyedJobs
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.views.view_inputs import error_text
from workbench.gui.widgets.empty_state import keep_space_when_hidden
from workbench.gui.widgets.error_dialog import report_error
from workbench.gui.widgets.export import announce_export, save_as, save_pixmap
from workbench.gui.widgets.pair_gallery import Pair, PairGallery

SUMMARY_COLUMNS = ("Generator", "Extent", "Kept", "Found", "Mean gen.", "New IDC", "Proxy-valid", "+ oracle",
                   "Unfinished")
SUMMARY_TIPS = ("", "Mutation extent", "Seeds the classifier labels as intended, of those drawn",
                "Seeds whose search succeeded: a misbehaviour, or a new IDC combination", "Mean generations the "
                "successes took", "Distinct IDC combinations the successes reach that the test split leaves uncovered",
                "Successes both validity proxies (SelfOracle and DAIV) accept: a proxy, not a verdict of validity",
                "… of which the oracle classifier still reads the intended class", "Seeds a stop left unfinished")


def interleaved(pairs: list[Pair]) -> list[Pair]:
    """The pairs taken in turn from each generator (its first, then each one's second, …), so the first
    row of the gallery sets the generators side by side."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair.generator, []).append(pair)
    out = []
    for rank in range(max((len(g) for g in groups.values()), default=0)):
        out += [g[rank] for g in groups.values() if rank < len(g)]
    return out


def pairs_from_arrays(arrays: dict) -> list[Pair]:
    """The gallery's pairs of a generated set's arrays, with the proxies' verdicts when it has them."""
    if not arrays:
        return []
    generators = text_column(arrays["generator"])
    judged = "proxy_selforacle_invalid" in arrays
    verdicts = text_column(arrays["proxy_oracle_verdict"]) if judged else None
    fitness = np.asarray(arrays["fitness"])
    out = []
    for i in range(len(arrays["y"])):
        trace = fitness[i][np.isfinite(fitness[i])].tolist()
        out.append(Pair(generators[i], int(arrays["seed"][i]), arrays["seed_x"][i], arrays["x"][i],
                        int(arrays["y"][i]), int(arrays["predicted"][i]), int(arrays["generations"][i]),
                        bool(arrays["found"][i]), bool(arrays["finished"][i]), trace,
                        {"selforacle": not bool(arrays["proxy_selforacle_invalid"][i]),
                         "daiv": not bool(arrays["proxy_daiv_invalid"][i]), "oracle": verdicts[i]}
                        if judged else None))
    return out


class GenerationView(QWidget):
    remembered = ("extent_box", "objective_box", "m_box", "budget_box", "seeds_box", "rng_box", "proxies_box",
                  "found_only_box", "zoom_box")
    #: a generated set to measure in the Coverage view (its test-set name)
    open_in_coverage = Signal(str)
    #: a generated set to label for validity (its test-set name)
    open_in_labelling = Signal(str)
    #: test sets to compare in the Compare view
    open_in_compare = Signal(list)

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("generationView")
        self.session, self.selection = session, selection
        self.jobs = KeyedJobs(session.runner, self)
        self.result = None  # the last finished (or stopped) run's GenerationResult
        self.live: list[Pair] = []  # pairs of the running search, as they come
        self.class_names: list[str] = []  # of the dataset the shown pairs come from
        self.judging = True  # whether the shown search asked for the validity proxies

        self.dataset_box = QComboBox()
        self.dataset_box.currentIndexChanged.connect(lambda _: self._fill_generators())
        self.generator_list = QListWidget()
        self.generator_list.setObjectName("generationGenerators")
        self.generator_list.setMaximumHeight(130)
        self.model_box = QComboBox()
        self.extent_box = QComboBox()
        for text, value in (("high (range / 1000)", "high"), ("low (range / 10 000)", "low")):
            self.extent_box.addItem(text, value)
        self.objective_box = QComboBox()
        for text, value, tip in (
                ("misbehaviour (the benchmark's)", "misbehaviour", "Stop at the first misclassified input"),
                ("new IDC combination", "idc", "Stop at the first input in an IDC combination of the selected layer "
                                              "that the test split leaves uncovered"),
                ("both", "both", "A misclassified input in an uncovered IDC combination")):
            self.objective_box.addItem(text, value)
            self.objective_box.setItemData(self.objective_box.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.m_box = QSpinBox()
        self.m_box.setRange(1, 12)
        self.m_box.setValue(6)
        self.m_box.setToolTip("IDC's m for the IDC objectives: the selected layer's most relevant neurons")
        self.objective_box.currentIndexChanged.connect(
            lambda _: self.m_box.setEnabled(self.objective_box.currentData() != "misbehaviour"))
        self.m_box.setEnabled(False)
        self.budget_box = QSpinBox()
        self.budget_box.setRange(1, 100_000)
        self.budget_box.setValue(BUDGET)
        self.budget_box.setSuffix(" generations")
        self.seeds_box = QSpinBox()
        self.seeds_box.setRange(1, 100_000)
        self.seeds_box.setValue(20)
        self.rng_box = QSpinBox()
        self.rng_box.setRange(0, 2 ** 31 - 1)
        self.device_box = QComboBox()
        self.proxies_box = QCheckBox("Judge with the validity proxies")
        self.proxies_box.setChecked(True)
        self.proxies_box.setToolTip("SelfOracle, DAIV and an oracle classifier: automated proxies of validity, "
                                    "not verdicts (the dataset's bundled validators)")
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("generated-<model>-<extent>")
        self.run_button = QPushButton("Generate")
        self.run_button.setObjectName("generateButton")
        self.run_button.clicked.connect(self.toggle)
        self.status = keep_space_when_hidden(QLabel())
        self.status.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Dataset", self.dataset_box)
        form.addRow("Generators", self.generator_list)
        form.addRow("Classifier", self.model_box)
        form.addRow("Extent", self.extent_box)
        form.addRow("Objective", self.objective_box)
        form.addRow("IDC m", self.m_box)
        form.addRow("Budget", self.budget_box)
        form.addRow("Seeds", self.seeds_box)
        form.addRow("Random seed", self.rng_box)
        form.addRow("Device", self.device_box)
        form.addRow("", self.proxies_box)
        form.addRow("Save as", self.name_edit)
        box = QGroupBox("Latent search")
        box_layout = QVBoxLayout(box)
        box_layout.addLayout(form)
        box_layout.addWidget(self.run_button)
        box_layout.addWidget(self.status)
        box_layout.addStretch(1)
        box.setFixedWidth(340)

        self.table = QTableWidget(0, len(SUMMARY_COLUMNS))
        self.table.setObjectName("generationSummary")
        self.table.setHorizontalHeaderLabels(SUMMARY_COLUMNS)
        for column, tip in enumerate(SUMMARY_TIPS):
            self.table.horizontalHeaderItem(column).setToolTip(tip)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setMinimumHeight(60)
        self.table.setMaximumHeight(200)
        self.table.setToolTip("Proxy-valid: accepted by both SelfOracle and DAIV, automated proxies of validity "
                              "(not verdicts); + oracle kept label: and the oracle classifier still reads the "
                              "intended class")
        self.found_only_box = QCheckBox("Found only")
        self.found_only_box.setToolTip("Show only the seeds whose search succeeded (a misbehaviour, or a new IDC "
                                       "combination under an IDC objective)")
        self.found_only_box.toggled.connect(lambda _: self._show_gallery())
        self.gallery_status = QLabel()
        self.gallery_status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens
        self.zoom_box = QSpinBox()
        self.zoom_box.setRange(1, 8)
        self.zoom_box.setValue(2)
        self.zoom_box.setPrefix("zoom ")
        self.zoom_box.setSuffix("×")
        self.zoom_box.setToolTip("Screen pixels per image pixel (nearest neighbour)")
        self.export_png_button = QPushButton("Export PNG…")
        self.export_png_button.setToolTip("Save the gallery as shown as a PNG image")
        self.export_png_button.clicked.connect(self.export_gallery)
        self.export_csv_button = QPushButton("Export CSV…")
        self.export_csv_button.setToolTip("Write the per-seed records (the benchmark's CSV columns and the proxies') "
                                          "and every input as a PNG file")
        self.export_csv_button.clicked.connect(self.export_records)
        self.coverage_button = QPushButton("Measure in Coverage")
        self.coverage_button.setToolTip("Open the Coverage view with the generated set among its test sets")
        self.coverage_button.clicked.connect(lambda: self.result and self.result.saved
                                             and self.open_in_coverage.emit(self.result.name))
        self.label_button = QPushButton("Label…")
        self.label_button.setToolTip("Judge the generated inputs for validity in the Labelling view")
        self.label_button.clicked.connect(lambda: self.result and self.result.saved
                                          and self.open_in_labelling.emit(self.result.name))
        self.compare_button = QPushButton("Compare…")
        self.compare_button.setToolTip("Compare the generated set with the test split in the Compare view")
        self.compare_button.clicked.connect(lambda: self.result and self.result.saved
                                            and self.open_in_compare.emit(
                                                [f"{self.result.dataset}:test"] * bool(self.result.dataset)
                                                + [self.result.name]))
        for button in (self.export_png_button, self.export_csv_button, self.coverage_button, self.label_button,
                       self.compare_button):
            button.setEnabled(False)
        tools = QHBoxLayout()
        tools.addWidget(self.found_only_box)
        tools.addWidget(self.gallery_status, 1)
        tools.addWidget(self.zoom_box)
        tools.addWidget(self.coverage_button)
        tools.addWidget(self.label_button)
        tools.addWidget(self.compare_button)
        tools.addWidget(self.export_csv_button)
        tools.addWidget(self.export_png_button)
        self.gallery = PairGallery()
        self.gallery.setObjectName("generationGallery")
        self.zoom_box.valueChanged.connect(self.gallery.set_zoom)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.gallery)
        lower = QWidget()
        lower_layout = QVBoxLayout(lower)
        lower_layout.setContentsMargins(0, 0, 0, 0)
        lower_layout.addLayout(tools)
        lower_layout.addWidget(scroll, 1)
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.table)
        right.addWidget(lower)
        right.setStretchFactor(1, 4)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(box)
        layout.addWidget(right, 1)

        # a save anywhere changes the project: a hidden view fills its choices again when it is shown
        session.project_changed.connect(lambda: self.isVisible() and self._fill_choices())
        session.ready.connect(self._fill_devices)
        selection.changed.connect(lambda what: what in ("dataset", "model") and self.isVisible()
                                  and self._fill_choices())
        self._fill_choices()
        self._fill_devices()

    # --- the last saved set -------------------------------------------------------------------------

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._fill_choices()  # what was trained or added while the view was hidden
        if self.result is None and not self.jobs.running("generate"):
            self.show_latest()

    def show_latest(self) -> None:
        """Show the generated set the project saved last (a reopened project shows where it stopped)."""
        name = latest_generated(self.session.project)
        if name is None or self.jobs.running("read", name):
            return
        self.status.setText(f"Reading {name}…")
        job = self.jobs.run(("read", name), f"Read generated set {name}", load_generated, self.session.project, name,
                            uses_device=False, lane=IO, view="generation", report_errors=False,
                            then=lambda result: self.result is None and self._run_id() is None
                            and self._show_stored(result))
        if job is not None:
            job.failed.connect(lambda exc: self.status.setText(f"The set saved last cannot be read: "
                                                               f"{error_text(exc)}"))

    def _show_stored(self, result) -> None:
        spec = result.dataset if result.dataset in self.session.project.datasets else self.dataset_box.currentData()
        if spec is not None and spec not in self.session.datasets:  # its class names label the pairs
            self.session.load_dataset(spec, then=lambda _: self.result is None and self._show_stored(result))
            return
        data = self.session.datasets.get(spec) if spec else None
        self.class_names = list(data.class_names) if data is not None else []
        self.judging = any(k.startswith("proxy_") for k in result.arrays)
        self._on_finished(result)
        self.status.setText(f"The set saved last: {result.name!r}" + (" (stopped: partial)" if result.partial else "")
                            + ". Generate makes a new one.")

    # --- choices -----------------------------------------------------------------------------------

    def _fill_choices(self) -> None:
        current = self.dataset_box.currentData() or self.selection.dataset
        self.dataset_box.blockSignals(True)
        self.dataset_box.clear()
        for spec in self.session.project.datasets:
            self.dataset_box.addItem(self.session.dataset_title(spec), spec)
        position = self.dataset_box.findData(current)
        self.dataset_box.setCurrentIndex(max(0, position))
        self.dataset_box.blockSignals(False)
        model = self.model_box.currentData() or self.selection.model
        self.model_box.clear()
        for entry in self.session.project.models:
            self.model_box.addItem(entry["name"], entry["name"])
        position = self.model_box.findData(model)
        self.model_box.setCurrentIndex(max(0, position))
        self._fill_generators()

    def _fill_generators(self) -> None:
        spec = self.dataset_box.currentData()
        checked = {self.generator_list.item(i).data(Qt.ItemDataRole.UserRole)
                   for i in range(self.generator_list.count())
                   if self.generator_list.item(i).checkState() == Qt.CheckState.Checked}
        self.generator_list.clear()
        entries = [e for e in storage.listed_generators(self.session.project.folder / "generators")
                   if "problem" not in e and e.get("dataset") == spec]
        for entry in entries:
            item = QListWidgetItem(f"{entry['name']} ({entry.get('kind')})")
            item.setData(Qt.ItemDataRole.UserRole, entry["path"])
            item.setToolTip(entry["path"])
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            keep = entry["path"] in checked or (not checked and entry.get("kind") in ("vae", "gan"))
            item.setCheckState(Qt.CheckState.Checked if keep else Qt.CheckState.Unchecked)
            item.setData(Qt.ItemDataRole.UserRole + 1, entry["name"])
            self.generator_list.addItem(item)
        if not entries:
            self.status.setText("No generator is trained on this dataset: train one in the Generators view.")

    def _fill_devices(self) -> None:
        current = self.device_box.currentData()
        self.device_box.clear()
        self.device_box.addItem("auto (a GPU when present)", "auto")
        self.device_box.addItem("CPU", "cpu")
        if "cuda" in (self.session.device or "").lower():
            self.device_box.addItem("CUDA", "cuda")
        self.device_box.setCurrentIndex(max(0, self.device_box.findData(current)))

    def chosen_generators(self) -> list[tuple[str, str]]:
        """(name, folder) of the checked generators."""
        out = []
        for i in range(self.generator_list.count()):
            item = self.generator_list.item(i)
            if item.checkState() == Qt.CheckState.Checked:
                out.append((item.data(Qt.ItemDataRole.UserRole + 1), item.data(Qt.ItemDataRole.UserRole)))
        return out

    # --- running -----------------------------------------------------------------------------------

    def _run_id(self) -> int | None:
        """The record id of the search that runs (or is stopping), None when none does."""
        job = self.jobs.jobs.get("generate")
        return job.record.id if job is not None and job.record.active else None

    def _current_id(self) -> int | None:
        """The record id of the view's latest search, running or just ended (its end signals still come)."""
        job = self.jobs.jobs.get("generate")
        return job.record.id if job is not None else None

    def toggle(self) -> None:
        if self._run_id() is not None:
            self.jobs.cancel("generate")
            self.run_button.setEnabled(False)  # until the stopped search has saved what it found
            self.run_button.setText("Stopping…")
            self.status.setText("Stopping; what was found so far is kept…")
            return
        spec, model_name, generators = self.dataset_box.currentData(), self.model_box.currentData(), \
            self.chosen_generators()
        problem = ("The project has no dataset." if spec is None else "The project has no classifier to test."
                   if model_name is None else "Check at least one generator." if not generators else "")
        if problem:
            report_error(self, WorkbenchError(problem, "Add one in the Project menu, or train a generator in the "
                                                       "Generators view."), title="Cannot generate")
            return
        data = self.session.datasets.get(spec)
        if data is None:
            self.status.setText(f"Loading {self.session.dataset_title(spec)}…")
            self.session.load_dataset(spec, then=lambda _: self.toggle())
            return
        bundle = self.session.models.get(model_name)
        if bundle is None:
            self.status.setText(f"Loading {model_name}…")
            self.session.load_model(model_name, then=lambda _: self.toggle())
            return
        extent = self.extent_box.currentData()
        name = self.name_edit.text().strip() or default_name(model_name, extent, self.objective_box.currentData())
        seeds, budget, rng = self.seeds_box.value(), self.budget_box.value(), self.rng_box.value()
        self.live, self.result = [], None
        self.gallery.unjudged = "proxies: judged at the end" if self.proxies_box.isChecked() else "proxies: off"
        self.gallery.clear()
        self.table.setRowCount(0)
        for button in (self.export_png_button, self.export_csv_button, self.coverage_button, self.label_button,
                       self.compare_button):
            button.setEnabled(False)
        self.status.setText(f"Searching {len(generators)} generator(s) from {seeds} seeds each…")
        self.run_button.setText("Stop")
        self.class_names = list(data.class_names)
        job = self.jobs.run(
            "generate", f"Generate tests for {model_name} ({', '.join(n for n, _ in generators)}, {extent})",
            generate_from_folders, generators, bundle.model, data, seeds, extent, budget, rng,
            self.proxies_box.isChecked(), "", name, lane=LONG, view="generation", group="generate",
            project=self.session.project,
            device=self.device_box.currentData() or "auto", report_errors=False,
            command=f"the Generation view: {len(generators)} generators, {seeds} seeds, {extent}, budget {budget}",
            objective=self.objective_box.currentData(), layer=self.selection.layer, m=self.m_box.value())
        self.judging = self.proxies_box.isChecked()
        mine = (lambda id=job.record.id: self._current_id() == id)  # a stale search's signals leave the view alone
        # (a disabled button means a stop was asked: the status says "Stopping" until the search has ended)
        job.partial.connect(lambda result: mine() and self._on_seed(result))
        job.progress.connect(lambda done, total, message: mine() and self.run_button.isEnabled() and
                             self.status.setText(message))
        job.finished.connect(lambda result: mine() and self._on_finished(result))
        job.failed.connect(lambda exc: mine() and self._on_failed(exc))
        job.cancelled.connect(lambda: mine() and self._on_cancelled())

    def _on_seed(self, result) -> None:
        """A seed's search ended: its pair joins the gallery."""
        pair = Pair(result.generator, result.seed, result.seed_image, result.best_image, result.label,
                    result.predicted, result.generations, result.found, result.finished, list(result.fitness))
        self.live.append(pair)
        if pair.found or not self.found_only_box.isChecked():
            self.gallery.add(pair)
        found = sum(p.found for p in self.live)
        self.gallery_status.setText(f"{len(self.live)} seeds searched so far, {found} found")

    def _ready_to_run(self) -> None:
        self.run_button.setText("Generate")
        self.run_button.setEnabled(True)

    def _on_finished(self, result) -> None:
        self._ready_to_run()
        self.result = result
        rows = result.summary()
        self._fill_table(rows)
        self._show_gallery()
        found, wrong = sum(r["found"] for r in rows), sum(r["misbehaviours"] for r in rows)
        where = f"saved as test set {result.name!r}" if result.saved else "nothing to save"
        self.status.setText(("Stopped: partial results, " if result.partial else "Finished: ")
                            + f"{found} successes ({wrong} misbehaviours) from {sum(r['searched'] for r in rows)} "
                              f"searched seeds; {where}."
                            + (f" Not searched: {', '.join(result.not_run)}." if result.not_run else ""))
        has = bool(result.arrays)
        self.export_png_button.setEnabled(has)
        self.export_csv_button.setEnabled(has)
        self.coverage_button.setEnabled(result.saved)
        self.label_button.setEnabled(result.saved)
        self.compare_button.setEnabled(result.saved)

    def _on_failed(self, exc) -> None:
        self._ready_to_run()
        self.status.setText(f"The search failed: {error_text(exc)}")

    def _on_cancelled(self) -> None:
        self._ready_to_run()
        self.status.setText("Cancelled before any seed was searched; nothing was saved.")

    def _fill_table(self, rows: list[dict]) -> None:
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            mean = row["mean_generations"]
            cells = [row["generator"], row["extent"], f"{row.get('kept', row['searched'])} / {row.get('seeds', '?')}",
                     f"{row['found']} of {row['searched']}", "—" if mean is None else f"{mean:.1f}",
                     str(row.get("new_combinations", "—")),
                     str(row.get("proxy_both_valid", "—")), str(row.get("proxy_valid_preserved", "—")),
                     str(row["unfinished"])]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c >= 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(r, c, item)
        self.table.resizeColumnsToContents()
        rows = sum(self.table.rowHeight(r) for r in range(len(rows)))  # as tall as its rows, no taller
        self.table.setMaximumHeight(self.table.horizontalHeader().height() + rows + 2 * self.table.frameWidth() + 18)

    def _show_gallery(self) -> None:
        pairs = interleaved(pairs_from_arrays(self.result.arrays)) if self.result is not None else list(self.live)
        self.gallery.unjudged = ("proxies: off" if not self.judging else "proxies: judged at the end"
                                 if self.result is None else "proxies: none (no validators)")
        if self.found_only_box.isChecked():
            pairs = [p for p in pairs if p.found]
        self.gallery.set_pairs(pairs, self.class_names)
        if self.result is not None:
            self.gallery_status.setText(f"{len(pairs)} pairs: seed → best input found")

    # --- exports -----------------------------------------------------------------------------------

    def export_gallery(self) -> None:
        save_as(self, "Export the gallery", "generation-gallery.png", "PNG (*.png)",
                lambda path: save_pixmap(self.gallery.picture(), path))

    def export_records(self) -> None:
        """records.csv and one PNG per input, into a new folder named after the set inside the folder chosen."""
        from pathlib import Path

        from workbench.core.generation.generated import export_generated

        if self.result is None or not self.result.arrays:
            return
        folder = QFileDialog.getExistingDirectory(self, "Export the records (a folder named after the set is made "
                                                        "inside the one chosen)")
        if not folder:
            return
        try:
            written = export_generated(self.result.testset(), Path(folder) / self.result.name)
        except WorkbenchError as exc:  # export_generated turns a failed write into one
            report_error(self, exc, title="Export failed")
            return
        announce_export(written["csv"])
