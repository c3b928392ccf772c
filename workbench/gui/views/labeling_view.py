"""The Labelling view: people judge generated inputs for validity, fast, from the keyboard.

Pick a test set (a generated set offers the inputs the model misbehaves on), enter your name and
start. One image fills the canvas, enlarged without blur; the answers are the dataset's classes, its
"not a …" option and, where the classes do not cover the domain, "a different …". Keys `0`–`9`
answer a class in dataset order, `X` invalid, `D` different, `S` / `Ctrl+Space` skip (the image
comes back at the end), `Ctrl+Z` / `Ctrl+Shift+Z` undo and redo, `←` / `→` move without answering,
`N` the next unlabelled image; the key map is shown beside the image and can be changed (JSON).
Every answer is committed to the project's label store as it is given, so nothing is lost if the
app is killed; labelling again continues where the rater stopped.

**Blind mode** (the default) hides everything that could sway a rater: the prediction, generator,
extent, proxies and file names (the image's id is opaque). **Review mode** shows them beside the
image, with the other raters' answers and the consensus, and fills the study panel: consensus and
rates per generator and extent, the raters' agreement (Cohen's or Fleiss' κ, Krippendorff's α), the
validity proxies against the human consensus, and the attention checks. Real test images of known
class are shown among the items as attention checks (1 in 10 by default) and kept out of every
figure. "Disagreement first" orders the queue by how much the proxies, the oracle classifier and the
model disagree, and shows how much of that disagreement the rater's answers have covered.
What the figures mean: docs/methods/labelling.md.
"""

from __future__ import annotations

import getpass
import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QGridLayout,
                               QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QSpinBox,
                               QTableWidget, QTableWidgetItem, QTabWidget, QVBoxLayout, QWidget)

from workbench.core.errors import WorkbenchError
from workbench.core.labeling.answers import DIFFERENT, INVALID
from workbench.core.labeling.exchange import export_csv, export_json, import_csv, percent_text, study_summary
from workbench.core.labeling.keymap import checked_keymap, key_actions, normalise_key, parse_keymap
from workbench.core.labeling.label_store import LabelStore, store_path
from workbench.core.labeling.project_studies import check_images, current_study, prepare_study, start_session
from workbench.core.labeling.study import SUBSETS
from workbench.gui.session.app_settings import app_settings
from workbench.gui.session.jobs import IO
from workbench.gui.session.keyed_jobs import KeyedJobs
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.views.view_inputs import error_text
from workbench.gui.widgets.error_dialog import report_error
from workbench.gui.widgets.export import announce_export
from workbench.gui.widgets.label_canvas import LabelCanvas

RATER_KEY = "labelling/rater"
PREFETCH = 3  # entries made ready ahead of the shown one
CONSENSUS_COLOURS = {"yes": QColor(46, 160, 67), "no": QColor(207, 34, 46), "N/A": QColor(191, 135, 0)}
RATES_COLUMNS = ("Generator", "Extent", "Items", "Decided", "Valid", "Valid + label", "Valid misbeh.", "κ validity",
                 "κ label")
PROXY_COLUMNS = ("Proxy", "Against", "Generator", "Extent", "Items", "Accuracy", "κ", "yes/yes", "yes/no", "no/yes",
                 "no/no")


def _kappa(found) -> str:
    if not found:
        return "—"
    a = found[0]
    return "n/a" if a["value"] is None else f"{a['value']:.2f}"


def _table(columns) -> QTableWidget:
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(columns)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    table.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # the keys stay with the canvas
    table.horizontalHeader().setStretchLastSection(True)
    return table


def _fill(table: QTableWidget, rows: list[list], first_number: int) -> None:
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            item = QTableWidgetItem(str(value))
            if c >= first_number:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(r, c, item)
    table.resizeColumnsToContents()
    table.resizeRowsToContents()
    # as tall as its rows (up to a dozen), so the panel's other figures stay in view
    rows_height = sum(table.rowHeight(r) for r in range(min(len(rows), 12)))
    table.setFixedHeight(table.horizontalHeader().height() + rows_height + 2 * table.frameWidth() + 2
                         + (table.horizontalScrollBar().sizeHint().height() if len(rows) else 0))


