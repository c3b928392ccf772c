"""The Robustness view's three tabs: retraining comparison, convergence loop, fuzzing.

Each panel owns its controls and its plot or gallery and asks the view to start or cancel its job
(`start_requested`, `cancel_requested`); the view runs the jobs and feeds results back. The
defaults are quick on a CPU (two epochs, one seed); the full protocol
(docs/methods/fuzzing-and-retraining.md#the-robot-experiment) is a few clicks away and every run
records the settings it used.
"""

from __future__ import annotations

import re

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from workbench.core.errors import WorkbenchError
from workbench.core.robustness.experiment_report import STRATEGY_TITLES
from workbench.gui.views.view_inputs import duration_text
from workbench.gui.widgets.fuzz_pairs import FuzzPairs
from workbench.gui.widgets.robustness_curves import RobustnessCurves

COMPARED = ("be-st", "km-st", "deepgini", "random")  # the RobOT paper's comparison
OFFERED = ("be-st", "km-st", "deepgini", "random", "mcp", "coverage-greedy", "kmst-legacy")


def _labelled(row: QHBoxLayout, text: str, widget: QWidget, tip: str) -> None:
    label = QLabel(text)
    label.setBuddy(widget)
    widget.setToolTip(tip)
    row.addWidget(label)
    row.addWidget(widget)
    row.addSpacing(6)


def _spin(low: int, high: int, value: int) -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setValue(value)
    return box


class _JobPanel(QWidget):
    """A row of controls with a Start/Cancel button, and the content under it."""

    start_requested = Signal()
    cancel_requested = Signal()

    def __init__(self, start_text: str, start_tip: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.start_text, self.start_tip = start_text, start_tip
        self.running = False
        self.controls = QHBoxLayout()
        self.button = QPushButton(start_text)
        self.button.setToolTip(start_tip)
        self.button.clicked.connect(lambda: self.cancel_requested.emit() if self.running else self.start_requested.emit())
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(4, 4, 4, 4)
        self.layout_.addLayout(self.controls)

    def finish_controls(self) -> None:
        self.controls.addStretch(1)
        self.controls.addWidget(self.button)
        self.layout_.addWidget(self.status)

    def set_running(self, running: bool) -> None:
        self.running = running
        self.button.setText("Cancel" if running else self.start_text)


QUICK_GRID = {"strategies": list(COMPARED), "budgets": ["1%", "4%"], "seeds": [0], "epochs": 2}


class RetrainPanel(_JobPanel):
    """Strategies × budgets × seeds: fine-tune from the original weights, one curve per strategy.

    Nothing starts by itself. The quick comparison (the RobOT strategies at 1 and 4 %, one seed, two
    epochs) has its own button, which says about how long it takes on this machine."""

    grid_changed = Signal()  # strategies, budgets, seeds or epochs changed: the estimate is stale
    quick_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Retrain", "Fine-tune the original model with each strategy's pick at each budget "
                                    "and report its robustness (the RobOT protocol)", parent)
        self.strategies_button = QToolButton()
        self.strategies_button.setText("Strategies")
        self.strategies_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.strategies_button)
        self.strategy_actions = {}
        for name in OFFERED:
            action = menu.addAction(STRATEGY_TITLES[name])
            action.setCheckable(True)
            action.setChecked(name in COMPARED)
            action.toggled.connect(lambda _: self.grid_changed.emit())
            self.strategy_actions[name] = action
        self.strategies_button.setMenu(menu)
        self.strategies_button.setToolTip("The selection strategies to compare")
        self.budgets_edit = QLineEdit("1, 4")
        self.budgets_edit.setObjectName("retrainBudgets")
        self.budgets_edit.setMaximumWidth(110)
        self.seeds_box = _spin(1, 10, 1)
        self.epochs_box = _spin(1, 100, 2)
        for box in (self.seeds_box, self.epochs_box):
            box.valueChanged.connect(lambda _: self.grid_changed.emit())
        self.budgets_edit.textChanged.connect(lambda _: self.grid_changed.emit())
        self.paper_box = QCheckBox("Paper mode")
        self.paper_box.setToolTip("Keep the epoch with the best accuracy on fp_test, as the RobOT code did: model "
                                  "selection on test data, so the results are labelled optimistic")
        self.controls.addWidget(self.strategies_button)
        self.controls.addSpacing(6)
        _labelled(self.controls, "Budgets %", self.budgets_edit,
                  "Budgets as % of the selectable pool, separated by commas (the default grid: 0.5 … 10)")
        _labelled(self.controls, "Seeds", self.seeds_box, "Runs per strategy and budget (mean ± sd over them)")
        _labelled(self.controls, "Epochs", self.epochs_box, "Fine-tuning epochs (the robot-mnist preset: 10)")
        self.controls.addWidget(self.paper_box)
        self.quick_button = QPushButton("Quick comparison")
        self.quick_button.setObjectName("quickComparison")
        self.quick_button.setToolTip("BE-ST, KM-ST, DeepGini and random at 1 and 4 % of the pool, one seed, two "
                                     "epochs: a first look at which selection buys robustness")
        self.quick_button.setEnabled(False)
        self._quick: float | None = None  # the quick comparison's estimated seconds, once known
        self.quick_button.clicked.connect(self.quick_requested.emit)
        self.finish_controls()
        quick_row = QHBoxLayout()  # a row of its own: the grid's controls already fill the panel's width
        quick_row.addWidget(self.quick_button)
        quick_row.addWidget(QLabel("the RobOT strategies at 1 and 4 %, one seed, two epochs"), 1)
        self.layout_.insertLayout(1, quick_row)
        self.curves = RobustnessCurves()
        self.curves.setObjectName("retrainCurves")
        self.curves.prepare(["static", "adaptive", "clean", "fol"])  # what a comparison's rows hold
        self.layout_.addWidget(self.curves, 1)
        self.show_empty()

    def show_empty(self) -> None:
        self.curves.show_message("No retraining yet", "Press Quick comparison, or Retrain with the checked grid, to "
                                 "fine-tune the model with each strategy's selection and compare the robustness "
                                 "they give.")

    def strategies(self) -> list[str]:
        return [name for name, action in self.strategy_actions.items() if action.isChecked()]

    def set_running(self, running: bool) -> None:
        super().set_running(running)
        self.quick_button.setEnabled(not running and self._quick is not None)

    def set_estimates(self, grid: float | None, quick: float | None) -> None:
        """Say about how long the quick comparison (on its button) and the checked grid (in the Retrain
        button's tooltip) take."""
        self._quick = quick
        self.quick_button.setText(f"Quick comparison ({duration_text(quick)})" if quick else "Quick comparison")
        self.quick_button.setEnabled(quick is not None and not self.running)
        self.button.setToolTip(self.start_tip + (f" — the checked grid takes {duration_text(grid)} on this machine"
                                                 if grid else ""))

    def budgets(self) -> list[str]:
        """The budgets as "p%" strings; a bad entry raises a `WorkbenchError` naming it."""
        parts = [p for p in re.split(r"[,\s]+", self.budgets_edit.text().replace("%", " ")) if p]
        budgets = []
        for part in parts:
            try:
                value = float(part)
            except ValueError as exc:
                raise WorkbenchError(f"The budget {part!r} is not a number.",
                                     "Write budgets as percentages of the pool, e.g. 1, 2, 4.") from exc
            if not 0 < value <= 100:
                raise WorkbenchError(f"The budget {part} % is not between 0 and 100 %.",
                                     "Write budgets as percentages of the pool, e.g. 1, 2, 4.")
            budgets.append(f"{value:g}%")
        if not budgets:
            raise WorkbenchError("No budget is given.", "Write budgets as percentages of the pool, e.g. 1, 2, 4.")
        return budgets

    def seeds(self) -> list[int]:
        return list(range(self.seeds_box.value()))


