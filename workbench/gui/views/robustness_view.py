"""The Robustness view: which tests make the model more robust (RobOT, Wang et al., ICSE 2021).

Methods: docs/methods/fol-and-selection.md and docs/methods/fuzzing-and-retraining.md.

On showing, it prepares the selected model and dataset once per ε and training-input count: the
candidate pool (FGSM ∪ PGD successes on the training images), `fp_test` (the same on the test
split, frozen), the original model's report and the clean FOL∞ of test inputs. Pools stored in the
project are read back. Then:

- **FOL histograms** compare clean test inputs with the pool's FGSM and PGD candidates and, after
  fuzzing, the fuzzer's tests; the current selection is marked under them as a rug, and clicking
  a bin shows the pool's candidates in it.
- **Selection**: a strategy and a budget pick candidates, shown as thumbnails with their FOL.
- **Retraining** fine-tunes the original model with each checked strategy at each budget and
  plots static AE, adaptive and clean accuracy and mean FOL as runs finish (one colour per
  strategy, mean ± sd over seeds). It starts only when asked: the Retrain button says about how
  long the checked grid takes on this machine (from a timed training step).
- **Convergence** runs the convergence loop (docs/methods/fuzzing-and-retraining.md#convergence-loop)
  and plots the same metrics per round.
- **Fuzzing** runs the FOL-guided fuzzer with a live count and seed → test pairs.

Every run is stored in the project with its settings and shown again next time.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QSplitter,
    QTabWidget,
    QToolButton,
    QWidget,
)

from workbench.core.errors import WorkbenchError
from workbench.core.robustness import study
from workbench.core.robustness.experiment import missing_runs, reusable_rows
from workbench.core.robustness.experiment_report import (
    experiment_series,
    strategy_title,
)
from workbench.core.robustness.pool import GENERATED
from workbench.gui.session.jobs import INTERACTIVE, LONG
from workbench.gui.session.keyed_jobs import KeyedJobs
from workbench.gui.session.selection import Selection
from workbench.gui.session.session import Session
from workbench.gui.widgets.error_dialog import report_error
from workbench.gui.views.robustness_panels import (
    OFFERED,
    QUICK_GRID,
    ConvergencePanel,
    FuzzPanel,
    RetrainPanel,
)
from workbench.gui.views.robustness_report import (
    baseline_text,
    convergence_series,
    selection_text,
    table_rows,
)
from workbench.gui.views.view_inputs import duration_text, error_text, ready_inputs
from workbench.gui.widgets.empty_state import view_frame
from workbench.gui.widgets.export import export_csv, save_as
from workbench.gui.widgets.fol_histogram import FolHistogram, fol_kind_label
from workbench.gui.widgets.selection_strip import SelectionStrip

POOL_INPUTS = {"10,000 training images": 10_000, "all training images": None}
AUTO_START_S = 30.0  # a set-up estimated to take longer waits for the user's click
SELECT_DEBOUNCE_MS = 300


def dataset_eps(dataset) -> tuple[float, str]:
    """The dataset's default ε and a tooltip saying where it comes from."""
    from workbench.core.robustness.attacks import GREY_EPS, dataset_eps_and_source

    try:
        eps, source = dataset_eps_and_source(dataset)
    except WorkbenchError:  # neither grey nor colour: the grey budget, said as a guess
        return GREY_EPS, f"{dataset.name} has no default ε; {GREY_EPS:g} is a common L∞ budget for images in [0, 1]"
    return eps, f"The workbench's {source} (docs/methods/fol-and-selection.md#attack-budgets-per-dataset)"