def summary_tables(summary: dict) -> tuple[list[list], list[list]]:
    """The rows of the rates table and of the proxies-against-humans table of a study summary."""
    rates, proxies = [], []
    for group in summary["groups"].values():
        r = group["rates"]
        generator, extent = group["generator"] or "all", group["extent"]
        rates.append([generator, extent, r["items"], r["decided"], f"{r['valid']} ({percent_text(r['valid_rate'])})",
                      f"{r['valid_preserving']} ({percent_text(r['preservation_rate'])})", r["valid_misbehaviours"],
                      _kappa(group["agreement"]["validity"]), _kappa(group["agreement"]["label match"])])
        for p in group["proxies"]:
            c = p["confusion"]
            kappa = p["kappa"]["value"]
            proxies.append([p["proxy"], p["judges"], generator, extent, p["items"], percent_text(p["accuracy"]),
                            "n/a" if kappa is None else f"{kappa:.2f}", c["yes/yes"], c["yes/no"], c["no/yes"],
                            c["no/no"]])
    return rates, proxies


class KeymapDialog(QDialog):
    """Edit the study's key map as JSON; a conflict or a typo is refused with the reason."""

    def __init__(self, overrides: dict, parent: QWidget | None = None):
        super().__init__(parent)
        import json

        self.setWindowTitle("Labelling keys")
        self.keymap: dict | None = None
        self.overrides = overrides
        self.editor = QPlainTextEdit(json.dumps(overrides or {}, indent=1))
        self.editor.setObjectName("keymapEditor")
        self.problem = QLabel()
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color: #cf222e")
        defaults = ", ".join(f"{action}: {' / '.join(keys)}" for action, keys in checked_keymap().items())
        hint = QLabel(f"A JSON object from action to a key or a list of keys, laid over the defaults ({defaults}).")
        hint.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.apply)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(hint)
        layout.addWidget(self.editor, 1)
        layout.addWidget(self.problem)
        layout.addWidget(buttons)

    def apply(self) -> None:
        import json

        text = self.editor.toPlainText().strip() or "{}"
        try:
            parse_keymap(text)
        except WorkbenchError as exc:
            self.problem.setText(str(exc))
            return
        self.overrides = json.loads(text)
        self.accept()


