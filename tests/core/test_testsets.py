"""`resolve` gives one `TestSet` for every kind of set: dataset splits, subsets by rule, stored pools,
fp_test, fuzzer tests, selections and stored subsets; ids are stable across reopening and copying."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.project.folder import Project
from workbench.core.robustness.fuzzing import FuzzResult
from workbench.core.robustness.pool import CandidatePool, build_pool, save_pool
from workbench.core.testsets import TestSet, content_ids, list_testsets, resolve, save_subset


@pytest.fixture(scope="module")
def pool(digits, _digits_model_master):
    model = _digits_model_master.model
    return build_pool(JobContext("cpu"), model, digits.split("train"), 0.3, seed=0, indices=np.arange(60),
                      what="digits train")


def _fuzz_tests(digits) -> FuzzResult:
    train = digits.split("train")
    n = 7
    x = np.clip(train.numpy(np.arange(n)) + 0.05, 0, 1).astype(np.float32)
    f = np.arange(n, dtype=np.float32)
    return FuzzResult(x, train.labels[:n], np.arange(n), train.labels[:n], (train.labels[:n] + 1) % 10,
                      f, f, np.ones(n, bool), f / 10, np.ones(n, np.int64), {"eps": 0.3})


@pytest.fixture
def project(tmp_project, digits, pool):
    save_pool(tmp_project, "pool", pool, kind_of_pool="train", dataset="digits")
    save_pool(tmp_project, "fp", pool.subset(np.arange(5)), kind_of_pool="fp_test", dataset="digits")
    save_pool(tmp_project, "picked", pool.subset([3, 1, 4]), selected_from="pool", dataset="digits")
    tmp_project.save_artifact("testset", "fuzzed", _fuzz_tests(digits).to_arrays(), role="fuzz-tests",
                              dataset="digits")
    return tmp_project


def test_dataset_splits(project, digits):
    by_entry = resolve(project, "digits:test", digits)
    assert isinstance(by_entry, TestSet) and by_entry.kind == "split" and len(by_entry) == len(digits.split("test"))
    assert by_entry.ids[5] == "digits:test#5"
    np.testing.assert_array_equal(by_entry.labels, digits.split("test").labels)
    bare = resolve(project, "train", digits)
    assert bare.name == "digits:train" and len(bare) == len(digits.split("train"))
    assert resolve(None, "digits:train").source.split == "train"  # DATASET:SPLIT without a project


@pytest.mark.parametrize("name, role", [("pool", "attack pool"), ("fp", "fp_test"), ("picked", "selection"),
                                        ("fuzzed", "fuzzer tests")])
def test_stored_sets(project, digits, pool, name, role):
    found = resolve(project, name, digits)
    assert found.kind == role and found.source.kind == "stored" and found.source.artifact == name
    assert found.numpy().shape[1:] == digits.image_shape and found.numpy().dtype == np.float32
    assert len(found.ids) == len(found) == len(set(found.ids))
    if name == "picked":
        np.testing.assert_allclose(found.numpy(), pool.images[[3, 1, 4]])
        np.testing.assert_array_equal(found.columns["source_index"], pool.source_index[[3, 1, 4]])
        # a selection keeps the ids its inputs had in the pool
        np.testing.assert_array_equal(found.ids, resolve(project, "pool", digits).ids[[3, 1, 4]])
    if name == "fuzzed":
        assert set(found.columns) >= {"seed_index", "fol_linf", "grad_l2", "mutation"}


def test_every_listed_set_resolves(project, digits):
    infos = list_testsets(project)
    assert [i.name for i in infos] == ["digits:test", "pool", "fp", "picked", "fuzzed"]
    assert [i.source.describe() for i in infos][0] == "the test split of digits"
    for info in infos:
        assert len(resolve(project, info.name, digits)) > 0


def test_subset_rules_against_brute_force(project, digits, digits_model):
    test = resolve(project, "digits:test", digits)
    assert list(resolve(project, "digits:test[first=4]", digits).ids) == [f"digits:test#{i}" for i in range(4)]
    threes = resolve(project, "digits:test[class=3]", digits)
    assert set(threes.labels) == {3} and len(threes) == int((test.labels == 3).sum())
    named = resolve(project, f"digits:test[class={digits.class_names[3]},4]", digits)
    assert set(named.labels) == {3, 4}
    sample = resolve(project, "digits:test[sample=20 seed=5]", digits)
    expected = np.sort(np.random.default_rng(5).choice(len(test), 20, replace=False))
    np.testing.assert_array_equal(sample.columns["parent_index"], expected)
    picked = resolve(project, "digits:test[indices=2,7-9]", digits)
    np.testing.assert_array_equal(picked.columns["parent_index"], [2, 7, 8, 9])
    wrong = resolve(project, "digits:test[misclassified]", digits, model=digits_model)
    right = resolve(project, "digits:test[correct]", digits, model=digits_model)
    import torch

    with torch.no_grad():
        predicted = np.array([int(digits_model.module(test.tensor([i])).argmax()) for i in range(len(test))])
    np.testing.assert_array_equal(wrong.columns["parent_index"], np.flatnonzero(predicted != test.labels))
    assert len(wrong) + len(right) == len(test) and len(wrong) > 0
    nested = resolve(project, "pool[class=3][first=2]", digits)
    assert len(nested) == min(2, int((resolve(project, "pool", digits).labels == 3).sum()))
    assert nested.source.parent == "pool[class=3]"


@pytest.mark.parametrize("text, message", [
    ("digits:test[]", "empty subset rule"), ("digits:test[top=3]", "Unknown subset rule"),
    ("digits:test[first=x]", "whole number"), ("digits:test[indices=9999]", "out of range"),
    ("digits:test[class=zebra]", "No class"), ("digits:test[misclassified]", "model's predictions"),
    ("nothing-like-this", "No test set"), ("digits:nosplit", "no split"),
])
def test_bad_names_say_what_is_wrong(project, digits, text, message):
    with pytest.raises(WorkbenchError, match=message):
        resolve(project, text, digits)


def test_foreign_dataset_with_other_classes_is_refused(project, digits, slice_dir):
    with pytest.raises(WorkbenchError, match="classes"):
        resolve(project, str(slice_dir), digits)
    assert len(resolve(None, str(slice_dir))) == 1000  # on its own it is its test split


def test_a_dataset_without_a_test_split_stands_in_with_its_split_and_a_note(digits, tmp_path):
    train = digits.split("train")
    path = tmp_path / "only-train.npz"
    np.savez(path, x_train=train.numpy(np.arange(9))[:, 0], y_train=train.labels[:9])
    note = (f"test set '{path}' has no test split, so its train split (9 inputs, the only one it has) is used; "
            f"name it as {path}:train to choose the split yourself")
    from workbench.core.data.registry import load_dataset

    for dataset in (digits, None, load_dataset(str(path))):  # a file beside --data, on its own, or --data itself
        found = resolve(None, str(path), dataset)
        assert len(found) == 9 and found.source.split == "train" and found.notes == [note]
        assert resolve(None, f"{path}[first=4]", dataset).notes == [note]  # a subset keeps its parent's notes
        assert resolve(None, f"{path}:train", dataset).notes == []  # the split named: nothing to say
    assert resolve(None, "test", digits).notes == [] and resolve(None, "digits", digits).notes == []


def test_stored_subset_and_ids_survive_reopening_and_copying(project, digits, tmp_path):
    subset = resolve(project, "pool[first=5]", digits)
    save_subset(project, "first five", subset)
    copy = tmp_path / "copied"
    shutil.copytree(project.folder, copy)
    for folder in (project.folder, copy):
        again = resolve(Project.open(folder), "first five", digits)
        assert again.kind == "subset" and again.source.parent == "pool"
        np.testing.assert_array_equal(again.ids, subset.ids)
        np.testing.assert_allclose(again.numpy(), subset.numpy())
    assert any(i.name == "first five" and i.source.kind == "subset" for i in list_testsets(project))


def test_content_ids_are_stable_and_unique():
    images = np.zeros((3, 1, 2, 2), np.uint8)
    images[2] = 1
    ids = content_ids(images)
    assert ids[0] != ids[1] and ids[1].startswith(ids[0]) and ids[1].endswith("~1") and len(set(ids)) == 3
    np.testing.assert_array_equal(ids, content_ids(images.copy()))
    assert content_ids(images[:0]).shape == (0,)  # an empty set has no ids, and no error


def test_a_pool_is_a_candidate_pool_and_a_test_set(project, digits):
    stored = resolve(project, "pool", digits)
    pool = CandidatePool.from_artifact(project.load_artifact("pool"))
    np.testing.assert_array_equal(stored.labels, pool.labels)
    assert set(stored.columns) >= {"source_index", "attack", "score_fol_linf", "probs"}


def test_a_class_name_with_a_space_is_quoted(fashion_slice):
    from workbench.core.testsets import apply_rule, from_split

    test = from_split(fashion_slice, "test")
    boots = apply_rule(test, 'class="Ankle boot"')
    assert len(boots) == int((test.labels == fashion_slice.class_names.index("Ankle boot")).sum()) > 0
    with pytest.raises(WorkbenchError, match="unbalanced quote"):
        apply_rule(test, 'class="Ankle boot')


def test_a_stored_subset_of_itself_is_refused_not_a_crash(project, digits):
    project.save_artifact("testset", "loop", {"indices": np.arange(3)}, role="subset", of="loop", rule="first=3")
    with pytest.raises(WorkbenchError, match="too many subsets"):
        resolve(project, "loop", digits)
    project.save_artifact("testset", "beyond", {"indices": np.array([0, 10_000])}, role="subset", of="pool",
                          rule="indices")
    with pytest.raises(WorkbenchError, match="beyond"):
        resolve(project, "beyond", digits)
