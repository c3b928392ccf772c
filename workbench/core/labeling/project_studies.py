"""Labelling studies of a project: a test set's items, its answers from the label store, its checks.

A study is keyed by the name of the test set it labels. Its settings (the study's seed, the
attention-check rate, the key map and the answer options) are kept in the label store beside the
answers, so every rater of the study works to the same ones; the order of the queue (random or
disagreement first) is each rater's own choice. Attention checks are real
images of the test split of the set's dataset, drawn with the study's seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.labeling.answers import AnswerOptions, options_for
from workbench.core.labeling.label_store import LabelStore, open_store, read_store
from workbench.core.labeling.queue import checks_needed
from workbench.core.labeling.session import CheckImages, LabellingSession
from workbench.core.labeling.study import Study
from workbench.core.labeling.validated import study_items, study_settings
from workbench.core.sampling import seeded_sample
from workbench.core.testsets import TestSet, resolve


@dataclass
class StudySetup:
    """What labelling a test set needs: the set, its items, the answers offered and the settings."""

    testset: TestSet
    items: list
    options: AnswerOptions
    settings: dict
    dataset: object = None  # the dataset whose classes label the set (and whose test split gives the checks)

    @property
    def name(self) -> str:
        return self.testset.name


def prepare_study(project, name: str, dataset=None, **changes) -> StudySetup:
    """Read the test set `name` and the study's settings (saving `changes` for every rater)."""
    testset = resolve(project, name, dataset)
    spec = testset.source.dataset
    if spec and (dataset is None or spec not in (dataset.name, dataset.recipe.get("name"))):
        from workbench.core.data.registry import load_dataset

        dataset = load_dataset(spec)  # a stored set names the dataset its classes come from, whatever is selected
    changes = {k: v for k, v in changes.items() if v is not None}
    if changes and not getattr(project, "read_only", False):
        with open_store(project) as store:
            study_settings(store, testset.name, **changes)  # checked before anything is saved
            store.update_study(testset.name, changes)
    with read_store(project) as store:
        settings = study_settings(store, testset.name)
    items = study_items(testset, settings)
    class_names = testset.class_names or (list(dataset.class_names) if dataset is not None else
                                          [str(i) for i in range(int(testset.labels.max(initial=0)) + 1)])
    return StudySetup(testset, items, options_for(class_names, settings["different"]), settings, dataset)


def check_images(project, setup: StudySetup) -> CheckImages:
    """The attention-check images of the study: a seeded draw from its dataset's test split (none when the
    checks are off or the dataset's test split cannot be read). Their ids are the split's with `check:` before
    them, so a check never shares an id with an item, even when the labelled set is that split."""
    every = int(setup.settings["check_every"])
    needed = checks_needed(len(setup.items), every)
    spec = setup.testset.source.dataset
    if needed == 0 or not spec:
        return CheckImages(setup.testset.images[:0], np.zeros(0, np.int64), np.zeros(0, str))
    try:
        split = resolve(project, f"{spec}:test" if ":" not in spec else spec, setup.dataset)
    except WorkbenchError:
        return CheckImages(setup.testset.images[:0], np.zeros(0, np.int64), np.zeros(0, str))
    chosen = seeded_sample(len(split), min(needed, len(split)), [int(setup.settings["seed"]), 0xC4EC], always=True)
    return CheckImages(split.numpy(chosen), split.labels[chosen], np.char.add("check:", split.ids[chosen]))


def start_session(project, store: LabelStore, setup: StudySetup, rater: str, mode: str = "blind",
                  checks: CheckImages | None = None, order: str | None = None) -> LabellingSession:
    """A rater's labelling session of the study (resuming where they stopped); `order` is the rater's own
    choice ("random" or "disagreement"; the study's when None)."""
    checks = check_images(project, setup) if checks is None else checks
    s = setup.settings
    return LabellingSession(store, setup.name, setup.items, setup.testset.images, setup.options, rater, checks,
                            mode=mode, seed=int(s["seed"]), order=order or s["order"],
                            check_every=int(s["check_every"]))


def current_study(project, setup: StudySetup) -> Study:
    """The study with the current answers of all its raters, read from the store now."""
    with read_store(project) as store:
        rows, order = store.current(setup.name), store.raters(setup.name)
    return Study(setup.name, setup.items, rows, int(setup.settings["min_raters"]), order)


def load_study(project, name: str, dataset=None) -> tuple[StudySetup, Study]:
    """The study of test set `name` with the current answers of all its raters."""
    setup = prepare_study(project, name, dataset)
    return setup, current_study(project, setup)