class LabelingView(QWidget):
    remembered = ("mode_box", "order_box", "auto_box", "zoom_box", "checks_box")
    #: a test set to measure in the Coverage view (e.g. a human-validated subset)
    open_in_coverage = Signal(str)
    #: test sets to compare in the Compare view (a set and its human-validated subset)
    open_in_compare = Signal(list)

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("labelingView")
        self.session, self.selection = session, selection
        self.jobs = KeyedJobs(session.runner, self, keep=8)  # summaries are keyed by when they were asked
        self.setup = None  # the StudySetup being labelled
        self.labelling = None  # the rater's LabellingSession
        self.store: LabelStore | None = None
        self.keymap = checked_keymap()
        self.actions = key_actions(self.keymap)
        self.summary: dict | None = None
        self.study = None  # the study with every rater's answers, as last summarised
        self.imported = None  # an ImportedStudy shown in the study panel instead of the project's
        self.last_key_ms: float | None = None  # key press to the next image, for the benchmark
        self._resume_tried = False
        self._subsets_listed = False  # whether the project lists the study's human-validated subsets
        self._summaries = 0  # summaries asked for

        # --- the study form ----------------------------------------------------------------------------
        self.testset_box = QComboBox()
        self.testset_box.setObjectName("labelTestset")
        # a long set name must not squeeze the form's labels: the box keeps a modest width, its list is wide
        self.testset_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.testset_box.setMinimumContentsLength(16)
        self.testset_box.setToolTip("The test set to label: a generated set offers the inputs the model "
                                    "misbehaves on; any other set is labelled whole")
        self.rater_edit = QLineEdit(str(app_settings().value(RATER_KEY, "") or _login()))
        self.rater_edit.setObjectName("raterName")
        self.rater_edit.setToolTip("Your name or initials: every answer is stored under it (Enter starts)")
        self.rater_edit.returnPressed.connect(self.start)
        self.mode_box = QComboBox()
        self.mode_box.addItem("Blind", "blind")
        self.mode_box.addItem("Review", "review")
        self.mode_box.setItemData(0, "The prediction, generator, extent, proxies and file names are hidden, and the "
                                     "image's id is opaque", Qt.ItemDataRole.ToolTipRole)
        self.mode_box.setItemData(1, "Show them beside the image, with the other raters' answers, the consensus, the "
                                     "agreement and the proxies against the humans", Qt.ItemDataRole.ToolTipRole)
        self.mode_box.currentIndexChanged.connect(lambda _: self._mode_changed())
        self.order_box = QComboBox()
        self.order_box.addItem("Random, generators interleaved", "random")
        self.order_box.addItem("Disagreement first", "disagreement")
        self.order_box.setItemData(1, "Items on which the proxies, the oracle classifier and the model disagree "
                                      "come first", Qt.ItemDataRole.ToolTipRole)
        self.checks_box = QSpinBox()
        self.checks_box.setRange(0, 100)
        self.checks_box.setValue(10)
        self.checks_box.setSpecialValueText("none")
        self.checks_box.setPrefix("1 in ")
        self.checks_box.setToolTip("Attention checks: a real test image of known class among every N images "
                                   "(kept out of every figure); a rater who fails one is flagged")
        self.auto_box = QCheckBox("Auto-advance after an answer")
        self.auto_box.setChecked(True)
        self.start_button = QPushButton("Start labelling")
        self.start_button.setObjectName("startLabelling")
        self.start_button.clicked.connect(self.start)
        self.keys_button = QPushButton("Keys…")
        self.keys_button.setToolTip("Change the labelling keys (JSON, shared by the study's raters)")
        self.keys_button.clicked.connect(self.edit_keys)
        self.status = QLabel("Choose a test set and start.")
        self.status.setObjectName("labelStatus")
        self.status.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Test set", self.testset_box)
        form.addRow("Rater", self.rater_edit)
        form.addRow("Mode", self.mode_box)
        form.addRow("Order", self.order_box)
        form.addRow("Checks", self.checks_box)
        form.addRow("", self.auto_box)
        study_box = QGroupBox("Study")
        study_layout = QVBoxLayout(study_box)
        study_layout.addLayout(form)
        row = QHBoxLayout()
        row.addWidget(self.start_button, 1)
        row.addWidget(self.keys_button)
        study_layout.addLayout(row)
        study_layout.addWidget(self.status)
        self.keys_label = QLabel()
        self.keys_label.setObjectName("keyMap")
        self.keys_label.setWordWrap(True)
        self.keys_label.setTextFormat(Qt.TextFormat.RichText)
        keys_box = QGroupBox("Keys")
        QVBoxLayout(keys_box).addWidget(self.keys_label)
        self.export_csv_button = QPushButton("Export CSV…")
        self.export_csv_button.setToolTip("The benchmark's columns: ASS n, Misclass Human n, Valid Human n, "
                                          "Validity?, Label Preservation?")
        self.export_csv_button.clicked.connect(lambda: self.export("csv"))
        self.export_json_button = QPushButton("Export JSON…")
        self.export_json_button.setToolTip("Settings, raters, items, answers with their times, consensus, agreement")
        self.export_json_button.clicked.connect(lambda: self.export("json"))
        self.import_button = QPushButton("Import CSV…")
        self.import_button.setToolTip("Read a label CSV (ours or the benchmark's) and show its consensus and "
                                      "agreement, checked against the file's own columns")
        self.import_button.clicked.connect(self.import_file)
        self.subset_box = QComboBox()
        for which, text in zip(SUBSETS, ("valid", "valid and label-preserving", "valid misbehaviours")):
            self.subset_box.addItem(text, which)
        self.coverage_button = QPushButton("Measure in Coverage")
        self.coverage_button.setToolTip("Open the Coverage view with the human-validated subset among its test sets")
        self.coverage_button.clicked.connect(self._measure_subset)
        files_box = QGroupBox("Labels")
        files = QGridLayout(files_box)
        files.addWidget(self.export_csv_button, 0, 0)
        files.addWidget(self.export_json_button, 0, 1)
        files.addWidget(self.import_button, 1, 0, 1, 2)
        self.compare_button = QPushButton("Compare with the whole set")
        self.compare_button.setToolTip("Open the Compare view with the set and its human-validated subset side by side")
        self.compare_button.clicked.connect(lambda: self.setup is not None and self.open_in_compare.emit(
            [self.setup.name, f"{self.setup.name}[{self.subset_box.currentData()}]"]))
        files.addWidget(self.subset_box, 2, 0)
        files.addWidget(self.coverage_button, 2, 1)
        files.addWidget(self.compare_button, 3, 0, 1, 2)
        for widget in (self.export_csv_button, self.export_json_button, self.coverage_button, self.subset_box,
                       self.compare_button):
            widget.setEnabled(False)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(study_box)
        left_layout.addWidget(keys_box)
        left_layout.addWidget(files_box)
        left_layout.addStretch(1)
        left.setFixedWidth(300)

        # --- the image and its answers -----------------------------------------------------------------
        self.progress_label = QLabel()
        self.progress_label.setObjectName("labelProgress")
        self.timing_label = QLabel()
        self.timing_label.setObjectName("labelTiming")
        self.question_label = QLabel()
        self.question_label.setObjectName("labelQuestion")
        self.question_label.setStyleSheet("font-size: 15px; font-weight: 600")
        self.zoom_box = QSpinBox()
        self.zoom_box.setRange(2, 24)
        self.zoom_box.setValue(10)
        self.zoom_box.setPrefix("zoom ")
        self.zoom_box.setSuffix("×")
        self.zoom_box.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.zoom_box.valueChanged.connect(self._zoom_changed)
        self.canvas = LabelCanvas()
        self.canvas.key_pressed.connect(self.on_key)
        self.canvas.show_message("Choose a test set on the left and press Start labelling.\nThen answer with "
                                 "the keyboard: 0–9 a class, X not a valid image, S skip, Ctrl+Z undo.")
        self.item_label = QLabel()
        self.item_label.setObjectName("itemInfo")
        self.item_label.setWordWrap(True)
        self.item_label.setTextFormat(Qt.TextFormat.RichText)
        self.answer_buttons: dict[str, QPushButton] = {}
        self.answers_grid = QGridLayout()
        nav = QHBoxLayout()
        self.nav_buttons = {}
        for action, text in (("previous", "← Previous"), ("skip", "Skip"), ("undo", "Undo"), ("redo", "Redo"),
                             ("next unlabelled", "Next unlabelled"), ("next", "Next →")):
            button = QPushButton(text)
            button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
            button.clicked.connect(lambda _=False, a=action: self.do(a))
            nav.addWidget(button)
            self.nav_buttons[action] = button
        top = QHBoxLayout()
        top.addWidget(self.progress_label)
        top.addStretch(1)
        top.addWidget(self.timing_label)
        top.addWidget(self.zoom_box)
        centre = QWidget()
        centre_layout = QVBoxLayout(centre)
        centre_layout.addLayout(top)
        centre_layout.addWidget(self.question_label)
        centre_layout.addWidget(self.canvas, 1)
        centre_layout.addWidget(self.item_label)
        centre_layout.addLayout(self.answers_grid)
        centre_layout.addLayout(nav)

        # --- the study panel (review mode) -------------------------------------------------------------
        self.study_title = QLabel()
        self.study_title.setObjectName("studyTitle")
        self.study_title.setWordWrap(True)
        self.study_title.setTextFormat(Qt.TextFormat.RichText)
        self.rates_table = _table(RATES_COLUMNS)
        self.rates_table.setObjectName("labelRates")
        self.agreement_label = QLabel()
        self.agreement_label.setObjectName("labelAgreement")
        self.agreement_label.setWordWrap(True)
        self.agreement_label.setTextFormat(Qt.TextFormat.RichText)
        self.proxy_table = _table(PROXY_COLUMNS)
        self.proxy_table.setObjectName("labelProxies")
        self.checks_label = QLabel()
        self.checks_label.setObjectName("labelChecks")
        self.checks_label.setWordWrap(True)
        self.study_panel = QWidget()
        panel = QVBoxLayout(self.study_panel)
        panel.setContentsMargins(0, 0, 0, 0)
        panel.addWidget(self.study_title)
        panel.addWidget(QLabel("Consensus per generator and extent (human judgements)"))
        panel.addWidget(self.rates_table)
        panel.addWidget(self.agreement_label)
        panel.addWidget(QLabel("Validity proxies against the human consensus (proxies, not verdicts)"))
        panel.addWidget(self.proxy_table)
        panel.addWidget(self.checks_label)
        panel.addStretch(1)

        self.tabs = QTabWidget()
        self.tabs.setObjectName("labelTabs")
        self.tabs.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.tabs.addTab(centre, "Label")
        self.tabs.addTab(self.study_panel, "Agreement and proxies")
        self.tabs.currentChanged.connect(lambda index: index == 0 and self.labelling is not None
                                         and self.canvas.setFocus())
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(left)
        layout.addWidget(self.tabs, 1)

        self._tick = QTimer(self)  # the time on the shown item
        self._tick.setInterval(500)
        self._tick.timeout.connect(self._show_timing)
        self._refresh = QTimer(self)  # the study panel follows the answers, a moment after them
        self._refresh.setSingleShot(True)
        self._refresh.setInterval(400)
        self._refresh.timeout.connect(self.refresh_summary)
        session.project_changed.connect(lambda: self.isVisible() and self._fill_testsets())
        self._show_keys()
        self._mode_changed()
        self._fill_testsets()
        self._enable_labelling(False)

    # --- choices ----------------------------------------------------------------------------------------

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._fill_testsets()
        if self.labelling is not None:
            self.canvas.setFocus()
        elif not self._resume_tried:
            self._resume_tried = True
            self._resume()

    def _resume(self) -> None:
        """Go back to the study this rater answered last, where they stopped (a reopened app goes on).
        The rater's history is read in a job: a long one is many rows of the label store."""
        path = store_path(self.session.project)
        rater = self.rater_edit.text().strip()
        if not rater or not path.exists():
            return
        job = self.jobs.run(("resume", rater), f"Find where {rater} stopped labelling", _last_study, path, rater,
                            uses_device=False, lane=IO, view="labelling", report_errors=False,
                            then=self._resumed)
        if job is not None:
            job.failed.connect(lambda exc: self.status.setText(error_text(exc)) if self._idle() else None)

    def _resumed(self, testset: str | None) -> None:
        if testset is not None and self._idle() and self.testset_box.findData(testset) >= 0:
            self.choose(testset)
            self.start()

    def _idle(self) -> bool:
        """No study is open or being opened: what the rater started since is not overridden by a resume."""
        return self.labelling is None and self.start_button.isEnabled()  # `start` disables it until it ends

    def _fill_testsets(self) -> None:
        current = self.testset_box.currentData()
        infos = self.session.testset_infos()
        generated = [i for i in infos if i.source.role == "generated"]
        generated.sort(key=lambda i: str(i.extra.get("created", "")), reverse=True)
        others = [i for i in infos if i.source.role != "generated"]
        self.testset_box.blockSignals(True)
        self.testset_box.clear()
        for info in generated + others:
            size = f", {info.size:,} inputs" if info.size is not None else ""
            self.testset_box.addItem(f"{info.name} ({info.source.describe()}{size})", info.name)
        self.testset_box.blockSignals(False)
        index = self.testset_box.findData(current)
        if index >= 0:
            self.testset_box.setCurrentIndex(index)

    def choose(self, name: str) -> None:
        """Pick the test set `name` (e.g. sent from another view)."""
        self._fill_testsets()
        index = self.testset_box.findData(name)
        if index < 0:
            self.testset_box.addItem(name, name)
            index = self.testset_box.count() - 1
        self.testset_box.setCurrentIndex(index)

    @property
    def mode(self) -> str:
        return self.mode_box.currentData()

    def _mode_changed(self) -> None:
        review = self.mode == "review"
        shown = review or self.imported is not None
        self.tabs.setTabEnabled(1, shown)  # a blind rater does not see what the others said
        self.tabs.setTabToolTip(1, "" if shown else "Switch to review mode to see the consensus and the agreement")
        if not shown:
            self.tabs.setCurrentIndex(0)
        if self.labelling is not None:
            self.labelling.mode = self.mode
            self.show_entry()
        if review:
            self.refresh_summary()

    # --- starting ---------------------------------------------------------------------------------------

    def start(self) -> None:
        name = self.testset_box.currentData()
        rater = self.rater_edit.text().strip()
        if not name:
            self.status.setText("This project has no test set to label yet: generate one in the Generation view.")
            return
        if not rater:
            self.status.setText("Enter your name or initials first: every answer is stored under it.")
            self.rater_edit.setFocus()
            return
        if self.session.project.read_only:
            self.status.setText("The project is open read-only, so answers cannot be saved. Open a copy you can "
                                "write to.")
            return
        app_settings().setValue(RATER_KEY, rater)
        self.status.setText(f"Reading {name}…")
        self.start_button.setEnabled(False)
        dataset = self.session.datasets.get(self.selection.dataset) if self.selection.dataset else None
        every = self.checks_box.value()
        job = self.jobs.run(("study", name, rater), f"Open labelling study {name}", _open_study,
                            self.session.project, name, dataset, every, rater, self.mode,
                            self.order_box.currentData(), uses_device=False, lane=IO, view="labelling",
                            report_errors=False, then=self._started)
        if job is not None:
            job.failed.connect(self._start_failed)
            job.cancelled.connect(lambda: self.start_button.setEnabled(True))

    def _start_failed(self, exc) -> None:
        self.start_button.setEnabled(True)
        self.status.setText(f"Cannot label this set: {error_text(exc)}")

    def _started(self, result) -> None:
        setup, labelling = result
        checks = labelling.checks
        self.start_button.setEnabled(True)
        if self.store is not None and self.store is not labelling.store:
            self.store.close()
        self.store = labelling.store
        self.setup, self.labelling, self.imported = setup, labelling, None
        self.keymap = checked_keymap(setup.settings.get("keymap") or {})
        self.actions = key_actions(self.keymap)
        self._build_answer_buttons()
        self._show_keys()
        self._enable_labelling(True)
        resumed = labelling.answered()
        self.status.setText(f"Labelling {setup.name} as {labelling.rater}: {len(setup.items)} items"
                            + (f" and {len(checks)} attention checks" if len(checks) else "")
                            + (f"; resumed after {resumed} answers" if resumed else "") + ".")
        self.question_label.setText(setup.options.question)
        self._subsets_listed = False
        self.show_entry()
        self._tick.start()
        self.canvas.setFocus()
        self.refresh_summary()

    def _enable_labelling(self, on: bool) -> None:
        for button in (*self.nav_buttons.values(), *self.answer_buttons.values()):
            button.setEnabled(on)
        for widget in (self.export_csv_button, self.export_json_button, self.coverage_button, self.subset_box,
                       self.compare_button):
            widget.setEnabled(on)

    def _build_answer_buttons(self) -> None:
        while self.answers_grid.count():
            widget = self.answers_grid.takeAt(0).widget()
            if widget is not None:
                widget.deleteLater()
        self.answer_buttons = {}
        for n, (answer, text) in enumerate(self.setup.options.choices()):
            action = answer if answer in (INVALID, DIFFERENT) else f"answer {answer}"
            keys = self.keymap.get(action, [])
            button = QPushButton(f"{' / '.join(keys) or '—'}   {text}")
            button.setObjectName(f"answer_{answer}")
            button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
            button.setCheckable(True)
            button.clicked.connect(lambda _=False, a=answer: self.give(a))
            self.answers_grid.addWidget(button, n // 4, n % 4)
            self.answer_buttons[answer] = button

    def _show_keys(self) -> None:
        rows = "".join(f"<tr><td><b>{' / '.join(keys)}</b></td><td>&nbsp;{action}</td></tr>"
                       for action, keys in self.keymap.items() if not action.startswith("answer "))
        self.keys_label.setText(f"<table>{rows}</table><p>0–9: the classes in dataset order "
                                f"(shown on the answer buttons).</p>")

    # --- keys -------------------------------------------------------------------------------------------

    def on_key(self, text: str) -> None:
        text = text.replace("Num+", "")  # the keypad's digits answer like the others
        try:
            key = normalise_key(text)
        except WorkbenchError:
            return
        action = self.actions.get(key)
        if action is not None:
            started = time.perf_counter()
            self.do(action)
            self.last_key_ms = 1000 * (time.perf_counter() - started)

    def do(self, action: str) -> None:
        """Carry out a key map action on the current entry."""
        s = self.labelling
        if s is None:
            return
        try:
            if action.startswith("answer "):
                answer = action.split(" ", 1)[1]
                if answer not in dict(self.setup.options.choices()):
                    return
                self.give(answer)
                return
            if action in (INVALID, DIFFERENT):
                if action in dict(self.setup.options.choices()):
                    self.give(action)
                return
            if action == "skip":
                s.skip()
            elif action == "undo":
                if s.undo() is None:
                    self.status.setText("Nothing to undo.")
            elif action == "redo":
                if s.redo() is None:
                    self.status.setText("Nothing to redo.")
            elif action == "previous":
                s.move(-1)
            elif action == "next":
                s.move(1)
            elif action == "next unlabelled":
                s.next_unlabelled()
        except WorkbenchError as exc:
            report_error(self, "The answer could not be saved", exc)
            return
        self.show_entry()
        self._answers_changed()

    def give(self, answer: str) -> None:
        s = self.labelling
        if s is None:
            return
        if self.auto_box.isChecked():
            # the next image is painted first: the rater never waits for the answer's commit to disk
            upcoming = s.upcoming()
            self.canvas.show_image(self.key_of(upcoming), s.image(upcoming))
            self.canvas.repaint()
        try:
            s.answer(answer, advance=self.auto_box.isChecked())
        except WorkbenchError as exc:
            self.show_entry()  # back to the image the answer was for
            report_error(self, "The answer could not be saved", exc)
            return
        self.show_entry()
        self._answers_changed()

    def _answers_changed(self) -> None:
        if not self._subsets_listed and self.labelling is not None and self.labelling.answered():
            # the first answer makes the set's human-validated subsets test sets of the project
            self._subsets_listed = True
            if not any(i.name == f"{self.setup.name}[valid]" for i in self.session.testset_infos()):
                self.session.relist_testsets()
        if self.mode == "review":
            self._refresh.start()

    # --- showing ----------------------------------------------------------------------------------------

    def show_entry(self) -> None:
        s = self.labelling
        if s is None:
            return
        entry = s.entry
        answer = s.answer_of(entry)
        self.canvas.show_image(self.key_of(entry), s.image(entry),
                               self._frame(entry) if self.mode == "review" else None)
        for key, button in self.answer_buttons.items():
            button.setChecked(key == answer)
        done = s.answered()
        total = len(s.queue)
        self.progress_label.setText(f"<b>{s.position + 1} / {total}</b> &nbsp; {done} answered"
                                    + (" — all done" if done == total else ""))
        self.item_label.setText(self._item_text(entry, answer))
        self._show_timing()
        QTimer.singleShot(0, self._prefetch)

    def _prefetch(self) -> None:
        s = self.labelling
        if s is None:
            return
        ahead = [s.queue[i] for i in range(s.position + 1, min(s.position + 1 + PREFETCH, len(s.queue)))]
        self.canvas.prefetch((self.key_of(e), s.image(e)) for e in ahead)

    def key_of(self, entry) -> tuple:
        """What a pixmap is of: the entry's input in this study (another study's item i is another image)."""
        return self.labelling.name, entry.kind, self.labelling.input_id(entry)

    def _frame(self, entry):
        if entry.kind == "check" or self.setup is None:
            return None
        if self.study is None:
            return None
        c = self.study.consensus(self.setup.items[entry.index])
        return CONSENSUS_COLOURS.get(c.validity)

    def _item_text(self, entry, answer) -> str:
        s = self.labelling
        given = f"your answer: <b>{s.options.text(answer)}</b>" if answer is not None else "not answered yet"
        if self.mode != "review":
            return f"item {s.opaque_id(entry)} · {given}"
        if entry.kind == "check":
            known = s.check_class(entry)
            return (f"attention check ({s.input_id(entry)}, class {s.options.text(str(known))}) · {given}")
        item = self.setup.items[entry.index]
        parts = [f"<b>{item.input_id}</b>", f"expected {s.options.text(item.expected)}"]
        if item.predicted is not None:
            parts.append(f"model: {s.options.text(item.predicted)}")
        if item.generator:
            parts.append(f"{item.generator}, {item.extent} extent"
                         + (f", generation {item.generations}" if item.generations is not None else ""))
        for name, verdict in item.proxies.items():
            shown = verdict if isinstance(verdict, str) else ("valid" if verdict else "invalid")
            parts.append(f"{name} (proxy): {shown}")
        study = self.study
        if study is not None:
            others = study.answers.get(item.input_id, {})
            if others:
                parts.append("raters: " + ", ".join(f"{r} {s.options.text(a)}" for r, a in others.items()))
            c = study.consensus(item)
            parts.append(f"consensus: validity {c.validity}, label preservation {c.preservation}")
        return " · ".join(parts) + f"<br>{given}"

    def _show_timing(self) -> None:
        s = self.labelling
        if s is None:
            self.timing_label.setText("")
            return
        text = f"{s.seconds_on_entry():.1f} s on this image"
        seconds = s.mean_seconds()
        if seconds is not None:
            text += f" · {seconds:.1f} s per answer"
        resolved = s.resolved_disagreement()
        if resolved is not None and s.order == "disagreement":
            text += f" · {100 * resolved:.0f} % of the expected disagreement resolved"
        self.timing_label.setText(text)

    def _zoom_changed(self, zoom: int) -> None:
        self.canvas.set_zoom(zoom)
        self.show_entry()

    # --- the study panel --------------------------------------------------------------------------------

    def refresh_summary(self) -> None:
        """Compute the study panel's figures off the UI thread (from the store, with every rater's answers)."""
        if self.setup is None or self.imported is not None:
            return
        setup = self.setup
        self._summaries += 1  # a refresh reads the answers as they are now: it never joins an older read
        self.jobs.run(("summary", setup.name, self._summaries), f"Label statistics of {setup.name}", _summarise,
                      self.session.project, setup, group="summary", uses_device=False, lane=IO, view="labelling",
                      report_errors=False, then=lambda result: self._show_summary(result, setup.name))

    def _show_summary(self, result, name: str) -> None:
        study, summary = result
        if self.setup is None or name != self.setup.name or self.imported is not None:
            return
        self.study = study
        self._fill_summary(summary, f"<b>{name}</b>: {summary['raters']} raters, {summary['items']} items")
        if self.labelling is not None:
            self.show_entry()

    def _fill_summary(self, summary: dict, title: str, note: str = "") -> None:
        self.summary = summary
        rates, proxies = summary_tables(summary)
        self.study_title.setText(title + (f"<br>{note}" if note else ""))
        _fill(self.rates_table, rates, 2)
        _fill(self.proxy_table, proxies, 4)
        overall = summary["groups"]["all"]["agreement"]
        lines = []
        for question, found in overall.items():
            shown = "; ".join(("n/a" if a["value"] is None else f"{a['measure']} {a['value']:.2f}")
                              + f" (raw {'—' if a['raw'] is None else format(a['raw'], '.2f')}, {a['items']} items)"
                              for a in found) or "needs two raters"
            lines.append(f"<b>{question}</b>: {shown}")
        self.agreement_label.setText("Agreement of the raters — " + "<br>".join(lines))
        checks = [c for c in summary.get("checks", []) if c["answered"]]
        passed = [f"{c['rater']} {c['answered'] - c['failed']}/{c['answered']} passed"
                  + (" — flagged" if c["flagged"] else "") for c in checks]
        self.checks_label.setText("Attention checks: " + ("; ".join(passed) if passed else "none answered yet"))

    # --- files ------------------------------------------------------------------------------------------

    def export(self, kind: str) -> None:
        if self.setup is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, f"Export the labels as {kind.upper()}",
                                              f"{self.setup.name}-labels.{kind}", f"{kind.upper()} (*.{kind})")
        if path:
            self.export_to(path, kind)

    def export_to(self, path: str, kind: str) -> None:
        setup = self.setup
        job = self.jobs.run(("export", path), f"Export labels of {setup.name}", _export, self.session.project,
                            setup, path, kind, uses_device=False, lane=IO, view="labelling", report_errors=False,
                            then=lambda _: announce_export(path))
        if job is not None:
            job.failed.connect(lambda exc: report_error(self, "The labels could not be exported", exc))

    def import_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a label CSV", "", "CSV (*.csv)")
        if path:
            self.import_from(path)

    def import_from(self, path: str) -> None:
        job = self.jobs.run(("import", path), "Import label file", _import, path, uses_device=False, lane=IO,
                            view="labelling", report_errors=False, then=self._show_imported)
        if job is not None:
            job.failed.connect(lambda exc: report_error(self, "The label file could not be read", exc))

    def _show_imported(self, result) -> None:
        imported, summary = result
        self.imported = imported
        note = (f"{len(imported.mismatches)} consensus cells of the file differ from the recomputed consensus "
                f"(first: row {imported.mismatches[0]['row']})" if imported.mismatches else
                "The file's Validity? and Label Preservation? equal the recomputed consensus.")
        self._fill_summary(summary, f"<b>Imported {imported.study.name}</b> ({imported.rows} rows"
                                    + (f", {imported.dataset}" if imported.dataset else "") + ")", note)
        self.tabs.setTabEnabled(1, True)
        self.tabs.setCurrentIndex(1)
        self.status.setText(f"Read {imported.rows} rows of {imported.study.name}. Start labelling to return to "
                            "this project's study.")

    def edit_keys(self) -> None:
        overrides = (self.setup.settings.get("keymap") if self.setup is not None else None) or {}
        dialog = KeymapDialog(overrides, self)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        self.apply_keymap(dialog.overrides)

    def apply_keymap(self, overrides: dict) -> None:
        """Use the key map `overrides` (refused with the reason when it conflicts); saved with the study."""
        try:
            keymap = checked_keymap(overrides)
        except WorkbenchError as exc:
            self.status.setText(f"The keys were not changed: {error_text(exc)}")
            return
        self.keymap, self.actions = keymap, key_actions(keymap)
        if self.setup is not None and self.store is not None:
            self.setup.settings = self.store.update_study(self.setup.name, {"keymap": overrides})
            self._build_answer_buttons()
            self._enable_labelling(self.labelling is not None)
        self._show_keys()
        if self.labelling is not None:
            self.show_entry()
            self.canvas.setFocus()

    def _measure_subset(self) -> None:
        if self.setup is not None:
            self.open_in_coverage.emit(f"{self.setup.name}[{self.subset_box.currentData()}]")


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


