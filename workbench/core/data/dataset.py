"""Datasets: images in [0, 1] with labels, class names and a card saying where they come from.

A `Dataset` holds named `Split`s ("train", "test"). Images are kept as the compact array they came
in (uint8 0–255, or float32 already in [0, 1]) in N×C×H×W layout and are turned into float tensors
in [0, 1] one batch at a time, so 60k images cost 47 MB, not 188 MB. The registry of named datasets
lives in `registry.py`; the readers for users' own files live in `readers.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import SentOnce

if TYPE_CHECKING:  # torch is imported lazily so the GUI starts fast
    import torch


MAX_CLASSES = 100_000  # labels beyond this are damage, not classes (their names would not fit in memory)


def shape_text(shape) -> str:
    """A shape for a message, elided when it has many dimensions."""
    shape = tuple(int(d) for d in shape)
    if len(shape) <= 6:
        return str(shape)
    return f"({', '.join(map(str, shape[:4]))}, … {len(shape) - 5} more …, {shape[-1]}) ({len(shape)} dimensions)"


@dataclass
class DatasetCard:
    """Where a dataset comes from and under what terms."""

    title: str
    source: str
    licence: str
    notes: str = ""


def to_nchw(images: np.ndarray, what: str = "images") -> np.ndarray:
    """Bring (N,H,W), (N,H,W,C) or (N,C,H,W) with C in {1,3} into N×C×H×W."""
    if images.ndim == 3:
        return images[:, None]
    if images.ndim == 4:
        if images.shape[1] in (1, 3):
            return images
        if images.shape[3] in (1, 3):
            return images.transpose(0, 3, 1, 2)
    raise WorkbenchError(
        f"{what} have shape {shape_text(images.shape)}; expected (N,H,W), (N,H,W,C) or (N,C,H,W) with C = 1 or 3.",
        "Store grey images as (N,H,W) and colour images as (N,H,W,3).")


def as_image_array(images: np.ndarray, what: str = "images") -> np.ndarray:
    """Validate and convert images to uint8 [0,255] or float32 [0,1] in N×C×H×W layout."""
    images = to_nchw(np.asarray(images), what)
    if images.dtype == np.uint8:
        return np.ascontiguousarray(images)
    if np.issubdtype(images.dtype, np.integer):
        lo, hi = (int(images.min()), int(images.max())) if images.size else (0, 0)
        if lo < 0 or hi > 255:
            raise WorkbenchError(f"{what} hold integers from {lo} to {hi}; expected 0–255.",
                                 "Store 8-bit pixels (0–255) or floats in [0, 1].")
        return np.ascontiguousarray(images.astype(np.uint8))
    if np.issubdtype(images.dtype, np.floating):
        images = np.ascontiguousarray(images, dtype=np.float32)
        check_unit_range(images, what)
        return images
    raise WorkbenchError(f"{what} have dtype {images.dtype}; expected uint8 or float.",
                         "Convert the images to uint8 (0–255) or float (0–1).")


def class_names_from(stored, what: str = "class_names") -> list[str] | None:
    """Class names stored with data: a flat list of text (or bytes); anything else is refused."""
    if stored is None:
        return None
    names = np.asarray(stored)
    if names.ndim != 1 or names.dtype.kind not in "USO":
        raise WorkbenchError(f"{what} is {shape_text(names.shape)} of {names.dtype}, not a list of names.",
                             "Store the class names as a list of strings.")
    out = []
    for name in names.tolist():
        if not isinstance(name, (str, bytes)):
            raise WorkbenchError(f"{what} holds {type(name).__name__} values, not names.",
                                 "Store the class names as a list of strings.")
        out.append(name.decode(errors="replace") if isinstance(name, bytes) else name)
    return out


def check_unit_range(images: np.ndarray, what: str = "images") -> None:
    """Refuse float images outside [0, 1] or with NaN, naming what was found."""
    if images.size == 0:
        return
    lo, hi = float(np.min(images)), float(np.max(images))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise WorkbenchError(f"{what} contain NaN or infinite values.", "Clean or re-export the data.")
    if lo < 0.0 or hi > 1.0:
        raise WorkbenchError(f"{what} range from {lo:.3g} to {hi:.3g}; floats must lie in [0, 1].",
                             "Divide 0–255 data by 255, or store it as uint8.")


def as_labels(labels: np.ndarray, num_classes: int | None = None, what: str = "labels") -> np.ndarray:
    """Validate labels: integers (or one-hot rows, converted by argmax) in [0, num_classes).

    A column of labels (N, 1) is a vector, not one-hot rows; whole-number floats are accepted, NaN,
    fractions, complex numbers, text and labels beyond `MAX_CLASSES` are refused.
    """
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    elif labels.ndim == 2:
        if labels.shape[1] == 0:
            raise WorkbenchError(f"{what} have shape {shape_text(labels.shape)}: no class per image.",
                                 "Store one integer class index per image.")
        if labels.size and not (np.isin(labels, (0, 1)).all() and (labels.sum(axis=1) == 1).all()):
            raise WorkbenchError(f"{what} have shape {shape_text(labels.shape)} but are not one-hot rows.",
                                 "Store one integer class index per image, or rows with a single 1.")
        labels = labels.argmax(axis=1)
    if labels.ndim != 1:
        raise WorkbenchError(f"{what} have shape {shape_text(labels.shape)}; expected (N,) or one-hot (N, K).",
                             "Store one integer class index per image.")
    if labels.dtype.kind not in "biuf":  # an empty array of text is no labels either
        raise WorkbenchError(f"{what} have dtype {labels.dtype}; expected integer class indices.",
                             "Store class indices 0, 1, 2, … and put the names in class_names.")
    if labels.size and labels.dtype.kind == "f":
        if not np.isfinite(labels).all():
            raise WorkbenchError(f"{what} contain NaN or infinite values.", "Store integer class indices.")
        if not np.all(np.mod(labels, 1) == 0):
            raise WorkbenchError(f"{what} are not whole numbers.", "Store integer class indices.")
    if labels.size and labels.dtype.kind in "iuf" and labels.max() >= MAX_CLASSES:
        raise WorkbenchError(f"{what} contain the class {labels.max():.0f}, beyond the {MAX_CLASSES:,} classes "
                             "a dataset may have.", "Store class indices 0, 1, 2, …; the file may be damaged.")
    labels = labels.astype(np.int64)
    if labels.size and labels.min() < 0:
        raise WorkbenchError(f"{what} contain the negative class {int(labels.min())}.",
                             "Class indices start at 0.")
    if num_classes is not None and labels.size and labels.max() >= num_classes:
        raise WorkbenchError(
            f"{what} contain class {int(labels.max())}, but the dataset has {num_classes} classes "
            f"(0–{num_classes - 1}).", "Fix the labels or give the full list of class names.")
    return labels


class Split(SentOnce):
    """One split of a dataset: an image array (or a lazily read one) and its labels."""

    def __init__(self, images, labels: np.ndarray):
        if len(images) != len(labels):
            raise WorkbenchError(f"There are {len(images)} images but {len(labels)} labels.",
                                 "Every image needs exactly one label.")
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(int(s) for s in self.images.shape[1:])

    def numpy(self, index=slice(None)) -> np.ndarray:
        """Images as float32 in [0,1], N×C×H×W, for `index` (a slice or an index array)."""
        raw = np.asarray(self.images[index])
        if raw.dtype == np.uint8:
            return raw.astype(np.float32) / np.float32(255.0)
        return raw.astype(np.float32, copy=False)

    def tensor(self, index=slice(None)):
        """Images as a float tensor in [0,1] for `index`."""
        import torch

        return torch.from_numpy(np.ascontiguousarray(self.numpy(index)))

    def thumbnails(self, index=slice(None)) -> np.ndarray:
        """Images as uint8 N×H×W×C for display."""
        raw = np.asarray(self.images[index])
        if raw.dtype != np.uint8:
            raw = np.clip(np.rint(raw * 255.0), 0, 255).astype(np.uint8)
        return np.ascontiguousarray(raw.transpose(0, 2, 3, 1))

    def batches(self, batch_size: int = 512, indices: Sequence[int] | None = None
                ) -> Iterator[tuple[int, "torch.Tensor", "torch.Tensor"]]:
        """Yield (start, images, labels) tensors batch by batch, in order."""
        import torch

        n = len(self) if indices is None else len(indices)
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            index = slice(start, stop) if indices is None else np.asarray(indices[start:stop])
            yield start, self.tensor(index), torch.from_numpy(self.labels[index])

    def subset(self, indices: Sequence[int]) -> "Split":
        """A materialised split with the images at `indices`, in the given order."""
        indices = np.asarray(indices, dtype=np.int64)
        return Split(np.asarray(self.images[indices]) if len(indices) else self.images[:0], self.labels[indices])


STEP_INPUTS = 4096  # the most inputs one forward pass over data takes: a job checks for cancellation between


def step_batch(batch_size: int, passes: int = 1) -> int:
    """The batch a loop that checks for cancellation between batches runs: `batch_size`, but at most
    STEP_INPUTS // `passes` inputs, where `passes` is what one input costs in forward passes (LRP about
    3, one PGD-10 attack about 12), so a cancel is seen within about a second whatever was asked for."""
    return max(1, min(int(batch_size), STEP_INPUTS // max(1, int(passes))))


@dataclass
class Dataset(SentOnce):
    """Named splits of labelled images with class names and a card."""

    name: str
    class_names: list[str]
    splits: dict[str, Split]
    card: DatasetCard
    recipe: dict = field(default_factory=dict)  # how to load it again (stored with results)
    # Where the class numbering comes from, when the user should know (an image folder's sorted folder
    # names or its classes.txt): a model trained with another numbering scores as if it guessed.
    class_source: str = ""

    def __post_init__(self):
        if not self.splits or all(len(s) == 0 for s in self.splits.values()):
            raise WorkbenchError(f"Dataset {self.name!r} holds no images.", "Choose a file or folder with images in it.")
        shapes = {s.image_shape for s in self.splits.values() if len(s)}
        if len(shapes) > 1:
            raise WorkbenchError(f"Dataset {self.name!r} mixes image shapes {sorted(shapes)}.",
                                 "All splits must share one image shape.")
        for split_name, split in self.splits.items():
            as_labels(split.labels, self.num_classes, f"{self.name} {split_name} labels")

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def spec(self) -> str:
        """What projects and cards record to load it again: a registered dataset's name, else its absolute path."""
        return self.recipe.get("name") or self.recipe.get("path") or self.name

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return next(s.image_shape for s in self.splits.values() if len(s))

    @property
    def fit_split(self) -> str:
        """The split relevance and coverage are fitted on: "train", or, for a dataset without one (a
        plain x, y file), the split it has; results record which, and the views say so."""
        if "train" in self.splits and len(self.splits["train"]):
            return "train"
        return next(name for name, split in self.splits.items() if len(split))

    def split(self, name: str) -> Split:
        if name not in self.splits:
            raise WorkbenchError(f"Dataset {self.name!r} has no split {name!r}.",
                                 f"Available splits: {', '.join(self.splits)}.")
        return self.splits[name]

    def card_dict(self) -> dict:
        """The dataset card as plain data: size, classes, shape, source, licence."""
        return {
            "name": self.name, "title": self.card.title, "source": self.card.source,
            "licence": self.card.licence, "notes": self.card.notes,
            "splits": {k: len(v) for k, v in self.splits.items()},
            "classes": list(self.class_names), "class_source": self.class_source,
            "image_shape": list(self.image_shape),
            "value_range": [0.0, 1.0],
        }


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic per-class shuffle and split; returns (train_indices, test_indices), each shuffled."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_test = int(round(len(idx) * test_fraction))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))