class ConvergencePanel(_JobPanel):
    """Rounds of attack → fine-tune on the current model; mean FOL per round is the curve
    (docs/methods/fuzzing-and-retraining.md#convergence-loop)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Start rounds", "Attack the training set against the current model, fine-tune on all "
                                         "successes, repeat until static AE accuracy exceeds the requirement", parent)
        self.rounds_box = _spin(1, 50, 3)
        self.requirement_box = QDoubleSpinBox()
        self.requirement_box.setRange(0.0, 100.0)
        self.requirement_box.setDecimals(0)
        self.requirement_box.setSuffix(" %")
        self.requirement_box.setValue(80)
        self.epochs_box = _spin(1, 50, 2)
        self.plateau_box = QCheckBox("Stop on FOL plateau")
        self.plateau_box.setToolTip("Stop when mean FOL changes by less than 5 % over 2 rounds (off in the original)")
        _labelled(self.controls, "Rounds", self.rounds_box, "At most this many rounds (the default loop: 20)")
        _labelled(self.controls, "Requirement", self.requirement_box, "Stop once static AE accuracy exceeds this")
        _labelled(self.controls, "Epochs", self.epochs_box, "Fine-tuning epochs per round (the default loop: 5)")
        self.controls.addWidget(self.plateau_box)
        self.finish_controls()
        self.curves = RobustnessCurves()
        self.curves.setObjectName("convergenceCurves")
        self.layout_.addWidget(self.curves, 1)
        self.curves.show_message("No rounds yet", "Start the rounds to watch robustness and mean FOL converge "
                                 "as the model is retrained on its own adversarials.")


class FuzzPanel(_JobPanel):
    """FOL-guided fuzzing from training seeds, with a live count and seed → test pairs."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Start fuzzing", "Mutate seeds along the gradient of their FOL until their label flips "
                                          "(RobOT's FOL-guided fuzzer)", parent)
        self.seeds_box = _spin(1, 100_000, 100)
        self.time_box = _spin(1, 3600, 30)
        self.time_box.setSuffix(" s")
        self.project_box = QCheckBox("Stay in the ε-ball")
        self.project_box.setToolTip("Project every mutation onto the L∞ ball of the attack budget around its seed "
                                    "(off in the original; the relative L2 bound of 0.5 always applies)")
        _labelled(self.controls, "Seeds", self.seeds_box, "Training images to start from (the original: 1,000)")
        _labelled(self.controls, "Time budget", self.time_box, "Wall-clock budget of the run (the workbench's: 300 s)")
        self.join_box = QCheckBox("Add to the pool")
        self.join_box.setChecked(True)
        self.join_box.setToolTip("Score the tests like the attacks' candidates and make them selectable; "
                                 "outside the ε-ball their FOL∞ can be negative")
        self.controls.addWidget(self.project_box)
        self.controls.addWidget(self.join_box)
        self.finish_controls()
        self.pairs = FuzzPairs()
        self.pairs.setObjectName("fuzzPairs")
        self.layout_.addWidget(self.pairs, 1)