# --- jobs (run off the UI thread) ------------------------------------------------------------------------------

def _last_study(ctx, path, rater) -> str | None:
    """The test set `rater` answered last in the label store at `path`, or None."""
    with LabelStore(path, read_only=True) as store:
        mine = store.history(rater=rater)
    return mine[-1].testset if mine else None


def _open_study(ctx, project, name, dataset, check_every, rater, mode, order):
    """The study and the rater's session of it, with the label store opened and checked here, off the UI
    thread (the store's connection is then used by the view alone)."""
    ctx.progress(0, 3, f"reading {name}")
    setup = prepare_study(project, name, dataset, check_every=check_every)
    ctx.progress(1, 3, "choosing the attention checks")
    checks = check_images(project, setup)
    ctx.progress(2, 3, "reading the answers")
    store = LabelStore(store_path(project))
    try:
        return setup, start_session(project, store, setup, rater, mode, checks, order)
    except BaseException:
        store.close()
        raise


def _summarise(ctx, project, setup):
    study = current_study(project, setup)
    return study, study_summary(study)


def _export(ctx, project, setup, path, kind):
    from workbench.core.labeling.label_store import read_store

    study = current_study(project, setup)
    dataset = setup.testset.source.dataset
    if kind == "csv":
        return export_csv(study, path, dataset, setup.options)
    with read_store(project) as store:
        rows = store.current(setup.name)
    return export_json(study, path, rows, setup.settings, dataset, setup.options)


def _import(ctx, path):
    imported = import_csv(path)
    return imported, study_summary(imported.study)
