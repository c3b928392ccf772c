"""The RobOT experiment's report plot: `write_experiment_outputs` with the GUI's `save_experiment_plot`
writes a PNG of robustness against budget beside the CSV, JSON and Markdown, the Markdown shows it,
and a plotter that cannot start Qt only costs the PNG (with a warning)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtGui import QImage

from workbench.core.robustness.experiment import ExperimentResult
from workbench.core.robustness.experiment_plot import SIZE, save_experiment_plot
from workbench.core.robustness.experiment_report import write_experiment_outputs

pytestmark = pytest.mark.gui

STRATEGIES = {"be-st": 0.30, "km-st": 0.26, "deepgini": 0.22, "random": 0.12}
BUDGETS = {"1%": 1.0, "2%": 2.0, "4%": 4.0}


def fake_result(seeds=(0, 1, 2), checkpoint_mode="clean") -> ExperimentResult:
    """A small grid of plausible rows: robustness grows with the budget, BE-ST best, random worst."""
    rng = np.random.default_rng(0)
    rows = []
    for strategy, gain in STRATEGIES.items():
        for budget, percent in BUDGETS.items():
            for seed in seeds:
                lift = gain * np.log2(1 + percent) / 2.3
                rows.append({"strategy": strategy, "budget": budget, "budget_percent": percent, "seed": seed,
                             "selected": int(percent * 120), "static_ae_accuracy": 0.05 + lift + rng.normal(0, 0.02),
                             "adaptive_robust_accuracy": 0.02 + lift / 3 + rng.normal(0, 0.01),
                             "clean_accuracy": 0.905 - 0.004 * percent + rng.normal(0, 0.002),
                             "fol_mean": 2.0 - lift * 2 + rng.normal(0, 0.05), "checkpoint_mode": checkpoint_mode,
                             "optimistic": checkpoint_mode == "paper"})
    setup = {"eps": 0.1, "pool": {"candidates": 12000, "by_attack": {"fgsm": 5000, "pgd": 7000}},
             "selectable": 10800, "heldout": 1200, "fp_test": {"candidates": 2400},
             "baseline": {"static_ae_accuracy": 0.0, "adaptive_robust_accuracy": 0.01, "clean_accuracy": 0.91,
                          "fol_mean": 2.1, "adaptive_inputs": 1000}}
    params = {"strategies": list(STRATEGIES), "budgets": list(BUDGETS), "seeds": list(seeds), "preset": "robot-mnist",
              "epochs": 10, "checkpoint_mode": checkpoint_mode, "model": "lenet5-fashion", "dataset": "fashion-mnist",
              "eps_source": "--eps", "report_subset": 1000}
    return ExperimentResult(rows, setup, params)


def test_write_experiment_outputs_writes_the_plot(qapp, tmp_path):
    files = write_experiment_outputs(fake_result(), tmp_path / "exp", plot=save_experiment_plot)
    assert set(files) == {"csv", "md", "json", "png"}
    image = QImage(files["png"])
    assert not image.isNull() and (image.width(), image.height()) == SIZE
    pixels = np.array([image.pixelColor(x, y).name() for x in range(0, SIZE[0], 20) for y in range(0, SIZE[1], 20)])
    assert len(set(pixels)) > 5  # something was drawn, not a blank grab
    md = (tmp_path / "exp" / "robot_experiment.md").read_text()
    assert "![Robustness against budget per strategy](robot_experiment.png)" in md
    assert not list((tmp_path / "exp").glob("*.tmp"))


def test_a_plot_that_cannot_start_qt_only_costs_the_png(tmp_path):
    def no_qt(rows, path, title):
        raise ImportError("No module named 'PySide6'")

    said = []
    files = write_experiment_outputs(fake_result(), tmp_path, plot=no_qt, on_warning=said.append)
    assert set(files) == {"csv", "md", "json"}
    assert len(said) == 1 and "robot_experiment.png was not drawn" in said[0] and "PySide6" in said[0]
    assert "robot_experiment.png" not in (tmp_path / "robot_experiment.md").read_text()
