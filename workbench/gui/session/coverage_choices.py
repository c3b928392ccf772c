"""What the Coverage view can measure: its criteria (from the criterion registry, plugins' included)
and the test sets it offers for the selected dataset.

Test sets: the selected dataset's test and training splits, the test split's correctly classified
and misclassified inputs (from the stored evaluation of the model), and the other test sets the
project lists, stored ones included. Two comparisons suit the difference view: test vs train (the
default) shows the combinations the training data reaches that the test set never exercises; correct vs misclassified
splits one test set in two, and combinations only misclassified inputs reach point at behaviour the
model gets wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtGui import QColor

from workbench.core.coverage.protocol import CoverageValue
from workbench.core.coverage.registry import criterion_catalogue
from workbench.core.labeling.labelled_sets import list_testsets

# Okabe–Ito colours: told apart with any colour vision, and never used by the count colour map.
SET_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000")


def criterion_titles() -> dict[str, str]:
    """Short titles of every known criterion (plugins' included), for headers and legends."""
    return {info.name: info.title for info in criterion_catalogue()}


def criterion_help() -> dict[str, str]:
    return {info.name: info.help for info in criterion_catalogue()}


def coverage_text(value: CoverageValue | None) -> str:
    """'28.9 % — 74 / 256' (a tiny share as '< 0.1 %', never a misleading 0.0); a count without a
    denominator as '1,234'."""
    if value is None:
        return "—"
    if value.total is None:
        return f"{value.covered:,}"
    if value.fraction is None:
        return f"undefined — {value.covered:,} / {value.total:,}"
    percent = "< 0.1" if 0 < value.fraction < 0.0005 else f"{100 * value.fraction:.1f}"
    return f"{percent} % — {value.covered:,} / {value.total:,}"


def set_color(position: int) -> QColor:
    return QColor(SET_COLORS[position % len(SET_COLORS)])


@dataclass(frozen=True)
class TestSetChoice:
    """A test set the view can measure: a split of a dataset, or the correct/misclassified part of one."""

    key: str  # stable id, e.g. "fashion-mnist:test:misclassified"
    title: str  # short, for table headers and legends
    dataset: str  # dataset spec
    split: str
    subset: str | None = None  # None, "correct" or "misclassified"
    stored: str = ""  # the project test set this is (an attack pool, fp_test, fuzzer tests, a selection, …)
    description: str = ""  # a menu line
    reason: str = ""  # why it cannot be measured, when it cannot

    @property
    def needs_predictions(self) -> bool:
        return self.subset is not None

    def indices(self, labels: np.ndarray, predictions: np.ndarray | None) -> np.ndarray | None:
        """The split's indices this set holds (None: all of them)."""
        if self.subset is None:
            return None
        wrong = np.asarray(predictions) != np.asarray(labels)
        return np.flatnonzero(wrong if self.subset == "misclassified" else ~wrong).astype(np.int64)


def test_set_choices(project, dataset_spec: str, splits: dict[str, int],
                     dataset_names: set[str] | None = None) -> list[TestSetChoice]:
    """The sets offered for the selected dataset (`splits`: its split sizes), then the project's other
    test sets: other datasets' splits and every stored set (pools, fp_test, fuzzer tests, selections,
    subsets), measured against the selected dataset's criteria. A stored set made from another
    dataset is listed with the reason it is not measured here."""
    choices = []
    for split in ("test", "train"):
        if splits.get(split):
            choices.append(TestSetChoice(f"{dataset_spec}:{split}", split, dataset_spec, split,
                                         description=f"{split} split ({splits[split]:,} images)"))
    if splits.get("test"):
        for subset, title, what in (("correct", "test ✓ right", "correctly classified"),
                                    ("misclassified", "test ✗ wrong", "misclassified")):
            choices.append(TestSetChoice(f"{dataset_spec}:test:{subset}", title, dataset_spec, "test", subset,
                                         description=f"test split, {what} images only"))
    known = {c.key for c in choices}
    for info in list_testsets(project):
        if info.source.kind != "split":
            made_from = info.source.dataset
            known = (dataset_names or set()) | {dataset_spec}  # the names results record for this dataset
            reason = (f"{info.name} was made from {made_from}; select that dataset to measure it."
                      if made_from and made_from not in known else info.problem)
            choices.append(TestSetChoice(f"stored:{info.name}", info.name, dataset_spec, "", stored=info.name,
                                         description=f"{info.name} — {info.source.describe()}"
                                         + (f", {info.size:,} inputs" if info.size is not None else ""),
                                         reason=reason))
    for entry in project.testsets:
        if entry.get("dataset") and entry.get("split") and not entry.get("artifact"):
            key = f"{entry['dataset']}:{entry['split']}"
            if key not in known:
                known.add(key)
                how = f" — {entry['how']}" if entry.get("how") else ""
                choices.append(TestSetChoice(key, entry["name"], entry["dataset"], entry["split"],
                                             description=f"{entry['name']}{how}"))
    return choices


def default_sets(choices: list[TestSetChoice]) -> list[str]:
    """The test split and the training split: what the test set exercises of what training reached."""
    keys = [c.key for c in choices if c.subset is None and not c.stored and not c.reason]
    return keys[:2]
