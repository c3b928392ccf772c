"""The Coverage view: how much of a model's behaviour chosen test sets exercise, by every criterion.

Choose the IDC layer (the shared selection's layer), m, the criteria and the test sets; every set is
measured in a job (see `coverage_runs.py`) and the view fills in as the jobs report: the summary
table (criterion × set), the growth of the chosen criterion against the number of inputs, the IDC
combination matrix and the KMNC neuron × section matrix. A matrix shows one set's counts or the
difference of two sets; clicking a cell lists the inputs that fall in it, and the current input is
the linked selection's input, which the Importance view's inspector explains. Selecting a neuron on
the IDC matrix's headers selects it everywhere, and the selected neuron is outlined here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from workbench.core.coverage.registry import criterion_catalogue
from workbench.gui.session.coverage_choices import criterion_titles, default_sets, set_color, test_set_choices
from workbench.gui.session.coverage_runs import DONE, RUNNING, CoverageRequest, CoverageRuns
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.views.analysis_view import AnalysisView
from workbench.gui.widgets.error_dialog import report_error
from workbench.gui.views.coverage_matrices import (
    MAX_DRAWN_CELLS,
    IdcPanel,
    KmncPanel,
    MatrixSet,
    largest_drawable_m,
)
from workbench.gui.views.coverage_report import cell_text, growth_curves, summary_text
from workbench.gui.views.model_view import section_label
from workbench.gui.views.view_inputs import duration_text, error_text
from workbench.gui.widgets.cell_inputs import CellInputs
from workbench.gui.widgets.coverage_table import CoverageTable
from workbench.gui.widgets.empty_state import view_frame
from workbench.gui.widgets.export import export_csv, export_png, save_as
from workbench.gui.widgets.growth_plot import GrowthPlot

DEFAULT_M = 6
MAX_M = 32
M_DEBOUNCE_MS = 400  # a new m is measured once the spin box rests
REDRAW_MS = 250  # running values arrive per batch; the table and plot follow at this pace


class CoverageView(AnalysisView):
    inspect_requested = Signal()  # show the selected input in the Importance view's inspector
    purpose = "its coverage is measured here"
    no_dataset_title = "No dataset to measure coverage on"
    layer_verb = "measure"
    layer_picker_name = "coverageLayerPicker"
    layer_tip = "The layer IDC measures (the neuron criteria measure every layer)"
    layer_width = 210
    # Kept in the project when the window closes (gui/session/view_settings.py).
    remembered = ("m_box", "criterion_actions", "a_box", "b_box", "difference", "log_scale")
    remembered_values = {"set_keys": list[str] | None}

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(session, selection, parent)
        self.setObjectName("coverageView")
        self.runs = CoverageRuns(session, self)
        self.criteria = [info.name for info in criterion_catalogue() if info.default]
        self.set_keys: list[str] | None = None  # the chosen sets; None until the defaults are known
        self._wanted_sets: list[str] = []  # sets to add to the defaults once they are known
        self._wanted_against: tuple[str, str] | None = None  # (A, B) keys the matrices show once laid out
        self.choices = []
        self.cell: tuple[str, int, int] | None = None  # (matrix, row, column) whose inputs are listed
        self._table_layout: tuple | None = None
        self._painted: dict[str, tuple] = {}  # what each matrix shows, so partial updates leave it alone

        self.m_box = QSpinBox()
        self.m_box.setObjectName("coverageMBox")
        self.m_box.setRange(1, MAX_M)
        self.m_box.setValue(DEFAULT_M)
        self.m_box.setToolTip("IDC's m: how many of the layer's most relevant neurons combine their clusters")
        self.m_timer = QTimer(self)
        self.m_timer.setSingleShot(True)
        self.m_timer.setInterval(M_DEBOUNCE_MS)
        self.m_timer.timeout.connect(self.refresh)
        self.m_box.valueChanged.connect(lambda _: self.m_timer.start())
        self.criteria_button = self._menu_button("Criteria", "Which coverage criteria to measure")
        self.criteria_menu = self.criteria_button.menu()
        self.criterion_actions = {}
        self._fill_criteria_menu()
        session.ready.connect(self._fill_criteria_menu)  # plugins' criteria are known once they loaded
        self.sets_button = self._menu_button("Test sets", "Which test sets to measure and compare")
        self.sets_button.setObjectName("testSetsButton")
        self.sets_menu = self.sets_button.menu()
        self.sets_menu.aboutToShow.connect(self._fill_sets_menu)
        self.again_button = QPushButton("Measure again")
        self.again_button.setToolTip("Fit the criteria and measure every set again instead of reading stored results")
        self.again_button.clicked.connect(self.runs.again)
        self.export_button = self._menu_button("Export", "Save the matrices and plots as PNG, their data as CSV")
        self.export_actions = self._export_menu(self.export_button.menu())
        self.export_button.menu().aboutToShow.connect(self._update_export_actions)

        controls = QHBoxLayout()
        for text, widget in (("Layer", self.layer_box), ("m", self.m_box)):
            label = QLabel(text)
            label.setBuddy(widget)
            controls.addWidget(label)
            controls.addWidget(widget)
            controls.addSpacing(6)
        controls.addWidget(self.criteria_button)
        controls.addWidget(self.sets_button)
        controls.addStretch(1)
        controls.addWidget(self.again_button)
        controls.addWidget(self.export_button)
        self.summary = QLabel()
        self.summary.setObjectName("coverageSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # Long work is offered, not started: what it measures, how long it takes here, and a button.
        self.offer_text = QLabel()
        self.offer_text.setObjectName("coverageOfferText")
        self.offer_text.setWordWrap(True)
        self.offer_button = QPushButton("Measure")
        self.offer_button.setObjectName("coverageOfferButton")
        self.offer_button.clicked.connect(self.runs.accept_offer)
        self.offer_bar = QWidget()
        offer_layout = QHBoxLayout(self.offer_bar)
        offer_layout.setContentsMargins(0, 0, 0, 0)
        offer_layout.addWidget(self.offer_text, 1)
        offer_layout.addWidget(self.offer_button)
        self.offer_bar.hide()
        header = QWidget()
        header_layout = QVBoxLayout(header)
        header_layout.setContentsMargins(0, 0, 0, 0)
        header_layout.addWidget(self.summary)
        header_layout.addWidget(self.offer_bar)

        self.table = CoverageTable()
        self.table.setObjectName("coverageTable")
        self.table.criterion_chosen.connect(lambda _: self._show_growth())
        self.growth = GrowthPlot()
        self.growth.setObjectName("growthPlot")
        self.growth_title = section_label("Growth")

        self.a_box, self.b_box = QComboBox(), QComboBox()
        self.a_box.setToolTip("The test set whose counts the matrices show (set A)")
        self.b_box.setToolTip("The test set to compare with (set B)")
        self.difference = QCheckBox("Difference with")
        self.difference.setObjectName("differenceToggle")
        self.difference.setToolTip("Colour each cell by who covers it: only A, only B, both, or neither. Test vs "
                                   "train shows what training reaches and the test set misses; correct vs "
                                   "wrong shows behaviour only misclassified inputs exercise")
        self.log_scale = QCheckBox("Log colour scale")
        self.log_scale.setChecked(True)  # a few combinations hold most inputs: a linear scale hides the rest
        for widget in (self.a_box, self.b_box):
            widget.activated.connect(lambda _: self._on_matrix_choice())
        for box in (self.difference, self.log_scale):
            box.toggled.connect(lambda _: self._on_matrix_choice())
        matrix_controls = QHBoxLayout()
        matrix_controls.addWidget(QLabel("Set"))
        matrix_controls.addWidget(self.a_box)
        matrix_controls.addSpacing(6)
        matrix_controls.addWidget(self.difference)
        matrix_controls.addWidget(self.b_box)
        matrix_controls.addStretch(1)
        matrix_controls.addWidget(self.log_scale)
        self.idc = IdcPanel()
        self.idc.cell_clicked.connect(lambda r, c: self._choose_cell("idc", r, c))
        self.idc.neuron_clicked.connect(self.selection.set_neuron)
        self.kmnc = KmncPanel()
        self.kmnc.cell_clicked.connect(lambda r, c: self._choose_cell("kmnc", r, c))
        self.kmnc.rows_changed.connect(self._on_kmnc_rows)
        self.matrix_tabs = QTabWidget()
        self.matrix_tabs.setObjectName("matrixTabs")
        self.matrix_tabs.setDocumentMode(True)
        self.matrix_tabs.addTab(self.idc, "IDC combinations")
        self.matrix_tabs.addTab(self.kmnc, "KMNC neuron × section")
        self.matrix_tabs.currentChanged.connect(lambda _: self._show_matrices())
        self.cell_inputs = CellInputs()
        self.cell_inputs.input_chosen.connect(self._on_input_chosen)
        self.cell_inputs.inspect_requested.connect(self.inspect_requested)

        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self._section(section_label("Coverage by criterion and test set"), self.table))
        left.addWidget(self._section(self.growth_title, self.growth))
        left.setSizes([250, 330])
        matrices = QWidget()
        matrices_layout = QVBoxLayout(matrices)
        matrices_layout.setContentsMargins(0, 0, 0, 0)
        matrices_layout.addLayout(matrix_controls)
        matrices_layout.addWidget(self.matrix_tabs, 1)
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(matrices)
        right.addWidget(self._section(section_label("Inputs in the chosen cell"), self.cell_inputs))
        right.setSizes([480, 210])
        body = QSplitter()
        body.addWidget(left)
        body.addWidget(right)
        body.setSizes([540, 640])
        self.stack = view_frame(self, controls, header, body)
        self.empty = self.stack.empty

        self._redraw = QTimer(self)
        self._redraw.setSingleShot(True)
        self._redraw.setInterval(REDRAW_MS)
        self._redraw.timeout.connect(self._show_all)
        # A run's end is told once per set (every set's state is announced again): drawn once, on the next turn
        self._settled = QTimer(self)
        self._settled.setSingleShot(True)
        self._settled.setInterval(0)
        self._settled.timeout.connect(self._show_all)
        # the matrix of the tab not shown is drawn on a later turn, so one result never draws both at once
        self._hidden_matrix = QTimer(self)
        self._hidden_matrix.setSingleShot(True)
        self._hidden_matrix.setInterval(0)
        self._hidden_matrix.timeout.connect(lambda: self._show_matrices(hidden=True))
        self.runs.changed.connect(self._on_run_changed)
        self.runs.offer_changed.connect(self._show_offer)
        self.runs.sections_ready.connect(lambda _: self._show_cell())
        session.evaluation_ready.connect(lambda _: self.cell is not None and self._show_cell())
        self.refresh()

    # --- construction helpers ---------------------------------------------------------------------

    @staticmethod
    def _menu_button(text: str, tip: str) -> QToolButton:
        button = QToolButton()
        button.setText(text)
        button.setToolTip(tip)
        button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(button)
        menu.setToolTipsVisible(True)
        button.setMenu(menu)
        return button

    @staticmethod
    def _section(title: QWidget, widget: QWidget) -> QWidget:
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(title)
        layout.addWidget(widget, 1)
        return box

    # --- following the selection -------------------------------------------------------------------

    def show_neuron(self) -> None:
        self._show_neuron()

    def show_inputs(self, bundle, data) -> None:
        """Measure what the controls ask for, if it is not there yet."""
        layer = self.selection.layer
        spec = self.selection.dataset
        self.choices = test_set_choices(self.session.project, spec, {s: len(v) for s, v in data.splits.items()},
                                        self.session.dataset_names(spec))
        keys = [c.key for c in self.choices]
        if self.set_keys is None or not any(k in keys for k in self.set_keys):
            self.set_keys = default_sets(self.choices)
        self.set_keys = list(dict.fromkeys(self.set_keys + [k for k in self._wanted_sets if k in keys]))
        self._wanted_sets = [k for k in self._wanted_sets if k not in keys]  # one not listed yet waits
        self.set_keys = [k for k in self.set_keys if k in keys]
        chosen = [next(c for c in self.choices if c.key == k) for k in self.set_keys]
        criteria = tuple(info.name for info in criterion_catalogue() if info.name in self.criteria)
        request = CoverageRequest(self.selection.model, bundle.fingerprint, spec, layer, self.m_box.value(), criteria)
        if request != self.runs.current:
            self._forget_cell()
            self._painted = {}
        self._lay_out(request, chosen)
        self.runs.request(request, chosen)
        self._show_all()

    # --- choosing criteria and sets ----------------------------------------------------------------

    def _fill_criteria_menu(self) -> None:
        """One checkable entry per criterion of the registry, built-ins first, then plugins'."""
        self.criteria_menu.clear()
        self.criterion_actions = {}
        for info in criterion_catalogue():
            action = self.criteria_menu.addAction(f"{info.title} — {info.help}")
            action.setCheckable(True)
            action.setChecked(info.name in self.criteria)
            action.toggled.connect(lambda on, name=info.name: self._toggle_criterion(name, on))
            self.criterion_actions[info.name] = action

    def _toggle_criterion(self, name: str, on: bool) -> None:
        chosen = [n for n in self.criteria if n != name] + ([name] if on else [])
        if not chosen:  # at least one criterion stays
            self.criterion_actions[name].setChecked(True)
            return
        self.criteria = chosen
        self.criteria_button.setText(f"Criteria ({len(chosen)})")
        self.refresh()

    def choose_criteria(self, names) -> None:
        for name, action in self.criterion_actions.items():
            action.blockSignals(True)
            action.setChecked(name in names)
            action.blockSignals(False)
        self.criteria = [n for n in names if n in self.criterion_actions]
        self.criteria_button.setText(f"Criteria ({len(self.criteria)})")
        self.refresh()

    def _fill_sets_menu(self) -> None:
        menu = self.sets_menu
        menu.clear()
        for choice in self.choices:
            action = menu.addAction(choice.description)
            action.setCheckable(True)
            action.setChecked(choice.key in (self.set_keys or []))
            action.setEnabled(not choice.reason)
            action.setToolTip(choice.reason or f"Measure {choice.title}")
            action.toggled.connect(lambda on, key=choice.key: self._toggle_set(key, on))

    def _toggle_set(self, key: str, on: bool) -> None:
        keys = [k for k in (self.set_keys or []) if k != key] + ([key] if on else [])
        if keys:  # at least one set stays
            self.choose_sets(keys)

    def choose_sets(self, keys: list[str]) -> None:
        """Measure these sets (keys of `choices`), in the order given."""
        self.set_keys = list(dict.fromkeys(keys))
        self.refresh()

    def add_stored_set(self, name: str) -> None:
        """Measure the project's stored test set `name` beside the sets chosen (once it is listed)."""
        key = f"stored:{name}"
        if self.set_keys is None or not any(c.key == key for c in self.choices):
            self._wanted_sets.append(key)  # taken up when the choices are listed again (a save lists it)
            self.refresh()
        elif key not in self.set_keys:
            self.choose_sets([*self.set_keys, key])

    def key_of(self, name: str) -> str | None:
        """The choice key of the test set `name` as the project lists it (a split, its right or wrong
        inputs, or a stored set), None when this view does not offer it."""
        for c in self.choices:
            if c.stored == name or (not c.stored and f"{c.dataset}:{c.split}" == name and not c.subset):
                return c.key
            if c.subset and name == f"{c.dataset}:{c.split}[{c.subset}]":
                return c.key
        return None

    def show_against(self, a: str, b: str) -> bool:
        """Measure the test sets `a` and `b` and show the matrices' difference of A with B: which cells only A
        covers, only B, both, or neither. False when either set is not one this view measures."""
        keys = [self.key_of(a), self.key_of(b)]
        if None in keys:
            return False
        self._wanted_against = (keys[0], keys[1])
        self.choose_sets([*(self.set_keys or []), *keys])
        return True

    def show_stored(self, how: dict, dataset_spec: str | None) -> None:
        """Measure what a stored coverage result or fit was made of (its provenance `how`): its
        criterion joins the chosen ones, its IDC layer becomes the selected layer, and the set it
        measured joins the chosen sets (a stored result of the same inputs is read back, not redone)."""
        identity = how.get("identity") or (how.get("state") or {}).get("identity")  # a fit keeps it in its state
        params = identity.get("params", {}) if isinstance(identity, dict) else {}
        criterion = how.get("criterion")
        if criterion in self.criterion_actions and criterion not in self.criteria:
            self.choose_criteria([*self.criteria, criterion])
        if criterion == "idc" and isinstance(params.get("layer"), str):
            self.selection.set_layer(params["layer"])
        measured = how.get("test")
        split = measured.get("split") if isinstance(measured, dict) else None
        if not dataset_spec or not isinstance(split, str):
            return
        key = f"{dataset_spec}:{split}" if split in ("test", "train") else f"stored:{split}"
        if self.set_keys is None:  # the defaults are known once the dataset is: added to them then
            self._wanted_sets.append(key)
        elif key not in self.set_keys and any(c.key == key for c in self.choices):
            self.choose_sets([*self.set_keys, key])

    # --- laying the view out for a request -----------------------------------------------------------

    def set_titles(self) -> list[tuple[str, str]]:
        return [(k, next(c.title for c in self.choices if c.key == k)) for k in self.set_keys or []]

    def color_of(self, key: str):
        return set_color(self.set_keys.index(key))

    def _lay_out(self, request: CoverageRequest, chosen) -> None:
        layout = (request, tuple(c.key for c in chosen))
        if layout == self._table_layout:
            return
        self._table_layout = layout
        notes = {"idc": f"({request.layer}, m = {request.m})"}
        self.table.set_layout(list(request.criteria), [(c.key, c.title, self.color_of(c.key)) for c in chosen], notes)
        self.sets_button.setText(f"Test sets ({len(chosen)})")
        self.criteria_button.setText(f"Criteria ({len(request.criteria)})")
        for box in (self.a_box, self.b_box):
            previous = box.currentData()
            box.blockSignals(True)
            box.clear()
            for c in chosen:
                box.addItem(c.title, c.key)
            keys = [c.key for c in chosen]
            if previous in keys:
                box.setCurrentIndex(keys.index(previous))
            elif box is self.b_box and len(keys) > 1:
                box.setCurrentIndex(1)
            box.blockSignals(False)
        self.difference.setEnabled(len(chosen) > 1)
        self.b_box.setEnabled(len(chosen) > 1)
        if len(chosen) < 2:
            self.difference.setChecked(False)
        if self._wanted_against is not None and all(k in (c.key for c in chosen) for k in self._wanted_against):
            a, b = self._wanted_against
            self._wanted_against = None
            for box, key in ((self.a_box, a), (self.b_box, b)):
                box.blockSignals(True)
                box.setCurrentIndex(box.findData(key))
                box.blockSignals(False)
            if self.difference.isChecked():
                self._on_matrix_choice()
            else:
                self.difference.setChecked(True)  # draws the difference

    # --- showing what the runs report ------------------------------------------------------------

    def _on_run_changed(self, key: str) -> None:
        if key not in (self.set_keys or []) or self._table_layout is None:
            return
        if self.runs.runs[key].state == RUNNING:  # values per batch: drawn at once, then at most every REDRAW_MS
            if not self._redraw.isActive():
                self._show_all()
                self._redraw.start()
        else:
            self._settled.start()

    def _show_all(self) -> None:
        self._show_table()
        self._show_summary()
        self._show_growth()
        self._show_matrices()

    def _show_table(self) -> None:
        for key in self.set_keys or []:
            run = self.runs.runs.get(key)
            for name in self.table.criteria:
                self.table.set_cell(name, key, *cell_text(run, name, self.runs.offered(key)))

    def _show_summary(self) -> None:
        request = self.runs.current
        if request is not None:
            runs = [self.runs.runs[k] for k in self.set_keys or [] if k in self.runs.runs]
            self.summary.setText(summary_text(request, self.session.datasets.get(request.dataset), runs))

    def _show_offer(self) -> None:
        """While the work is timed, say so; when it is offered, what it measures and how long it takes."""
        runs = self.runs
        if runs.timing is not None:
            self.offer_text.setText("Timing how long measuring takes on this machine…")
            self.offer_button.hide()
        elif runs.offer is not None:
            offer = runs.offer
            sets = [runs.runs[key].choice.title for key in offer.keys if key in runs.runs]
            titles = criterion_titles()
            criteria = ", ".join(titles.get(name, name) for name in runs.current.criteria)
            took = duration_text(offer.seconds)
            self.offer_text.setText(
                f"Not measured yet: {' and '.join(sets)} with {criteria}. That takes {took} on this machine "
                "now, so it waits for you." if offer.seconds is not None else
                f"Not measured yet: {' and '.join(sets)} with {criteria}. How long that takes could not be "
                "timed, so it waits for you.")
            self.offer_button.setText(f"Measure ({took})" if offer.seconds is not None else "Measure")
            self.offer_button.setToolTip("\n".join(f"{part}: {duration_text(seconds)}"
                                                   for part, seconds in offer.parts.items() if seconds >= 1))
            self.offer_button.show()
        self.offer_bar.setVisible(runs.timing is not None or runs.offer is not None)
        self._show_table()
        self._show_matrices()

    def growth_criterion(self) -> str | None:
        return self.table.current_criterion() or (self.table.criteria[0] if self.table.criteria else None)

    def _show_growth(self) -> None:
        name = self.growth_criterion()
        if name is None:
            return
        title = criterion_titles().get(name, name)
        self.growth_title.setText(f"Growth of {title} with the number of inputs")
        runs = [(self.runs.runs[k], self.color_of(k)) for k in self.set_keys or [] if k in self.runs.runs]
        self.growth.set_curves(title, *growth_curves(name, runs))

    # --- the matrices ----------------------------------------------------------------------------------

    def matrix_sets(self) -> tuple[str | None, str | None]:
        """(A, B): the set the matrices show, and the one compared with it (None without difference)."""
        a = self.a_box.currentData()
        b = self.b_box.currentData() if self.difference.isChecked() else None
        return a, (b if b != a else None)

    def _on_matrix_choice(self) -> None:
        self._painted = {}
        self._show_matrices()
        if self.cell is not None:
            self._show_cell()

    def _show_matrices(self, hidden: bool = False) -> None:
        """Draw the matrix of the tab shown (with `hidden`, the other one), and the other on the next turn."""
        if self.runs.current is None:
            return
        shown = "idc" if self.matrix_tabs.currentWidget() is self.idc else "kmnc"
        which = ("kmnc" if shown == "idc" else "idc") if hidden else shown
        self._show_matrix(which, self.idc if which == "idc" else self.kmnc)
        if not hidden:
            self._hidden_matrix.start()

    def _show_matrix(self, which: str, panel) -> None:
        a_key, b_key = self.matrix_sets()
        run_a = self.runs.runs.get(a_key) if a_key else None
        title = criterion_titles()[which]
        if which not in self.runs.current.criteria:
            self._painted.pop(which, None)
            panel.show_message(f"{title} is not measured", f"Choose {title} among the criteria to see its matrix.",
                               [(f"Measure {title}", lambda: self.choose_criteria(self.criteria + [which]))])
            return
        result = run_a.result(which) if run_a is not None else None
        if result is None or (which == "idc" and result.criterion.incc_size > MAX_DRAWN_CELLS):
            self._painted.pop(which, None)
            if self.cell is not None and self.cell[0] == which:
                self._forget_cell()
            if result is None:
                self._show_matrix_pending(which, panel, run_a)
            else:
                self._offer_smaller_m(result.criterion)
            return
        run_b = self.runs.runs.get(b_key) if b_key else None
        other = run_b.result(which) if run_b is not None else None
        painted = (id(result), id(other), self.log_scale.isChecked(), self.runs.current)
        if self._painted.get(which) == painted:
            return
        self._painted[which] = painted
        a = MatrixSet(a_key, run_a.choice.title, self.color_of(a_key), result.criterion, result.criterion.inputs_seen)
        b = MatrixSet(b_key, run_b.choice.title, self.color_of(b_key), other.criterion,
                      other.criterion.inputs_seen) if other is not None else None
        panel.show_sets(a, b, self.log_scale.isChecked(), self.runs.current.layer)
        self._show_neuron()
        if which == "idc" and self.cell is None:  # its inputs on the next turn: not drawn with the matrix at once
            QTimer.singleShot(0, self, lambda: self.cell is None and self._choose_busiest_cell())
        if self.cell is not None and self.cell[0] == which:
            panel.matrix.select_cell(self.cell[1], self.cell[2])

    def _show_matrix_pending(self, which: str, panel, run) -> None:
        title = criterion_titles()[which]
        if run is None:
            panel.show_message(f"No {title} matrix yet", "Choose a test set to measure.")
            return
        error = run.criterion_error(which)
        if error is not None:
            actions = []
            neurons = self._layer_neurons()
            if which == "idc" and neurons and self.runs.current.m > neurons:  # the layer cannot give m neurons
                m = min(neurons, DEFAULT_M)
                actions.append((f"Use m = {m}", lambda: self.m_box.setValue(m)))
            actions.append(("Try again", lambda: self.runs.retry(run.choice.key)) if run.state != DONE
                           else ("Measure again", self.runs.again))
            if run.details:
                actions.append(("Details…", lambda: report_error(self, error, run.details,
                                                                  title="Coverage could not be measured")))
            panel.show_message(f"No {title} matrix for {run.choice.title}", error_text(error), actions)
        elif run.state == RUNNING:
            panel.show_message(f"Measuring {run.choice.title}…", "The matrix appears when the set is measured; the "
                               "table and the growth plot fill in batch by batch.", busy=True)
        elif self.runs.offered(run.choice.key):
            took = duration_text(self.runs.offer.seconds)
            panel.show_message(f"{title} of {run.choice.title} is not measured yet",
                               f"Measuring takes {took} on this machine now.",
                               [(f"Measure ({took})", self.runs.accept_offer)])
        else:
            why = f"Waiting for {run.waiting_for}." if run.waiting_for else "Measured after the sets before it."
            panel.show_message(f"{title} of {run.choice.title} is waiting", why, busy=True)

    def _layer_neurons(self) -> int | None:
        bundle = self.session.models.get(self.selection.model)
        layer = next((info for info in (bundle.catalogue if bundle else []) if info.name == self.selection.layer),
                     None)
        return layer.neurons if layer is not None else None

    def _offer_smaller_m(self, idc) -> None:
        m = largest_drawable_m(idc.cluster_counts, MAX_DRAWN_CELLS)
        self.idc.show_message(
            "The IDC matrix is too large to draw",
            f"With m = {len(idc.neurons)} the layer's neurons form {idc.incc_size:,} combinations; the matrix "
            f"is drawn up to {MAX_DRAWN_CELLS:,} cells. The coverage itself is in the table. With m = {m} the "
            "matrix can be drawn.", [(f"Show m = {m}", lambda: self.m_box.setValue(m))])

    def _choose_busiest_cell(self) -> None:
        """Start with the combination most inputs of set A fall in, so its inputs are on show."""
        counts = self.idc.counts_a
        if counts.size and counts.max() > 0:
            r, c = np.unravel_index(int(np.argmax(counts)), counts.shape)
            self._choose_cell("idc", int(r), int(c))

    def _on_kmnc_rows(self) -> None:
        self._show_neuron()
        if self.cell is not None and self.cell[0] == "kmnc":  # its row now stands for another neuron
            self._forget_cell()

    def _forget_cell(self) -> None:
        self.cell = None
        self.cell_inputs.show_message("No cell chosen", "Click a cell of a matrix to see the inputs that fall in it.")

    # --- the chosen cell's inputs ----------------------------------------------------------------------

    def _choose_cell(self, which: str, row: int, col: int) -> None:
        self.cell = (which, row, col)
        panel = self.idc if which == "idc" else self.kmnc
        panel.matrix.select_cell(row, col)
        other = self.kmnc if which == "idc" else self.idc
        other.matrix.select_cell(None)
        if which == "kmnc":
            found = self.kmnc.matrix.neuron_of(row)
            if found is not None and found[0] == self.selection.layer:
                self.selection.set_neuron(found[1])
        self._show_cell()

    def _show_cell(self) -> None:
        if self.cell is None:
            return
        which, row, col = self.cell
        panel = self.idc if which == "idc" else self.kmnc
        if not panel.showing() or panel.a is None:
            self.cell_inputs.show_message("No cell chosen", "Click a cell of a matrix to see its inputs.")
            return
        sets = []
        for matrix_set in (panel.a, panel.b):
            if matrix_set is None:
                continue
            run = self.runs.runs.get(matrix_set.key)
            if which == "idc":
                positions = panel.inputs_in(row, col, matrix_set.criterion)
            else:
                sections = self.runs.kmnc_sections(matrix_set.key)
                if sections is None:
                    self.cell_inputs.show_message(
                        "Finding the section's inputs…", f"One pass over {matrix_set.title} notes the section each "
                        "input reaches at every neuron; after that every cell answers at once.", busy=True)
                    return
                if isinstance(sections, BaseException):
                    self.cell_inputs.show_message("The section's inputs could not be found", error_text(sections))
                    return
                positions = panel.inputs_in(row, col, sections)
            sets.append(self._input_set(run, matrix_set, positions))
        if which == "idc":
            title = f"Row {row + 1}, column {col + 1}: {panel.who_covers(row, col)}"
        else:
            low, high = panel.bounds(row, col)
            title = (f"{panel.neuron_name(row)}, section {col + 1:,} ({low:.4g} – {high:.4g}): "
                     f"{panel.who_covers(row, col)}")
        data = self.session.datasets.get(self.selection.dataset)
        self.cell_inputs.set_class_names(list(data.class_names) if data is not None else [])
        self.cell_inputs.show_inputs(title.replace("<b>", "").replace("</b>", ""), sets, chosen=panel.a.key)

    def _input_set(self, run, matrix_set: MatrixSet, positions: np.ndarray) -> tuple:
        """What the cell panel lists of one set: split indices of the inputs, their predictions."""
        choice, session = run.choice, self.session
        indices = np.asarray(positions, dtype=np.int64)
        name = choice.stored or choice.split  # a stored set is browsed by its name, like a split
        if run.test_indices is not None:
            indices = run.test_indices[indices]
        split = run.test_split if choice.stored else session.datasets[choice.dataset].split(choice.split)
        evaluation = session.evaluation(self.selection.model, choice.dataset, name)
        predictions = None
        if evaluation is not None:
            predictions = np.asarray(evaluation["predictions"])[indices]
        elif (not session.compatibility_problem(self.selection.model, choice.dataset)
              and (self.selection.model, choice.dataset, name) not in session.evaluation_errors):
            session.evaluate(self.selection.model, choice.dataset, name)  # the labels follow when it is done
        linked = choice.dataset == self.selection.dataset
        return matrix_set.key, matrix_set.title, name, split, indices, predictions, linked

    def _on_input_chosen(self, split: str, index: int) -> None:
        self.selection.set_input(split, index)

    # --- the linked neuron -------------------------------------------------------------------------------

    def _show_neuron(self) -> None:
        neuron = self.selection.neuron
        self.idc.matrix.set_selected_neuron(neuron)
        row = self.kmnc.matrix.row_of(self.selection.layer, neuron) if neuron is not None else None
        self.kmnc.matrix.highlight_row(row)

    # --- export --------------------------------------------------------------------------------------------

    def _export_menu(self, menu: QMenu) -> dict:
        items = {
            "idc_png": ("IDC matrix as PNG (2×)…", ".png", "idc-matrix", self.export_idc_png),
            "kmnc_png": ("KMNC matrix as PNG (2×)…", ".png", "kmnc-matrix", self.export_kmnc_png),
            "growth_png": ("Growth plot as PNG (2×)…", ".png", "coverage-growth", self.export_growth_png),
            "summary_csv": ("Summary table as CSV…", ".csv", "coverage", lambda p: export_csv(self.summary_rows, p)),
            "growth_csv": ("Growth curves as CSV…", ".csv", "coverage-growth",
                           lambda p: export_csv(self.growth_rows, p)),
            "idc_csv": ("IDC matrix as CSV…", ".csv", "idc-matrix", lambda p: export_csv(self.idc.rows, p)),
            "kmnc_csv": ("KMNC matrix as CSV (covered cells)…", ".csv", "kmnc-matrix",
                         lambda p: export_csv(self.kmnc.rows, p)),
            "cell_csv": ("The cell's inputs as CSV…", ".csv", "cell-inputs",
                         lambda p: export_csv(self.cell_inputs.rows, p)),
        }
        actions = {}
        for key, (text, suffix, name, write) in items.items():
            if key == "summary_csv":
                menu.addSeparator()
            actions[key] = menu.addAction(text, lambda suffix=suffix, name=name, write=write:
                                          self._export(suffix, name, write))
        return actions

    def _update_export_actions(self) -> None:
        done = any(self.runs.runs.get(k) is not None and self.runs.runs[k].state == DONE for k in self.set_keys or [])
        self.export_actions["idc_png"].setEnabled(self.idc.showing())
        self.export_actions["idc_csv"].setEnabled(self.idc.showing())
        self.export_actions["kmnc_png"].setEnabled(self.kmnc.showing())
        self.export_actions["kmnc_csv"].setEnabled(self.kmnc.showing())
        for key in ("growth_png", "summary_csv", "growth_csv"):
            self.export_actions[key].setEnabled(done)
        self.export_actions["cell_csv"].setEnabled(self.cell_inputs.shown is not None)

    def _export(self, suffix: str, name: str, write: Callable[[str], object]) -> None:
        filters = {".png": "PNG image (*.png)", ".csv": "CSV table (*.csv)"}
        save_as(self, "Export", f"{name}-{self.selection.model}-{self.selection.layer}{suffix}", filters[suffix],
                write)

    def export_idc_png(self, path: str):
        return export_png(self.idc.matrix.scene(), path)

    def export_kmnc_png(self, path: str):
        return export_png(self.kmnc.matrix.scene(), path)

    def export_growth_png(self, path: str):
        return export_png(self.growth.scene(), path)

    def _done_runs(self):
        for key, title in self.set_titles():
            run = self.runs.runs.get(key)
            if run is not None:
                yield key, title, run

    def summary_rows(self) -> tuple[list[str], list[list]]:
        """One row per criterion and set: the coverage, the counts behind it, and what to know about it."""
        rows = []
        for name in self.table.criteria:
            for key, title, run in self._done_runs():
                result, error = run.result(name), run.criterion_error(name)
                if result is not None:
                    v = result.value
                    rows.append([name, title, key, "" if v.fraction is None else v.fraction, v.covered,
                                 "" if v.total is None else v.total, result.criterion.inputs_seen,
                                 " | ".join(result.warnings), ""])
                elif error is not None:
                    rows.append([name, title, key, "", "", "", "", "", getattr(error, "message", str(error))])
        return ["criterion", "test_set", "test_set_key", "coverage_fraction", "covered", "total", "inputs",
                "warnings", "error"], rows

    def growth_rows(self) -> tuple[list[str], list[list]]:
        rows = []
        for name in self.table.criteria:
            for key, title, run in self._done_runs():
                result = run.result(name)
                if result is None:
                    continue
                for inputs, covered, fraction in result.curve.tolist():
                    rows.append([name, title, int(inputs), int(covered), "" if np.isnan(fraction) else fraction])
        return ["criterion", "test_set", "inputs", "covered", "coverage_fraction"], rows
