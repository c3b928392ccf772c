"""The class-order warning: a model that numbers the classes in another order than the data is told
apart from a poor one, by its confusion matrix (hand-built here) and by a real evaluation of a model
whose outputs are reordered; the best match is checked against trying every permutation."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest

from workbench.core.data.class_order import MIN_GAIN, best_assignment, class_order_warning

NAMES3 = ["cat", "dog", "fox"]


def brute_force_best(confusion: np.ndarray) -> int:
    """The largest matched count over every one-to-one match of predicted to true classes."""
    k = len(confusion)
    return max(sum(confusion[perm[c], c] for c in range(k)) for perm in itertools.permutations(range(k)))


@pytest.mark.parametrize("seed", range(8))
def test_the_best_assignment_matches_trying_every_permutation(seed):
    rng = np.random.default_rng(seed)
    confusion = rng.integers(0, 20, (5, 5))
    assigned = best_assignment(confusion)
    assert sorted(assigned) == list(range(5))  # one-to-one
    assert confusion[assigned, np.arange(5)].sum() == brute_force_best(confusion)


def test_two_swapped_classes_are_named_with_both_accuracies():
    # rows: true class; the model calls cats "dog" and dogs "cat"; foxes right
    confusion = np.array([[5, 90, 5],
                          [88, 7, 5],
                          [2, 3, 95]])
    warning = class_order_warning(confusion, NAMES3)
    assert warning is not None
    assert warning.data_class_of_output == (1, 0, 2)
    assert warning.pairs == [(0, 1), (1, 0)]
    assert warning.accuracy == pytest.approx(107 / 300)
    assert warning.permuted_accuracy == pytest.approx(273 / 300)
    assert warning.suggested_order == ["dog", "cat", "fox"]
    text = warning.message
    assert "its class 0 looks like the data's class 1 'dog'" in text
    assert "its class 1 looks like the data's class 0 'cat'" in text
    assert "91.0 % instead of 35.7 %" in text
    assert "classes.txt" in warning.hint and "dog, cat, fox" in warning.hint
    as_data = warning.to_dict()
    assert as_data["pairs"][0] == {"model_class": 0, "data_class": 1, "data_name": "dog"}


def test_a_cyclic_shift_of_ten_classes_is_found():
    rng = np.random.default_rng(3)
    k, n = 10, 500
    truth = rng.integers(0, k, n)
    predicted = np.where(rng.random(n) < 0.8, truth, rng.integers(0, k, n))
    shifted = (predicted + 1) % k  # the model's class j is the data's class j - 1
    confusion = np.zeros((k, k), int)
    np.add.at(confusion, (truth, shifted), 1)
    warning = class_order_warning(confusion, [f"c{i}" for i in range(k)])
    assert warning is not None
    assert warning.data_class_of_output == tuple((j - 1) % k for j in range(k))
    assert len(warning.pairs) == k
    assert "and 5 more" in warning.message  # five pairs named, the rest counted


@pytest.mark.parametrize("confusion", [
    np.diag([30, 30, 30]) + 3,  # a good model
    np.full((3, 3), 10),  # guessing
    np.array([[10, 0, 0], [10, 0, 0], [10, 0, 0]]),  # always "cat"
    np.array([[12, 8, 10], [9, 11, 10], [10, 10, 10]]),  # poor, errors spread out
    np.array([[60, 40, 0], [0, 60, 40], [40, 0, 60]]),  # 60 % right, the rest one class over: 1.5× is not reached
    np.zeros((3, 3), int),  # no images
], ids=["good", "guessing", "one-class", "poor", "systematic-but-right-first", "empty"])
def test_good_poor_and_guessing_models_get_no_warning(confusion):
    assert class_order_warning(confusion, NAMES3) is None


def test_the_gain_is_judged_on_the_images_of_the_classes_the_match_renumbers():
    names = NAMES3 + ["owl"]
    # cats and dogs swapped: the match gains 18 of their 118 images (15 points): below MIN_GAIN
    confusion = np.array([[5, 14, 20, 20], [14, 5, 20, 20], [5, 5, 10, 5], [5, 5, 5, 10]])
    assert class_order_warning(confusion, names) is None
    confusion[0, 1] = confusion[1, 0] = 30  # 50 of 150: 33 points
    warning = class_order_warning(confusion, names)
    assert warning is not None and warning.pairs == [(0, 1), (1, 0)]
    assert MIN_GAIN == 0.20
    # two swapped classes of ten, all others right: 20 points overall, 100 on the two
    confusion = np.diag(np.full(10, 50))
    confusion[[4, 5], [4, 5]] = 0
    confusion[4, 5] = confusion[5, 4] = 50
    warning = class_order_warning(confusion, [str(i) for i in range(10)])
    assert warning.pairs == [(4, 5), (5, 4)] and warning.accuracy == 0.8 and warning.permuted_accuracy == 1.0


def test_a_chance_match_on_few_images_is_not_warned():
    # twelve images of ten classes: some match "explains" them, as it would for any guesses
    rng = np.random.default_rng(0)
    confusion = np.zeros((10, 10), int)
    np.add.at(confusion, (rng.integers(0, 10, 12), rng.integers(0, 10, 12)), 1)
    assigned = best_assignment(confusion)
    matched, correct = confusion[assigned, np.arange(10)].sum(), np.trace(confusion)
    assert matched - correct >= 0.2 * 12 and matched >= 1.5 * correct  # the thresholds alone would warn
    assert class_order_warning(confusion, [str(i) for i in range(10)]) is None


def test_guessing_models_are_almost_never_warned():
    """Predictions that carry no information: the warning comes at most rarely, whatever the size."""
    rng = np.random.default_rng(7)
    warned = 0
    for trial in range(200):
        k = int(rng.choice([2, 3, 5, 10]))
        n = int(rng.choice([10, 30, 100, 300]))
        confusion = np.zeros((k, k), int)
        np.add.at(confusion, (rng.integers(0, k, n), rng.integers(0, k, n)), 1)
        warned += class_order_warning(confusion, [str(i) for i in range(k)]) is not None
    assert warned <= 4  # under 2 %; the check's own chance is under 1 in 200


def test_a_confusion_matrix_that_does_not_fit_the_names_is_not_judged():
    assert class_order_warning(np.array([[0, 9], [9, 0]]), NAMES3) is None
    assert class_order_warning(np.array([[5]]), ["one"]) is None


# --- a real evaluation ------------------------------------------------------------------------------

class Reordered:
    """A model whose output j is the wrapped model's output `order[j]`."""

    def __new__(cls, module, order):
        import torch

        class Module(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = module
                self.register_buffer("order", torch.as_tensor(order))

            def forward(self, x):
                return self.inner(x)[:, self.order]

        return Module().eval()


def test_evaluating_a_reordered_model_warns_and_the_model_itself_does_not(digits, digits_model):
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.model_io import LoadedModel
    from workbench.core.models.training import evaluate

    plain = evaluate(JobContext("cpu"), digits_model, digits, "test")
    assert plain["accuracy"] > 0.9 and plain["class_order_warning"] is None
    order = [0, 1, 2, 3, 5, 4, 6, 7, 9, 8]  # the model's 4 is the data's 5, its 8 the data's 9, and back
    info = copy.deepcopy(digits_model.info)
    model = LoadedModel(Reordered(copy.deepcopy(digits_model.module), order), info)
    result = evaluate(JobContext("cpu"), model, digits, "test")
    warning = result["class_order_warning"]
    assert warning is not None
    assert result["accuracy"] < 0.7
    assert warning["accuracy"] == pytest.approx(result["accuracy"])
    assert warning["permuted_accuracy"] == pytest.approx(plain["accuracy"])  # the reordering undone
    assert [(p["model_class"], p["data_class"]) for p in warning["pairs"]] == [(4, 5), (5, 4), (8, 9), (9, 8)]


def test_an_untrained_model_gets_no_warning(digits):
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.architectures import get_architecture
    from workbench.core.models.model_io import LoadedModel, ModelInfo
    from workbench.core.models.training import evaluate

    import torch

    torch.manual_seed(0)
    module = get_architecture("digits-net").build(10).eval()
    model = LoadedModel(module, ModelInfo("untrained", "test", "module", "digits-net", (1, 8, 8)))
    result = evaluate(JobContext("cpu"), model, digits, "test")
    assert result["accuracy"] < 0.3 and result["class_order_warning"] is None


def test_a_stored_evaluation_read_back_carries_the_warning(digits, digits_model, tmp_project):
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.evaluation import evaluate_stored, find_evaluation, load_evaluation
    from workbench.core.models.model_io import LoadedModel

    order = [1, 0, 2, 3, 4, 5, 6, 7, 8, 9]
    model = LoadedModel(Reordered(copy.deepcopy(digits_model.module), order), copy.deepcopy(digits_model.info))
    fresh = evaluate_stored(JobContext("cpu"), model, digits, "test", project=tmp_project)
    name = find_evaluation(tmp_project, model.name, model.fingerprint(), digits.name, "test")
    stored = load_evaluation(tmp_project, name, list(digits.class_names))
    assert stored["stored"] and fresh["class_order_warning"] is not None
    assert stored["class_order_warning"] == fresh["class_order_warning"]