class RobustnessView(QWidget):
    open_model_requested = Signal()
    # Kept in the project when the window closes (gui/session/view_settings.py); ε with the dataset it is for.
    remembered = ("eps_box", "inputs_box", "strategy_box", "budget_box", "histogram.log_box",
                  "histogram.percent_box", "retrain.strategy_actions", "retrain.budgets_edit", "retrain.seeds_box",
                  "retrain.epochs_box", "retrain.paper_box", "converge.rounds_box", "converge.requirement_box",
                  "converge.epochs_box", "converge.plateau_box", "fuzz.seeds_box", "fuzz.time_box",
                  "fuzz.project_box", "fuzz.join_box")
    remembered_values = {"eps_dataset": str | None}

    def __init__(self, session: Session, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("robustnessView")
        self.session, self.selection = session, selection
        self.base: study.RobustnessBase | None = None
        self.base_key: tuple | None = None
        # "prepare", "select", "retrain", "converge", "fuzz": one job each; a new one replaces the old
        self.jobs = KeyedJobs(session.runner, self)
        self.picked = None  # the current selection's sub-pool
        self.fuzzed = None  # the last fuzzing result
        self.rows: list[dict] = []
        # The comparison the rows belong to ({"rows", "params", "setup"}: stored or just run): a grid
        # with its protocol reuses its runs; a cancelled retraining shows it again.
        self.comparison: dict | None = None
        self._shown_before: tuple[list[dict], dict | None] = ([], None)
        self.rounds: list[dict] = []
        self.eps_dataset: str | None = None  # the dataset ε was set for (its default then)
        self._fuzzing_from = None  # the set-up the running fuzzer's tests are to join

        self.eps_box = QDoubleSpinBox()
        self.eps_box.setObjectName("epsBox")
        self.eps_box.setRange(0.001, 1.0)
        self.eps_box.setDecimals(3)
        self.eps_box.setSingleStep(0.01)
        self.eps_box.editingFinished.connect(self.refresh)
        self.inputs_box = QComboBox()
        self.inputs_box.addItems(list(POOL_INPUTS))
        self.inputs_box.setToolTip("Training images attacked to build the candidate pool (a seeded subset is "
                                   "quicker; the RobOT protocol attacks all of them)")
        self.inputs_box.currentIndexChanged.connect(lambda _: self.refresh())
        self.strategy_box = QComboBox()
        self.strategy_box.setObjectName("strategyBox")
        for name in OFFERED:
            self.strategy_box.addItem(strategy_title(name), name)
        self.strategy_box.setToolTip("How to pick tests from the pool")
        self.budget_box = QDoubleSpinBox()
        self.budget_box.setObjectName("budgetBox")
        self.budget_box.setRange(0.1, 100.0)
        self.budget_box.setDecimals(1)
        self.budget_box.setSuffix(" %")
        self.budget_box.setValue(2.0)
        self.budget_box.setToolTip("Budget: % of the selectable pool")
        self.select_timer = QTimer(self)
        self.select_timer.setSingleShot(True)
        self.select_timer.setInterval(SELECT_DEBOUNCE_MS)
        self.select_timer.timeout.connect(self.preview_selection)
        self.strategy_box.currentIndexChanged.connect(lambda _: self.select_timer.start())
        self.budget_box.valueChanged.connect(lambda _: self.select_timer.start())
        self.generated_button = QToolButton()
        self.generated_button.setObjectName("addGeneratedButton")
        self.generated_button.setText("Add generated set")
        self.generated_button.setToolTip("Add the misbehaviours of one of the project's generated sets to the pool, "
                                         "labelled with the class they were generated as, to select and retrain with")
        self.generated_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.generated_button.setMenu(QMenu(self))
        self.generated_button.menu().aboutToShow.connect(self._list_generated_sets)
        self.export_button = QToolButton()
        self.export_button.setText("Export")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.export_button.setMenu(self._export_menu())

        controls = QHBoxLayout()
        for text, widget in (("ε", self.eps_box), ("Pool from", self.inputs_box), ("Strategy", self.strategy_box),
                             ("Budget", self.budget_box)):
            label = QLabel(text)
            label.setBuddy(widget)
            controls.addWidget(label)
            controls.addWidget(widget)
            controls.addSpacing(6)
        controls.addWidget(self.generated_button)
        controls.addWidget(self.export_button)
        controls.addStretch(1)  # the buttons beside the settings: seen even where the view is wider than its window
        self.summary = QLabel()
        self.summary.setObjectName("robustnessSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.histogram = FolHistogram()
        self.histogram.setObjectName("folHistogram")
        self.histogram.bin_clicked.connect(self.show_bin)
        self.strip = SelectionStrip()
        self.strip.setObjectName("selectionStrip")
        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.histogram)
        left.addWidget(self.strip)
        left.setSizes([420, 220])
        self.retrain, self.converge, self.fuzz = RetrainPanel(), ConvergencePanel(), FuzzPanel()
        self.tabs = QTabWidget()
        self.tabs.setObjectName("robustnessTabs")
        self.tabs.addTab(self.retrain, "Retraining")
        self.tabs.addTab(self.converge, "Convergence")
        self.tabs.addTab(self.fuzz, "Fuzzing")
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(self.tabs)
        split.setSizes([520, 680])
        self.stack = view_frame(self, controls, self.summary, split)

        self.retrain.start_requested.connect(self.start_retraining)
        self.retrain.quick_requested.connect(self.start_quick_comparison)
        self.retrain.grid_changed.connect(self.update_retraining_estimate)
        self.retrain.cancel_requested.connect(lambda: self._cancel("retrain"))
        self.converge.start_requested.connect(self.start_convergence)
        self.converge.cancel_requested.connect(lambda: self._cancel("converge"))
        self.fuzz.start_requested.connect(self.start_fuzzing)
        self.fuzz.cancel_requested.connect(lambda: self._cancel("fuzz"))
        selection.changed.connect(lambda what: what in ("model", "dataset") and self.refresh())
        for signal in (session.model_loaded, session.model_failed, session.dataset_loaded, session.dataset_failed):
            signal.connect(lambda *_: self.refresh())
        session.ready.connect(self.refresh)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh()

    # --- preparing ---------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Prepare the pools for the current model, dataset, ε and input count, unless that is done."""
        if not self.isVisible() or not self.session.is_ready:
            return
        bundle, data = ready_inputs(self.session, self.selection, self.stack, self.open_model_requested.emit,
                                    "its robustness is tested here", "No dataset to attack")
        if bundle is None:
            return
        if "test" not in data.splits or "train" not in data.splits:
            self.stack.show_message("This dataset has no training and test split",
                                    "Robustness testing attacks the training split for candidates and the test split "
                                    "for evaluation; choose a dataset with both.")
            return
        self.stack.show_content()
        if self.eps_dataset != self.selection.dataset or not self.eps_box.toolTip():
            eps, tip = dataset_eps(data)
            if self.eps_dataset != self.selection.dataset:  # else ε is the one kept from last time
                self.eps_dataset = self.selection.dataset
                self.eps_box.setValue(eps)
            self.eps_box.setToolTip(f"L∞ attack budget ε. {tip}")
        key = (self.selection.model, self.selection.dataset, bundle.fingerprint, round(self.eps_box.value(), 6),
               POOL_INPUTS[self.inputs_box.currentText()])
        if key == self.base_key:
            return
        self.base_key, self.base, self.picked, self.fuzzed, self.rows, self.rounds = key, None, None, None, [], []
        self.comparison, self._shown_before = None, ([], None)
        for what in ("estimate", "prepare", "select", "retrain", "converge", "fuzz"):  # the previous set-up's
            self._cancel(what)
        self.retrain.set_running(False)
        self.converge.set_running(False)
        self.fuzz.set_running(False)
        self._draw_retraining(running=False)
        self.converge.curves.show_message("No rounds yet", "Start the rounds to watch robustness and mean FOL "
                                          "converge as the model is retrained on its own adversarials.")
        self.fuzz.pairs.clear_pairs()
        self.strip.clear_candidates()
        self.summary.setText("")
        model, dataset, fingerprint, eps, inputs = key
        if study.pools_stored(self.session.project, fingerprint, eps, inputs):  # read back, not attacked again
            self._prepare(key)
            return
        # Building the pools can take minutes: it starts by itself only when it is quick on this machine.
        self.histogram.show_message("Timing the set-up…", "", busy=True)
        job = self.jobs.run("estimate", f"Time the robustness set-up of {model}", study.setup_seconds, bundle.model,
                            data, inputs, lane=INTERACTIVE, view="robustness", group="estimate", report_errors=False,
                            portable=True)
        job.finished.connect(lambda seconds, key=key: self._on_estimated(key, seconds))
        job.failed.connect(lambda exc, key=key: self._on_estimated(key, None))
        job.cancelled.connect(lambda key=key: self._on_estimated(key, None))  # offered, with no estimate

    def _on_estimated(self, key: tuple, seconds: float | None) -> None:
        """Start a quick set-up; offer a long one (or one of unknown length) as a button with its time."""
        if key != self.base_key:
            return
        if seconds is not None and seconds <= AUTO_START_S:
            self._prepare(key)
            return
        data = self.session.datasets[key[1]]
        train, test, inputs = len(data.split("train")), len(data.split("test")), key[4]
        attacked = train if inputs is None else min(inputs, train)
        self.histogram.show_message(
            "The candidate pool is not built yet",
            f"FGSM and PGD attack {attacked:,} training images and the {test:,} test images, and FOL is computed "
            f"for every adversarial: {duration_text(seconds)} on this machine. The pools are stored in the project "
            "and read back next time.",
            [(f"Build the candidate pool ({duration_text(seconds)})", lambda: self._prepare(key))])

    def _prepare(self, key: tuple) -> None:
        """Build (or read back) the pools, `fp_test` and the baseline for `key`."""
        if key != self.base_key:
            return
        model, dataset, _, eps, inputs = key
        bundle, data = self.session.models[model], self.session.datasets[dataset]
        self.histogram.show_message("Attacking the training and test images…",
                                    "FGSM and PGD build the candidate pool and fp_test; FOL is computed for each "
                                    "candidate.", busy=True)
        job = self.jobs.run(
            "prepare", f"Robustness set-up of {model} on {self.session.dataset_title(dataset)} (ε = {eps:g})",
            study.prepare_robustness, bundle.model, data, eps, inputs, 0, project=self.session.project, lane=LONG,
            view="robustness", group="prepare", report_errors=False)
        self._track("prepare", job)
        job.finished.connect(lambda run, key=key: self._on_prepared(key, run))
        job.failed.connect(lambda exc, key=key: key == self.base_key and self.histogram.show_message(
            "The candidate pool could not be built", error_text(exc), [("Try again", self._retry)]))
        job.cancelled.connect(lambda key=key: key == self.base_key and self.histogram.show_message(
            "The set-up was cancelled", "", [("Start again", self._retry)]))

    def _retry(self) -> None:
        self.base_key = None
        self.refresh()

    def _on_prepared(self, key: tuple, base) -> None:
        if key != self.base_key:
            return
        self.base = base
        self.fuzzed = base.fuzz_tests  # fuzzer tests that joined the pool before the project was closed
        fuzzed = int(np.sum(base.setup.pool.attack == "fuzz"))
        joined = f" The pool holds {fuzzed:,} fuzzer tests too." if fuzzed else ""
        self.summary.setText(baseline_text(self.base.setup) +
                             (" Pools read back from the project." if self.base.reused else "") + joined)
        self._draw_histograms()
        self._show_stored_runs()
        self.preview_selection()
        self.update_retraining_estimate()

    def update_retraining_estimate(self) -> None:
        """How long the checked grid and the quick comparison take (neither starts by itself)."""
        grid = quick = None
        if self.base is not None:
            quick = study.retraining_seconds(self.base, **QUICK_GRID,
                                             done=self._reusable(self.base, QUICK_GRID["epochs"]))
            try:
                strategies, budgets = self.retrain.strategies(), self.retrain.budgets()
            except WorkbenchError:
                strategies, budgets = [], []
            if strategies and budgets:
                epochs = self.retrain.epochs_box.value()
                grid = study.retraining_seconds(self.base, strategies, budgets, self.retrain.seeds(), epochs,
                                                done=self._reusable(self._grid_base(), epochs))
        self.retrain.set_estimates(grid, quick)

    def _draw_histograms(self) -> None:
        base = self.base
        pool = base.setup.pool
        sets = {"clean test": base.clean_fol}
        for attack in ("fgsm", "pgd"):
            sets[f"{attack.upper()} (train pool)"] = pool.scores["fol_linf"][pool.attack == attack]
        if self.fuzzed is not None and len(self.fuzzed):
            sets["fuzzed"] = self.fuzzed.fol_linf
        if np.any(pool.attack == GENERATED):
            sets["generated"] = pool.scores["fol_linf"][pool.attack == GENERATED]
        self.histogram.set_sets(fol_kind_label("fol_linf", base.setup.eps), sets)
        if self.picked is not None:
            self.histogram.mark_selected(self.picked.scores["fol_linf"],
                                         f"{self.strategy_box.currentText()} selection")

    def _show_stored_runs(self) -> None:
        """The newest stored runs for these weights and ε (read by the set-up job), unless this view made newer ones."""
        stored = self.base.stored_runs.get("experiment")
        if stored and not self.rows:
            self.comparison = stored
            self.rows = list(stored["rows"])
            self._draw_retraining(running=False, note=f"Stored run {stored['name']}")
        stored = self.base.stored_runs.get("convergence")
        if stored and not self.rounds:
            self.rounds = list(stored["rows"])
        self._draw_convergence(running=False, note=(f"Stored run {stored['name']}: {stored.get('stop_reason', '')}"
                                                    if stored else ""))

    # --- selection -----------------------------------------------------------------------------------

    def preview_selection(self) -> None:
        if self.base is None:
            return
        strategy = self.strategy_box.currentData()
        budget = f"{self.budget_box.value():g}%"
        self._cancel("select")
        job = self.jobs.run("select", f"Select {budget} with {strategy_title(strategy)}", study.select_candidates,
                            self.base, strategy, budget, 0, uses_device=strategy == "coverage-greedy",
                            lane=INTERACTIVE, view="robustness", group="select", report_errors=False, portable=True)
        self._track("select", job)
        base = self.base
        job.finished.connect(lambda result, base=base: base is self.base and self._show_selection(*result))
        job.failed.connect(lambda exc: self.strip.clear_candidates("No selection", error_text(exc)))

    def _show_selection(self, chosen, picked) -> None:
        self.picked = picked
        class_names = list(self.session.datasets[self.selection.dataset].class_names)
        self.strip.set_candidates(picked.images, picked.scores["fol_linf"], picked.labels, picked.probs.argmax(1),
                                  picked.attack, class_names, title=selection_text(chosen, picked))
        self.histogram.mark_selected(picked.scores["fol_linf"], f"{strategy_title(chosen.strategy)} selection")

    def show_bin(self, index: int) -> None:
        """The pool's candidates in a clicked histogram bin, as thumbnails (the pool's sets only)."""
        if self.base is None:
            return
        pool = self.base.setup.pool
        picked = [np.flatnonzero(pool.attack == attack)[self.histogram.members(f"{attack.upper()} (train pool)", index)]
                  for attack in ("fgsm", "pgd")]
        chosen = pool.subset(np.sort(np.concatenate(picked)))
        low, high = self.histogram.bin_range(index)
        class_names = list(self.session.datasets[self.selection.dataset].class_names)
        self.strip.set_candidates(chosen.images, chosen.scores["fol_linf"], chosen.labels, chosen.probs.argmax(1),
                                  chosen.attack, class_names,
                                  title=f"{len(chosen):,} pool candidates with FOL∞ in [{low:.3g}, {high:.3g})")

    # --- retraining ----------------------------------------------------------------------------------

    def start_quick_comparison(self) -> None:
        """The RobOT strategies at 1 and 4 %, one seed, two epochs, whatever the panel says."""
        self.start_retraining(QUICK_GRID)

    def start_retraining(self, grid: dict | None = None) -> None:
        """Retrain with the panel's grid, or with `grid` (strategies, budgets, seeds, epochs)."""
        if self.base is None or self.jobs.running("retrain"):
            return
        try:
            strategies, budgets = (grid["strategies"], grid["budgets"]) if grid else \
                (self.retrain.strategies(), self.retrain.budgets())
            if not strategies:
                raise WorkbenchError("No strategy is checked.", "Check at least one strategy to retrain with.")
        except WorkbenchError as exc:
            report_error(self, exc, title="Cannot retrain")
            return
        seeds, epochs = (grid["seeds"], grid["epochs"]) if grid else \
            (self.retrain.seeds(), self.retrain.epochs_box.value())
        base = self.base if grid else self._grid_base()
        done = self._reusable(base, epochs)
        if not missing_runs(done, strategies, budgets, seeds):
            self.retrain.status.setText(f"Every run of this grid is shown already ({len(self.rows)} runs); "
                                        "add a strategy, budget or seed to run more.")
            return
        name = f"retraining {base.model} eps={base.setup.eps:g} {time.strftime('%Y-%m-%d %H:%M:%S')}"
        job = self.jobs.run(
            "retrain",
            f"Retrain {base.model}: {len(strategies)} strategies × {len(budgets)} budgets × {len(seeds)} seeds",
            study.retrain_strategies, base, strategies, budgets, seeds, epochs, name, project=self.session.project,
            done=done, lane=LONG, view="robustness", group="retrain", report_errors=False)
        key = self.base_key
        self._track("retrain", job, lambda result, exc: key == self.base_key and self._retrain_ended(result, exc))
        self._shown_before = (self.rows, self.comparison)
        self.rows = list(done)
        self.retrain.set_running(True)
        if done:  # the comparison stays; only its missing runs are run
            self._draw_retraining(running=False)
        else:
            self.retrain.curves.show_message("Retraining…", "The first points appear when the first run ends.",
                                             busy=True)
        job.partial.connect(self._if_current("retrain", job, self._on_retrain_row))
        job.progress.connect(lambda _done, _total, message: self.retrain.status.setText(message))

    def _grid_base(self) -> study.RobustnessBase:
        """The set-up the panel's grid retrains on: the view's, in paper checkpointing when that is checked
        (a copy: the view's set-up keeps clean checkpointing)."""
        if self.retrain.paper_box.isChecked():
            return replace(self.base, setup=replace(self.base.setup, checkpoint_mode="paper"))
        return self.base

    def _reusable(self, base: study.RobustnessBase, epochs: int) -> list[dict]:
        """The shown comparison's runs that a grid on `base` with `epochs` epochs can keep."""
        return reusable_rows(self.comparison, base.setup, epochs)

    def _on_retrain_row(self, row: dict) -> None:
        if "strategy" in row:
            self.rows.append(row)
            self._draw_retraining(running=True)

    def _retrain_ended(self, result, exc: BaseException | None) -> None:
        self.retrain.set_running(False)
        if result is not None:
            self.comparison = {"rows": result.rows, "params": result.params, "setup": result.setup}
            self.rows = list(result.rows)
            note = ""
        else:  # cancelled or failed: nothing new was stored, so the comparison from before is shown again
            self.rows, self.comparison = self._shown_before
            stopped = "cancelled" if exc is None else error_text(exc)
            note = f"Stopped: {stopped}" + ("; showing the comparison from before" if self.rows else "")
        self.update_retraining_estimate()
        self._draw_retraining(running=False, note=note)
        if exc is not None and not self.rows:
            self.retrain.curves.show_message("Retraining failed", error_text(exc))

    def _draw_retraining(self, running: bool, note: str = "") -> None:
        curves = self.retrain.curves
        if not self.rows:
            if not running:
                self.retrain.show_empty()
            return
        curves.set_series("Budget (% of the selectable pool)", experiment_series(self.rows, running))
        baseline = self.base.setup.baseline if self.base else {}
        for field, metric in (("adaptive_robust_accuracy", "adaptive"), ("clean_accuracy", "clean")):
            if field in baseline:
                curves.set_reference(metric, 100 * baseline[field], "original")
        optimistic = any(r.get("optimistic") for r in self.rows)
        mode = " (paper mode: optimistic)" if optimistic else ""
        count = len(self.rows)
        self.retrain.status.setText(note or f"{count} run{'s' * (count != 1)}{mode}")

    # --- convergence ---------------------------------------------------------------------------------

    def start_convergence(self) -> None:
        if self.base is None or self.jobs.running("converge"):
            return
        panel = self.converge
        name = f"convergence {self.base.model} eps={self.base.setup.eps:g} {time.strftime('%Y-%m-%d %H:%M:%S')}"
        job = self.jobs.run(
            "converge",
            f"Convergence rounds of {self.base.model}", study.run_convergence, self.base, panel.rounds_box.value(),
            panel.requirement_box.value() / 100.0, panel.epochs_box.value(), POOL_INPUTS[self.inputs_box.currentText()],
            name, project=self.session.project, lane=LONG, view="robustness", group="converge", report_errors=False)
        self._track("converge", job, self._convergence_ended)
        self.rounds = []
        panel.set_running(True)
        panel.curves.show_message("Round 0…", "Each round reports, attacks the training set and fine-tunes.", busy=True)
        job.partial.connect(self._if_current("converge", job, self._on_round))
        job.progress.connect(lambda done, total, message: panel.status.setText(message))

    def _on_round(self, row: dict) -> None:
        if "round" in row:
            self.rounds.append(row)
            self._draw_convergence(running=True)

    def _convergence_ended(self, result, exc: BaseException | None) -> None:
        self.converge.set_running(False)
        note = ""
        if result is not None:
            note = f"{result.stop_reason}; requirement {'met' if result.met else 'not met'}"
        elif exc is not None:
            note = f"Stopped: {error_text(exc)}"
        self._draw_convergence(running=False, note=note)

    def _draw_convergence(self, running: bool, note: str = "") -> None:
        curves = self.converge.curves
        if not self.rounds:
            return
        curves.set_series("Round", convergence_series(self.rounds, running))
        curves.set_reference("static", self.converge.requirement_box.value(), "requirement")
        self.converge.status.setText(note or f"{len(self.rounds)} rounds")

    # --- fuzzing -------------------------------------------------------------------------------------

    def start_fuzzing(self) -> None:
        if self.base is None or self.jobs.running("fuzz"):
            return
        panel, data = self.fuzz, self.session.datasets[self.selection.dataset]
        bundle = self.session.models[self.selection.model]
        name = f"fuzzed {self.base.model} {time.strftime('%Y-%m-%d %H:%M:%S')}"
        job = self.jobs.run(
            "fuzz",
            f"Fuzz {self.base.model} from {panel.seeds_box.value()} seeds", study.run_fuzzer, self.base, bundle.model,
            data, panel.seeds_box.value(), float(panel.time_box.value()), panel.project_box.isChecked(),
            panel.join_box.isChecked(), 0, name, project=self.session.project, lane=LONG, view="robustness",
            group="fuzz", report_errors=False)
        self._track("fuzz", job, lambda run, exc, data=data: self._fuzz_ended(run, exc, data))
        self._fuzzing_from = self.base
        panel.set_running(True)
        panel.pairs.clear_pairs("Fuzzing…", "Tests appear here when the run ends.")
        panel.pairs.set_progress(0, panel.seeds_box.value(), 0.0)
        job.partial.connect(self._if_current("fuzz", job, lambda p: "tests" in p and panel.pairs.set_progress(
            p["tests"], p["seeds_active"], p["elapsed_s"])))

    def _fuzz_ended(self, run, exc: BaseException | None, data) -> None:
        """Show the fuzzer's tests beside their seeds from `data`, the dataset the run fuzzed."""
        panel = self.fuzz
        panel.set_running(False)
        if run is None:
            panel.pairs.clear_pairs("Fuzzing stopped", error_text(exc) if exc else "The run was cancelled.")
            return
        result = self.fuzzed = run.tests
        seeds = data.split("train").numpy(result.seed_index)
        panel.pairs.set_pairs(seeds, result.images, result.predicted_seed_label, result.adversarial_label,
                              result.grad_l2, result.dist_l2, list(data.class_names))
        p = result.params
        joined = run.joined
        if joined is not None and self.base is self._fuzzing_from:  # the set-up has not changed meanwhile
            self.base = joined
            self.summary.setText(baseline_text(joined.setup) + f" The pool holds {len(result):,} fuzzer tests too.")
            self.preview_selection()
        note = "added to the pool; " if joined is not None else ""
        panel.pairs.set_progress(len(result), p.get("seeds_used", 0), p.get("elapsed_s", 0.0), running=False,
                                 note=f"{note}stopped: {p.get('stop_reason', '')}")
        if self.base is not None:
            self._draw_histograms()

    # --- generated sets --------------------------------------------------------------------------------

    def _list_generated_sets(self) -> None:
        """The project's generated sets, each an action that adds its misbehaviours to the pool."""
        from workbench.core.generation.generated import ROLE

        menu = self.generated_button.menu()
        menu.clear()
        names = [t.name for t in self.session.stored_testsets(self.selection.dataset) if t.source.role == ROLE]
        pool = self.base.setup.pool if self.base is not None else None
        for name in names:
            action = menu.addAction(name, lambda name=name: self.add_generated_set(name))
            action.setEnabled(pool is not None and name not in pool.params.get("joined_sets", ()))
        if not names:
            menu.addAction("No generated sets in this project (make one in the Generation view)").setEnabled(False)
        elif pool is None:
            menu.addAction("The pool is not ready yet").setEnabled(False)

    def add_generated_set(self, name: str) -> None:
        """Score the misbehaviours of the generated set `name` and add them to a copy of the pool."""
        if self.base is None or self.jobs.running("generated"):
            return
        before = self.base
        job = self.jobs.run("generated", f"Add {name} to the pool", join_generated_set, before, name,
                            project=self.session.project, lane=INTERACTIVE, view="robustness")
        self._track("generated", job, lambda base, exc: self._generated_added(before, base, exc, name))
        self.generated_button.setEnabled(False)

    def _generated_added(self, before, base, exc: BaseException | None, name: str) -> None:
        self.generated_button.setEnabled(True)
        if base is None:
            if exc is not None:
                self.summary.setText(baseline_text(before.setup) + f" {name} was not added: {error_text(exc)}")
            return
        if self.base is not before:  # the set-up changed meanwhile: the joined copy belongs to the old one
            return
        self.base = base
        self.summary.setText(baseline_text(base.setup))
        self._draw_histograms()
        self.preview_selection()
        self.update_retraining_estimate()

    # --- jobs and export -------------------------------------------------------------------------------

    def _if_current(self, what: str, job, slot):
        """`slot`, called only while `job` is still the view's `what` job (a replaced one's values are dropped)."""
        number = job.record.id  # not the job itself: a slot that refers to its sender makes a cycle
        return lambda value: self.jobs.is_current(what, number) and slot(value)

    def _track(self, what: str, job, ended=None) -> None:
        """`ended(result or None, exception or None)` when the view's `what` job ends."""
        if ended is not None:
            job.finished.connect(lambda result: ended(result, None))
            job.failed.connect(lambda exc: ended(None, exc))
            job.cancelled.connect(lambda: ended(None, None))

    def _cancel(self, what: str) -> None:
        self.jobs.cancel(what)

    def _export_menu(self) -> QMenu:
        """Tables behind the view as CSV (each plot's own Export button saves it as PNG or SVG)."""
        menu = QMenu(self)
        for title, rows in (("Retraining runs", lambda: table_rows(self.rows)),
                            ("Convergence rounds", lambda: table_rows(self.rounds)),
                            ("Selected candidates", self._selection_rows),
                            ("Fuzzing pairs", lambda: self.fuzz.pairs.csv_rows())):
            menu.addAction(f"{title} as CSV…", lambda rows=rows, title=title: self._save_csv(rows, title))
        return menu

    def _selection_rows(self) -> tuple[list[str], list[list]]:
        p = self.picked
        if p is None:
            return ["source_index"], []
        header = ["source_index", "attack", "label", "prediction", *p.scores]
        return header, [[int(p.source_index[i]), str(p.attack[i]), int(p.labels[i]), int(p.probs[i].argmax()),
                         *(float(v[i]) for v in p.scores.values())] for i in range(len(p))]

    def _save_csv(self, rows, title: str) -> None:
        save_as(self, f"Save {title}", f"{title.lower().replace(' ', '-')}.csv", "CSV (*.csv)",
                lambda path: export_csv(rows, path))

    def status_text(self) -> str:
        return self.summary.text()


def join_generated_set(ctx, base: study.RobustnessBase, name: str, project=None) -> study.RobustnessBase:
    """`base` with the misbehaviours of the project's generated set `name` in its pool (attack "generated")."""
    from workbench.core.generation.generated import generated_for_model
    from workbench.core.robustness.pool import generated_candidates

    setup = base.setup
    arrays = generated_for_model(ctx.stage(0, 2, f"reading {name}"), project, name, setup.model, setup.dataset)
    candidates = generated_candidates(ctx.stage(1, 2, "scoring its misbehaviours"), setup.model, arrays, setup.eps,
                                      setup.pool.params.get("loss_mode", "logits"), what=f"generated set {name!r}")
    joined = study.join_pool(base, candidates)
    joined.setup.pool.params["joined_sets"] = [*setup.pool.params.get("joined_sets", []), name]
    return joined
