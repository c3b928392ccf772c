"""What the Coverage view can measure: its criteria, in groups that run and fail together, and the
test sets it offers for the selected dataset.

Test sets: the selected dataset's test and training splits, the test split's correctly classified
and misclassified inputs (from the stored evaluation of the model), and the other test sets the
project lists. Two comparisons suit the difference view: test vs train (the default) shows the
combinations the training data reaches that the test set never exercises; correct vs misclassified
splits one test set in two, and combinations only misclassified inputs reach point at behaviour the
model gets wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtGui import QColor

from workbench.core.coverage.protocol import CoverageValue

# Criteria in the order the summary table lists them: (name, title, on by default, group).
# A group is measured in one pass and fails as one; IDC and surprise adequacy get their own so an m
# the layer cannot give, or a singular density, does not stop the neuron criteria.
CRITERIA = (
    ("idc", "IDC", True, "idc"),
    ("nc", "NC", True, "neuron"),
    ("kmnc", "KMNC", True, "neuron"),
    ("nbc", "NBC", True, "neuron"),
    ("snac", "SNAC", True, "neuron"),
    ("tknc", "TKNC", True, "neuron"),
    ("tknp", "TKNP", False, "neuron"),
    ("lsa", "LSC", False, "surprise"),
    ("dsa", "DSC", False, "surprise"),
    ("mdsa", "MDSC", False, "surprise"),
)
CRITERION_TITLES = {name: title for name, title, _, _ in CRITERIA}
CRITERION_HELP = {
    "idc": "Importance-Driven Coverage: combinations of the important neurons' activation clusters",
    "nc": "Neuron Coverage: neurons whose scaled value exceeds 0.75 for some input",
    "kmnc": "k-Multisection Neuron Coverage: sections of each neuron's training range (k = 1000)",
    "nbc": "Neuron Boundary Coverage: values below or above the training range",
    "snac": "Strong Neuron Activation Coverage: values above the training range",
    "tknc": "Top-k Neuron Coverage: neurons among the 3 most active of their layer for some input",
    "tknp": "Top-k Neuron Patterns: distinct patterns of top-3 neurons (a count, no denominator)",
    "lsa": "Likelihood-based Surprise Coverage (slower: a density per class)",
    "dsa": "Distance-based Surprise Coverage (slower: nearest training traces)",
    "mdsa": "Mahalanobis-distance Surprise Coverage (slower)",
}
DEFAULT_CRITERIA = tuple(name for name, _, on, _ in CRITERIA if on)
# Okabe–Ito colours: told apart with any colour vision, and never used by the count colour map.
SET_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000")


def criterion_groups(names) -> list[tuple[str, ...]]:
    """The chosen criteria as groups measured together, in table order."""
    groups: dict[str, list[str]] = {}
    for name, _, _, group in CRITERIA:
        if name in names:
            groups.setdefault(group, []).append(name)
    return [tuple(g) for g in groups.values()]


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


def test_set_choices(project, dataset_spec: str, splits: dict[str, int]) -> list[TestSetChoice]:
    """The sets offered for the selected dataset (`splits`: its split sizes), then the project's other
    test sets; stored test-set artifacts are listed with the reason they cannot be measured here."""
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
    for entry in project.testsets:
        if entry.get("artifact"):
            choices.append(TestSetChoice(f"artifact:{entry['name']}", entry["name"], "", "",
                                         description=f"{entry['name']} (a stored test set)",
                                         reason="The Coverage view measures dataset splits; stored test sets "
                                                "are not measured here yet."))
        elif entry.get("dataset") and entry.get("split"):
            key = f"{entry['dataset']}:{entry['split']}"
            if key not in known:
                known.add(key)
                how = f" — {entry['how']}" if entry.get("how") else ""
                choices.append(TestSetChoice(key, entry["name"], entry["dataset"], entry["split"],
                                             description=f"{entry['name']}{how}"))
    return choices


def default_sets(choices: list[TestSetChoice]) -> list[str]:
    """The test split and the training split: what the test set exercises of what training reached."""
    keys = [c.key for c in choices if c.subset is None and not c.reason]
    return keys[:2]
