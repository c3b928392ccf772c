"""Does the model number the classes in another order than the data?

A model trained on an image folder learns the folder's class numbering (sorted names, or a classes.txt);
evaluated on data numbered another way, it looks like a poor model (0.198 instead of 0.728) although it
knows the classes well. Its confusion matrix then tells: most of each true class lands in one other
column. The best one-to-one match of predicted to true classes (the assignment that maximises the
matched counts, scipy's `linear_sum_assignment`) then scores far above the diagonal.

It is reported only when all of these hold, so a poor model or a small test set is not taken for a
renumbered one:

* the match is not the identity, and on the images of the classes it renumbers it scores at least
  `MIN_GAIN` more than the model's own numbering (the case it is for scores several times higher
  there, not a few points; a gain of 20 points of those images is also at least 1.5 times what the
  own numbering scores on them). Judged on those classes, not on all, so that two swapped classes of
  a hundred are found as surely as a whole reordering;
* the match gains more images than in every one of `NULL_DRAWS` confusion matrices of predictions that
  carry no information (the predictions shuffled against the labels, each class's count kept): with
  ten classes and a hundred images, a model that guesses gains 20 points from the best match by
  chance alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_GAIN = 0.20
NULL_DRAWS = 199  # a gain above all of them has a chance of at most 1 in 200 under guessing
MAX_CLASSES = 200  # each assignment costs k³ and the check makes up to 200: about a second at 200 classes
SHOWN_PAIRS = 5


@dataclass(frozen=True)
class ClassOrderWarning:
    """The model's outputs match the data's classes in another order than the identity."""

    accuracy: float
    permuted_accuracy: float
    data_class_of_output: tuple[int, ...]  # for each output index of the model, the data's class it matches
    class_names: tuple[str, ...]

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """(model's output index, data's class index) where the two differ."""
        return [(out, data) for out, data in enumerate(self.data_class_of_output) if out != data]

    @property
    def suggested_order(self) -> list[str]:
        """The data's class names in the model's order: what a classes.txt would list."""
        return [self.class_names[data] for data in self.data_class_of_output]

    @property
    def message(self) -> str:
        pairs = self.pairs
        said = [f"its class {out} looks like the data's class {data} {self.class_names[data]!r}"
                for out, data in pairs[:SHOWN_PAIRS]]
        more = f", and {len(pairs) - SHOWN_PAIRS} more" if len(pairs) > SHOWN_PAIRS else ""
        return (f"The model seems to number the classes in another order than the data: {'; '.join(said)}{more}. "
                f"Matched that way, its accuracy would be {self.permuted_accuracy * 100:.1f} % instead of "
                f"{self.accuracy * 100:.1f} %.")

    @property
    def hint(self) -> str:
        order = ", ".join(self.suggested_order)
        return ("The model was probably trained with the classes numbered differently. For a folder of class "
                "sub-folders, write a classes.txt at its root listing the folder names in the model's training "
                f"order, one a line (these predictions suggest: {order}); for other data, check the order of its "
                "labels and class names against the model's.")

    def to_dict(self) -> dict:
        return {"accuracy": self.accuracy, "permuted_accuracy": self.permuted_accuracy,
                "pairs": [{"model_class": out, "data_class": data, "data_name": self.class_names[data]}
                          for out, data in self.pairs],
                "suggested_order": self.suggested_order, "message": self.message, "hint": self.hint}


def best_assignment(confusion: np.ndarray) -> np.ndarray:
    """For each predicted class (column), the true class (row) a one-to-one match gives it, chosen to
    maximise the matched counts."""
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(np.asarray(confusion), maximize=True)
    out = np.empty(len(cols), dtype=np.int64)
    out[cols] = rows
    return out


def _matched(confusion: np.ndarray) -> int:
    assigned = best_assignment(confusion)
    return int(confusion[assigned, np.arange(len(assigned))].sum())


def _beats_guessing(confusion: np.ndarray, gain: int, seed: int = 0) -> bool:
    """Whether the best match gains more over the diagonal than it does in every confusion matrix of
    predictions shuffled against the labels (each true and each predicted class keeps its count)."""
    k = len(confusion)
    truth = np.repeat(np.arange(k), confusion.sum(axis=1))
    guesses = np.repeat(np.arange(k), confusion.sum(axis=0))
    rng = np.random.default_rng(seed)
    for _ in range(NULL_DRAWS):
        rng.shuffle(guesses)
        shuffled = np.bincount(truth * k + guesses, minlength=k * k).reshape(k, k)
        if _matched(shuffled) - int(np.trace(shuffled)) >= gain:
            return False
    return True


def class_order_warning(confusion, class_names) -> ClassOrderWarning | None:
    """A `ClassOrderWarning` when a reordering of the model's classes explains the confusion matrix
    (rows: true class, columns: predicted) far better than their order as given; else None."""
    confusion = np.asarray(confusion, dtype=np.int64)
    k = len(confusion)
    n = int(confusion.sum())
    if k < 2 or k > MAX_CLASSES or confusion.shape != (k, k) or n == 0 or len(class_names) != k:
        return None
    if not (confusion.max(axis=0) > np.diag(confusion)).any():
        # Every column peaks on the diagonal, so no match beats the identity: the usual case, decided
        # without importing scipy.optimize (0.4 s, on a job's thread).
        return None
    assigned = best_assignment(confusion)
    moved = np.flatnonzero(assigned != np.arange(k))  # the model's classes the match renumbers
    if not len(moved):
        return None
    data = assigned[moved]  # the data's classes they match: the same set, in another order
    images = int(confusion[data].sum())
    right = int(confusion[moved, moved].sum())
    matched = int(confusion[data, moved].sum())
    if matched - right < MIN_GAIN * images:
        return None
    if not _beats_guessing(confusion, matched - right):
        return None
    correct = int(np.trace(confusion))
    return ClassOrderWarning(correct / n, (correct + matched - right) / n, tuple(int(a) for a in assigned),
                             tuple(str(c) for c in class_names))


def class_order_check(confusion, class_names) -> dict | None:
    """`class_order_warning` as plain data, as evaluation results carry it (None when all looks in order)."""
    warning = class_order_warning(confusion, class_names)
    return None if warning is None else warning.to_dict()
