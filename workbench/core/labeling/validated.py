"""Human-validated subsets of a labelled test set, and the study settings they depend on.

`NAME[valid]`, `NAME[valid-preserving]` and `NAME[valid-misbehaviours]` are test sets like any
other: the inputs of `NAME` that every rater found valid; valid and of the expected class; valid, of
the expected class and misclassified by the model (the failures that count). They are read from the
label store each time they are resolved, so they grow as answers arrive.
"""

from __future__ import annotations

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.labeling.keymap import checked_keymap
from workbench.core.labeling.label_store import LabelStore, read_store
from workbench.core.labeling.queue import CHECK_EVERY, ORDERS
from workbench.core.labeling.study import SUBSETS, Study, items_from_testset

DEFAULT_SETTINGS = {"seed": 0, "check_every": CHECK_EVERY, "order": "random", "min_raters": 2,
                    "all_inputs": False, "different": None, "keymap": {}}


def study_settings(store: LabelStore, name: str, **changes) -> dict:
    """The study's settings (defaults for a new study) with `changes` laid over them, checked."""
    settings = {**DEFAULT_SETTINGS, **store.study(name), **{k: v for k, v in changes.items() if v is not None}}
    unknown = set(settings) - set(DEFAULT_SETTINGS)
    if unknown:
        raise WorkbenchError(f"Unknown study settings: {', '.join(sorted(unknown))}.",
                             f"Settings: {', '.join(DEFAULT_SETTINGS)}.")
    checked_keymap(settings["keymap"])
    every = settings["check_every"]
    if not isinstance(every, int) or every < 0 or every == 1:
        raise WorkbenchError(f"One check in every {every!r} entries cannot be placed.",
                             "Give 0 for no checks, or a whole number from 2 (every other entry) up.")
    if settings["order"] not in ORDERS:
        raise WorkbenchError(f"Unknown order {settings['order']!r}.", f"Use one of: {', '.join(ORDERS)}.")
    if not isinstance(settings["min_raters"], int) or settings["min_raters"] < 1:
        raise WorkbenchError(f"A consensus needs at least one rater, not {settings['min_raters']!r}.",
                             "Give a whole number of raters, 2 as in the benchmark.")
    return settings


def study_items(testset, settings: dict) -> list:
    return items_from_testset(testset, only_misbehaviours=False if settings["all_inputs"] else None)


def human_subset(project, testset, which: str) -> np.ndarray:
    """Positions in `testset` of its inputs that the human consensus puts in `which` (one of SUBSETS)."""
    if which not in SUBSETS:
        raise WorkbenchError(f"Unknown human-validated subset {which!r}.", f"Use one of: {', '.join(SUBSETS)}.")
    with read_store(project) as store:
        rows = store.current(testset.name)
        settings = study_settings(store, testset.name)
    if not rows:
        raise WorkbenchError(f"No one has labelled {testset.name!r} yet, so it has no {which} inputs.",
                             "Label it in the Labelling view first.")
    study = Study(testset.name, study_items(testset, settings), rows, settings["min_raters"])
    return np.asarray(study.human_subset(which), np.int64)


def human_judgement(project, testset) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(valid, valid and label-preserving, decided) positions in `testset`: the inputs the human consensus
    finds valid, those it also finds of the expected class, and those it has decided at all (items with
    enough answers); None when no item of the set has an answer yet."""
    with read_store(project) as store:
        rows = store.current(testset.name)
        settings = study_settings(store, testset.name)
    study = Study(testset.name, study_items(testset, settings), rows, settings["min_raters"])
    decided = sorted(item.index for item in study.items if study.consensus(item).decided)
    if not decided:
        return None
    return (np.asarray(study.human_subset("valid"), np.int64),
            np.asarray(study.human_subset("valid-preserving"), np.int64), np.asarray(decided, np.int64))
