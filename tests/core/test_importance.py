"""Neuron importance over a dataset (docs/methods/importance.md#aggregation-over-the-training-set): sums
over correctly classified inputs, per class, top-m, streaming job behaviour (progress, partial totals,
cancellation) and artifact reuse.

The data is synthetic and its labels are made from the model's own predictions, so which inputs
are correctly classified is known exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.data.dataset import Dataset, DatasetCard, Split
from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.importance.lrp import LRP, Composite, ZPlus
from workbench.core.importance.neuron_importance import ImportanceProgress, compute_importance, load_importance, rank_neurons, top_m
from workbench.core.models.activations import NeuronDefinition
from workbench.core.models.model_io import LoadedModel, ModelInfo
from workbench.core.project.folder import Project

CLASSES = ["a", "b", "c"]
N = 90


def tiny_net() -> nn.Sequential:
    from collections import OrderedDict

    torch.manual_seed(0)
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(1, 4, 3, padding=1)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(4 * 4 * 4, 8)), ("relu2", nn.ReLU()),
        ("fc2", nn.Linear(8, 3))])).eval()


def loaded(module: nn.Module, name: str = "tiny") -> LoadedModel:
    return LoadedModel(module, ModelInfo(name=name, source="test", format="test", arch=None, input_shape=(1, 8, 8),
                                         class_names=CLASSES))


@pytest.fixture
def setup():
    """A model, its predictions on 90 random images, and labels = predictions except every 4th image."""
    model = loaded(tiny_net())
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(N, 1, 8, 8), dtype=np.uint8)
    with torch.no_grad():
        logits = model.module(torch.from_numpy(images).float() / 255)
        model.module.fc2.bias -= logits.mean(0)  # centre the logits so that all three classes get predicted
        predicted = model.module(torch.from_numpy(images).float() / 255).argmax(1).numpy()
    assert np.bincount(predicted, minlength=3).min() >= 10
    labels = predicted.copy()
    wrong = np.arange(N) % 4 == 0
    labels[wrong] = (predicted[wrong] + 1) % 3
    return model, images, labels, predicted


def dataset(images, labels, name="synthetic") -> Dataset:
    return Dataset(name, CLASSES, {"train": Split(images, labels)}, DatasetCard(name, "test", "MIT"))


def reference_sums(model, images, labels, layer, channel=True):
    """Per-input LRP-0 relevance of the layer, summed by hand over the correctly classified inputs."""
    x = torch.from_numpy(images).float() / 255
    result = LRP(model.module).explain(x, layers=[layer])
    R = result.layers[layer].double()
    R = R.sum(dim=(2, 3)) if (R.dim() == 4 and channel) else R.flatten(1)
    correct = result.logits.argmax(1).numpy() == labels
    per_class = np.stack([R[torch.from_numpy(correct & (labels == c))].sum(0).numpy() for c in range(3)])
    return R[torch.from_numpy(correct)].sum(0).numpy(), per_class, correct


def test_totals_are_sums_over_correctly_classified_inputs_in_any_batch_size(setup):
    model, images, labels, predicted = setup
    data = dataset(images, labels)
    for layer in ("conv1", "fc1"):
        expected, expected_per_class, correct = reference_sums(model, images, labels, layer)
        assert correct.sum() == (np.arange(N) % 4 != 0).sum()
        for batch in (7, 32, 1000):
            result = compute_importance(JobContext("cpu"), model, data, layer, per_class=True, batch_size=batch)
            assert result.totals.dtype == np.float64 and result.totals.shape == expected.shape
            np.testing.assert_allclose(result.totals, expected, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(result.per_class, expected_per_class, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(result.per_class.sum(0), result.totals, rtol=1e-9, atol=1e-9)
            assert result.counts.tolist() == [int((correct & (labels == c)).sum()) for c in range(3)]
            assert result.ranking.tolist() == rank_neurons(result.totals).tolist()
    # the all-classes mode agrees with the per-class mode and keeps no per-class arrays
    plain = compute_importance(JobContext("cpu"), model, data, "fc1", batch_size=16)
    assert plain.per_class is None and plain.per_class_ranking is None
    np.testing.assert_allclose(plain.totals, reference_sums(model, images, labels, "fc1")[0], rtol=1e-5, atol=1e-6)


def test_misclassified_inputs_contribute_nothing(setup):
    model, images, labels, predicted = setup
    all_right = compute_importance(JobContext("cpu"), model, dataset(images, predicted), "fc1")
    some_wrong = compute_importance(JobContext("cpu"), model, dataset(images, labels), "fc1")
    assert all_right.correct == N and some_wrong.correct == int((labels == predicted).sum()) < N
    x = torch.from_numpy(images).float() / 255
    R = LRP(model.module).explain(x, layers=["fc1"]).layers["fc1"].double()
    wrong = torch.from_numpy(labels != predicted)
    np.testing.assert_allclose(all_right.totals - some_wrong.totals, R[wrong].sum(0).numpy(), rtol=1e-5, atol=1e-6)


def test_element_neurons_and_the_channel_sum(setup):
    model, images, labels, _ = setup
    data = dataset(images, labels)
    elements = compute_importance(JobContext("cpu"), model, data, NeuronDefinition("conv1", "post", "element"))
    channels = compute_importance(JobContext("cpu"), model, data, NeuronDefinition("conv1", "pre"))
    assert elements.totals.shape == (4 * 8 * 8,) and channels.totals.shape == (4,)
    np.testing.assert_allclose(elements.totals.reshape(4, 64).sum(1), channels.totals, rtol=1e-9)
    assert elements.definition.conv_neuron == "element" and channels.definition.point == "pre"


def test_other_rules_change_the_result(setup):
    model, images, labels, _ = setup
    data = dataset(images, labels)
    lrp0 = compute_importance(JobContext("cpu"), model, data, "conv1")
    zplus = compute_importance(JobContext("cpu"), model, data, "conv1", rule=ZPlus())
    assert zplus.rule["conv"]["name"] == "z+" and lrp0.rule["conv"]["name"] == "lrp-0"
    assert not np.allclose(lrp0.totals, zplus.totals)


def test_top_m_ties_go_to_the_lower_index_and_m_is_checked():
    totals = np.array([1.0, 3.0, 2.0, 3.0, -1.0, 2.0])
    assert top_m(totals, 4).tolist() == [1, 3, 2, 5]
    assert rank_neurons(totals).tolist() == [1, 3, 2, 5, 0, 4]
    many = np.random.default_rng(0).integers(0, 3, size=500).astype(np.float64)  # long runs of ties
    expected = [i for value in (2.0, 1.0, 0.0) for i in np.flatnonzero(many == value)]
    assert rank_neurons(many).tolist() == expected and top_m(many, 50).tolist() == expected[:50]
    with pytest.raises(WorkbenchError, match="m = 7 is larger than the 6 neurons of layer 'fc1'"):
        top_m(totals, 7, "fc1")
    with pytest.raises(WorkbenchError, match="at least 1"):
        top_m(totals, 0)


def test_result_top_m_overall_and_per_class(setup):
    model, images, labels, _ = setup
    result = compute_importance(JobContext("cpu"), model, dataset(images, labels), "fc1", per_class=True)
    assert result.top(3).tolist() == list(np.argsort(-result.totals, kind="stable")[:3])
    assert result.top(8, cls=1).tolist() == list(np.argsort(-result.per_class[1], kind="stable"))
    with pytest.raises(WorkbenchError, match="larger than the 8 neurons"):
        result.top(9)
    with pytest.raises(WorkbenchError, match="no class 5"):
        result.top(2, cls=5)
    plain = compute_importance(JobContext("cpu"), model, dataset(images, labels), "fc1")
    with pytest.raises(WorkbenchError, match="per-class mode"):
        plain.top(2, cls=0)


def test_a_class_without_correct_inputs_is_reported_empty(setup):
    model, images, labels, predicted = setup
    labels = labels.copy()
    labels[predicted == 2] = 0  # nothing predicted as class 2 keeps label 2, so class 2 has no correct input
    result = compute_importance(JobContext("cpu"), model, dataset(images, labels), "fc1", per_class=True)
    assert result.empty_classes == [2] and result.counts[2] == 0
    assert result.top(3, cls=2).size == 0
    assert (result.per_class_ranking[2] == -1).all() and (result.per_class[2] == 0).all()
    assert result.top(3, cls=0).size == 3


def test_unknown_layer_lists_the_valid_ones(setup):
    model, images, labels, _ = setup
    with pytest.raises(WorkbenchError, match="no layer 'fc9'") as info:
        compute_importance(JobContext("cpu"), model, dataset(images, labels), "fc9")
    assert "conv1" in info.value.hint and "fc2" in info.value.hint


def test_nan_relevance_names_the_layer(setup):
    model, images, labels, _ = setup
    model.module.fc1.weight.data[2, 5] = float("nan")
    with pytest.raises(WorkbenchError, match="layer 'fc1'"):
        compute_importance(JobContext("cpu"), model, dataset(images, labels), "conv1")


def test_class_count_mismatch_is_refused(setup):
    model, images, labels, _ = setup
    four = Dataset("four", ["a", "b", "c", "d"], {"train": Split(images, labels)}, DatasetCard("four", "test", "MIT"))
    with pytest.raises(WorkbenchError, match="3 outputs but dataset 'four' has 4 classes"):
        compute_importance(JobContext("cpu"), model, four, "fc1")


def test_progress_per_batch_and_partial_totals(setup):
    model, images, labels, _ = setup
    progress, partials = [], []
    ctx = JobContext("cpu", on_progress=lambda d, t, m: progress.append((d, t)), on_partial=partials.append)
    result = compute_importance(ctx, model, dataset(images, labels), "fc1", batch_size=20)
    assert progress == [(0, N), (20, N), (40, N), (60, N), (80, N), (90, N)]
    assert [p.done for p in partials] == [20, 40, 60, 80, 90]
    assert all(isinstance(p, ImportanceProgress) and p.totals.shape == (8,) for p in partials)
    np.testing.assert_allclose(partials[-1].totals, result.totals)
    assert partials[-1].counts.sum() == result.correct
    assert not np.allclose(partials[0].totals, result.totals)  # they really are running totals


def test_sampled_inputs_are_seeded(setup):
    model, images, labels, _ = setup
    data = dataset(images, labels)
    a = compute_importance(JobContext("cpu"), model, data, "fc1", max_inputs=30, seed=1)
    b = compute_importance(JobContext("cpu"), model, data, "fc1", max_inputs=30, seed=1)
    c = compute_importance(JobContext("cpu"), model, data, "fc1", max_inputs=30, seed=2)
    assert a.inputs == 30 and a.correct <= 30
    np.testing.assert_array_equal(a.totals, b.totals)
    assert not np.array_equal(a.totals, c.totals)


# --- the project artifact ---------------------------------------------------------------------------

@pytest.fixture
def project(tmp_path):
    return Project.create(tmp_path / "project", "synthetic", ["tiny"])


def test_results_are_saved_with_how_they_were_made_and_reused(setup, project):
    model, images, labels, _ = setup
    data = dataset(images, labels)
    first = compute_importance(JobContext("cpu"), model, data, "conv1", per_class=True, project=project, seed=3)
    assert first.artifact is not None and not first.reused
    entry = project.artifacts("importance")[first.artifact]
    how = entry["provenance"]
    assert how["layer"] == "conv1" and how["neuron_definition"] == {"layer": "conv1", "point": "post",
                                                                      "conv_neuron": "channel-mean"}
    assert how["rule"]["conv"] == {"name": "lrp-0", "bias_in_denominator": True} and how["rule"]["maxpool"] == "winner"
    assert how["seed"] == 3 and how["model_fingerprint"] == model.fingerprint() and how["per_class"] is True
    assert how["dataset"] == "synthetic" and how["split"] == "train" and how["correct"] == first.correct
    assert "versions" in how

    progress = []
    again = compute_importance(JobContext("cpu", on_progress=lambda d, t, m: progress.append(m)), model, data,
                               "conv1", per_class=False, project=Project.open(project.folder))
    assert again.reused and again.artifact == first.artifact
    assert progress == ["importance (reused)"]
    np.testing.assert_array_equal(again.totals, first.totals)
    np.testing.assert_array_equal(again.per_class, first.per_class)
    np.testing.assert_array_equal(again.ranking, first.ranking)
    loaded_back = load_importance(project, first.artifact)
    assert loaded_back.definition == NeuronDefinition("conv1") and loaded_back.class_names == CLASSES


def test_anything_that_changes_the_result_recomputes(setup, project):
    model, images, labels, _ = setup
    data = dataset(images, labels)
    base = compute_importance(JobContext("cpu"), model, data, "fc1", project=project)
    assert not base.reused
    variants = [
        dict(rule=Composite(maxpool="equal-split")),
        dict(rule="epsilon"),
        dict(layer=NeuronDefinition("fc1", point="pre")),
        dict(per_class=True),  # all-classes results cannot answer a per-class request
        dict(max_inputs=40),
    ]
    for change in variants:
        kwargs = {"layer": "fc1", **change}
        layer = kwargs.pop("layer")
        result = compute_importance(JobContext("cpu"), model, data, layer, project=project, **kwargs)
        assert not result.reused, change
    changed = loaded(tiny_net())
    changed.module.fc2.bias.data += 0.1
    assert not compute_importance(JobContext("cpu"), changed, data, "fc1", project=project).reused
    other_labels = labels.copy()
    other_labels[1] = (other_labels[1] + 1) % 3
    relabelled = dataset(images, other_labels)
    assert not compute_importance(JobContext("cpu"), model, relabelled, "fc1", project=project).reused
    assert compute_importance(JobContext("cpu"), model, data, "fc1", project=project).reused


def test_a_cancelled_run_stores_nothing(setup, project):
    model, images, labels, _ = setup
    ctx = JobContext("cpu")
    seen = []

    def on_progress(done, total, message):
        seen.append(done)
        if done >= 20:
            ctx.cancel()

    ctx._on_progress = on_progress
    with pytest.raises(Cancelled):
        compute_importance(ctx, model, dataset(images, labels), "fc1", batch_size=10, project=project)
    assert max(seen) < N
    assert project.artifacts("importance") == {}
    assert Project.open(project.folder).artifacts("importance") == {}
