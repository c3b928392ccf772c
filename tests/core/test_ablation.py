"""The ablation check (issue item 4): accuracy and downstream change with the important neurons switched
off versus random ones. References are brute force on a tiny model — the same ablation done by
editing the weights of the following layer (zero: its input columns cleared; mean: those columns
folded into its bias), or by a hand-written forward pass that edits the outputs."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.data.dataset import Dataset, DatasetCard, Split
from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.importance.ablation import AblationResult, ablation_check, load_ablation, random_draws
from workbench.core.models.activations import NeuronDefinition
from workbench.core.models.model_io import LoadedModel, ModelInfo
from workbench.core.project.folder import Project

CLASSES = ["a", "b", "c"]
N = 120


def tiny_net() -> nn.Sequential:
    torch.manual_seed(1)
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(1, 4, 3, padding=1)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(4 * 4 * 4, 8)), ("relu2", nn.ReLU()),
        ("fc2", nn.Linear(8, 3))])).eval()


def loaded(module: nn.Module) -> LoadedModel:
    return LoadedModel(module, ModelInfo(name="tiny", source="test", format="test", input_shape=(1, 8, 8),
                                         class_names=CLASSES))


@pytest.fixture
def setup():
    """A tiny model and a test split whose labels are its predictions, except every third image."""
    model = loaded(tiny_net())
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(N, 1, 8, 8), dtype=np.uint8)
    x = torch.from_numpy(images).float() / 255
    with torch.no_grad():
        model.module.fc2.bias -= model.module(x).mean(0)  # all three classes get predicted
        predicted = model.module(x).argmax(1).numpy()
    labels = predicted.copy()
    labels[::3] = (predicted[::3] + 1) % 3
    data = Dataset("synthetic", CLASSES, {"test": Split(images, labels)}, DatasetCard("s", "test", "MIT"))
    return model, data, x, torch.from_numpy(labels)


def accuracy(logits, y) -> float:
    return float((logits.argmax(1) == y).double().mean())


def relative_change(after, before) -> float:
    return float(((after - before).double().norm(dim=1) / before.double().norm(dim=1)).mean())


# --- the brute-force references ----------------------------------------------------------------------

def edited_fc1_model(net, units, means=None):
    """fc1 units ablated after their ReLU by editing fc2: columns cleared, their mean folded into the bias."""
    import copy

    edited = copy.deepcopy(net)
    with torch.no_grad():
        if means is not None:
            edited.fc2.bias += edited.fc2.weight[:, units] @ means[units]
        edited.fc2.weight[:, units] = 0
    return edited


def edited_conv1_model(net, channels, means=None):
    """conv1 channels ablated after their ReLU by editing fc1 (a constant map stays constant through max-pool)."""
    import copy

    edited = copy.deepcopy(net)
    with torch.no_grad():
        for c in channels:
            columns = slice(c * 16, (c + 1) * 16)  # channel c's 4×4 pooled positions after Flatten
            if means is not None:
                edited.fc1.bias += edited.fc1.weight[:, columns].sum(1) * means[c]
            edited.fc1.weight[:, columns] = 0
    return edited


def test_zeroing_dense_units_matches_clearing_the_next_layers_columns(setup):
    model, data, x, y = setup
    net = model.module
    important = [5, 1, 6]
    result = ablation_check(JobContext("cpu"), model, data, "fc1", important, draws=4, seed=3, batch_size=50)
    with torch.no_grad():
        clean = net(x)
        reference = edited_fc1_model(net, important)(x)
        assert result.baseline_accuracy == pytest.approx(accuracy(clean, y))
        assert result.baseline_accuracy == pytest.approx(2 / 3, abs=0.01)
        assert result.important_accuracy == pytest.approx(accuracy(reference, y))
        assert result.downstream_layer == "fc2"
        assert result.important_activation_change == pytest.approx(relative_change(reference, clean), rel=1e-5)
        for draw, acc, change in zip(result.random_neurons, result.random_accuracies, result.random_activation_changes):
            drawn = edited_fc1_model(net, draw)(x)
            assert acc == pytest.approx(accuracy(drawn, y))
            assert change == pytest.approx(relative_change(drawn, clean), rel=1e-5)
    assert result.important_activation_change > 0.05  # the ablation really changed something
    assert result.layer == "fc1" and result.m == 3 and result.inputs == N and result.neurons == 8
    assert result.important_neurons == important and result.draws == 4 and len(result.random_neurons) == 4


def test_zeroing_conv_channels_ablates_whole_channels(setup):
    model, data, x, y = setup
    net = model.module
    result = ablation_check(JobContext("cpu"), model, data, "conv1", [2, 0], draws=3, seed=0)
    assert result.downstream_layer == "fc1" and result.neurons == 4
    with torch.no_grad():
        clean_fc1 = net.fc1(net.flatten(net.pool1(net.relu1(net.conv1(x)))))
        edited = edited_conv1_model(net, [2, 0])
        edited_fc1 = edited.fc1(edited.flatten(edited.pool1(edited.relu1(edited.conv1(x)))))
        assert result.important_accuracy == pytest.approx(accuracy(edited(x), y))
        assert result.important_activation_change == pytest.approx(relative_change(edited_fc1, clean_fc1), rel=1e-5)
        for draw, acc in zip(result.random_neurons, result.random_accuracies):
            assert acc == pytest.approx(accuracy(edited_conv1_model(net, draw)(x), y))


def test_mean_replacement_uses_each_neurons_mean_over_the_split(setup):
    model, data, x, y = setup
    net = model.module
    with torch.no_grad():
        unit_means = net.relu2(net.fc1(net.flatten(net.pool1(net.relu1(net.conv1(x)))))).double().mean(0).float()
        channel_means = net.relu1(net.conv1(x)).double().mean(dim=(0, 2, 3)).float()
        clean = net(x)
        dense = ablation_check(JobContext("cpu"), model, data, "fc1", [0, 3, 4], mode="mean", draws=2, batch_size=32)
        reference = edited_fc1_model(net, [0, 3, 4], unit_means)(x)
        assert dense.important_accuracy == pytest.approx(accuracy(reference, y))
        assert dense.important_activation_change == pytest.approx(relative_change(reference, clean), rel=1e-4)
        zeroed = edited_fc1_model(net, [0, 3, 4])(x)
        assert not torch.allclose(zeroed, reference)  # the means are not zero, so the modes really differ

        conv = ablation_check(JobContext("cpu"), model, data, "conv1", [1, 3], mode="mean", draws=2)
        reference = edited_conv1_model(net, [1, 3], channel_means)(x)
        assert conv.important_accuracy == pytest.approx(accuracy(reference, y))
    assert dense.mode == "mean" and conv.to_dict()["mode"] == "mean"


def test_element_neurons_and_the_pre_activation_point_edit_outputs(setup):
    """Conv elements as neurons, hooked before the ReLU: checked against a forward pass written out by hand."""
    model, data, x, y = setup
    net = model.module
    elements = [0, 17, 100, 255]
    definition = NeuronDefinition("conv1", point="pre", conv_neuron="element")
    result = ablation_check(JobContext("cpu"), model, data, "conv1", elements, definition=definition, draws=2,
                            mode="mean")
    with torch.no_grad():
        pre = net.conv1(x).flatten(1)
        means = pre.double().mean(0).float()
        pre[:, elements] = means[elements]
        logits = net.fc2(net.relu2(net.fc1(net.flatten(net.pool1(net.relu1(pre.view(-1, 4, 8, 8)))))))
    assert result.neurons == 4 * 8 * 8 and result.definition == definition
    assert result.important_accuracy == pytest.approx(accuracy(logits, y))


def test_the_callers_model_is_left_as_it_was(setup):
    """The hooks act on a private copy, so a view using the same model meanwhile sees it unablated."""
    model, data, x, _ = setup
    with torch.no_grad():
        before = model.module(x)
    seen = []
    ctx = JobContext("cpu", on_progress=lambda d, t, m: seen.append(torch.equal(model.module(x), before)))
    ablation_check(ctx, model, data, "fc1", [0, 1, 2, 3], mode="mean", batch_size=40)
    assert seen and all(seen)  # also while the ablation runs
    assert all(not m._forward_hooks for m in model.module.modules())


class Wrapped(nn.Module):
    """The same network, but not an nn.Sequential: the ablation runs it whole, with a forward hook."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)


@pytest.mark.parametrize("layer, definition, mode", [
    ("fc1", None, "zero"), ("conv1", None, "mean"), ("conv1", NeuronDefinition("conv1", "pre", "element"), "mean"),
    ("fc2", None, "zero"), ("fc2", None, "mean")])
def test_the_sequential_shortcut_agrees_with_the_whole_model_hook(setup, layer, definition, mode):
    """Zoo models rerun only the layers after the ablated one; any other model reruns whole."""
    model, data, x, y = setup
    neurons = [0, 2]
    fast = ablation_check(JobContext("cpu"), model, data, layer, neurons, definition=definition, mode=mode, draws=3)
    wrapped = loaded(Wrapped(model.module))
    whole_definition = NeuronDefinition(f"net.{definition.layer}", definition.point, definition.conv_neuron) \
        if definition else None
    whole = ablation_check(JobContext("cpu"), wrapped, data, f"net.{layer}", neurons, definition=whole_definition,
                           mode=mode, draws=3)
    assert whole.downstream_layer == f"net.{fast.downstream_layer}"
    assert fast.important_accuracy == whole.important_accuracy and fast.random_accuracies == whole.random_accuracies
    np.testing.assert_allclose(fast.random_activation_changes, whole.random_activation_changes, rtol=1e-6)
    assert fast.important_activation_change == pytest.approx(whole.important_activation_change, rel=1e-6)
    if layer == "fc2" and mode == "zero":  # the logits themselves: their own downstream layer
        with torch.no_grad():
            clean = model.module(x)
            edited = clean.clone()
            edited[:, neurons] = 0
        assert fast.downstream_layer == "fc2"
        assert fast.important_accuracy == pytest.approx(accuracy(edited, y))
        assert fast.important_activation_change == pytest.approx(relative_change(edited, clean), rel=1e-6)


def test_random_draws_are_seeded_distinct_and_in_range():
    for seed in range(20):
        draws = random_draws(8, 3, 5, seed)
        assert draws == random_draws(8, 3, 5, seed)
        assert len(draws) == 5
        for draw in draws:
            assert len(draw) == len(set(draw)) == 3 and all(0 <= n < 8 for n in draw) and draw == sorted(draw)
    assert random_draws(8, 3, 5, 0) != random_draws(8, 3, 5, 1)
    assert random_draws(4, 4, 2, 0) == [[0, 1, 2, 3], [0, 1, 2, 3]]  # m = all neurons: every draw is the layer
    everyone = {n for seed in range(50) for draw in random_draws(8, 2, 3, seed) for n in draw}
    assert everyone == set(range(8))  # nothing is excluded: the important ones can be drawn too


def test_the_same_seed_gives_the_same_result(setup):
    model, data, _, _ = setup
    a = ablation_check(JobContext("cpu"), model, data, "fc1", [1, 2], seed=7)
    b = ablation_check(JobContext("cpu"), model, data, "fc1", [1, 2], seed=7)
    c = ablation_check(JobContext("cpu"), model, data, "fc1", [1, 2], seed=8)
    assert a.to_dict() == b.to_dict()
    assert a.random_neurons != c.random_neurons


def test_summary_properties():
    result = AblationResult(layer="fc1", m=2, mode="zero", draws=3, seed=0, split="test", inputs=100,
                            baseline_accuracy=0.9, important_neurons=[1, 4], important_accuracy=0.6,
                            random_neurons=[[0, 1], [2, 3], [5, 6]], random_accuracies=[0.8, 0.85, 0.9],
                            important_activation_change=0.5, random_activation_changes=[0.1, 0.2, 0.3],
                            downstream_layer="fc2")
    assert result.important_drop == pytest.approx(0.3)
    assert result.random_drop_mean == pytest.approx(0.05)
    assert result.random_drop_std == pytest.approx(0.05)  # sample std of (0.1, 0.05, 0.0)
    assert result.important_hurts_more and result.random_overlaps == [1, 0, 0]
    d = result.to_dict()
    assert d["important_drop"] == pytest.approx(0.3) and d["important_hurts_more"] is True
    assert d["random_activation_change_mean"] == pytest.approx(0.2)
    result.important_accuracy = 0.9
    assert not result.important_hurts_more


def test_bad_requests_are_refused_clearly(setup):
    model, data, _, _ = setup
    ctx = JobContext("cpu")
    with pytest.raises(WorkbenchError, match="m = 9 is larger than the 8 neurons of layer 'fc1'"):
        ablation_check(ctx, model, data, "fc1", list(range(9)))
    with pytest.raises(WorkbenchError, match="out of range"):
        ablation_check(ctx, model, data, "fc1", [0, 8])
    with pytest.raises(WorkbenchError, match="repeat"):
        ablation_check(ctx, model, data, "fc1", [2, 2])
    with pytest.raises(WorkbenchError, match="No neurons"):
        ablation_check(ctx, model, data, "fc1", [])
    with pytest.raises(WorkbenchError, match="no layer 'fc9'") as info:
        ablation_check(ctx, model, data, "fc9", [0])
    assert "conv1" in info.value.hint and "fc2" in info.value.hint
    with pytest.raises(WorkbenchError, match="mode"):
        ablation_check(ctx, model, data, "fc1", [0], mode="noise")
    with pytest.raises(WorkbenchError, match="draws"):
        ablation_check(ctx, model, data, "fc1", [0], draws=0)
    with pytest.raises(WorkbenchError, match="no split 'train'"):
        ablation_check(ctx, model, data, "fc1", [0], split="train")


def test_progress_per_batch_sampling_and_cancellation(setup, tmp_path):
    model, data, _, _ = setup
    seen = []
    ctx = JobContext("cpu", on_progress=lambda d, t, m: seen.append((d, t)))
    ablation_check(ctx, model, data, "fc1", [0], batch_size=50)
    assert seen == [(0, N), (50, N), (100, N), (120, N)]
    seen.clear()
    ablation_check(ctx, model, data, "fc1", [0], batch_size=50, mode="mean")
    assert seen[-1] == (2 * N, 2 * N) and len(seen) == 7  # a means pass, then the ablation pass
    sampled = ablation_check(JobContext("cpu"), model, data, "fc1", [0], max_inputs=40)
    assert sampled.inputs == 40

    project = Project.create(tmp_path / "p", "synthetic")
    ctx = JobContext("cpu")
    ctx._on_progress = lambda done, total, message: ctx.cancel() if done >= 50 else None
    with pytest.raises(Cancelled):
        ablation_check(ctx, model, data, "fc1", [0], batch_size=50, project=project)
    assert Project.open(project.folder).artifacts("ablation") == {}


def test_results_are_stored_and_reused(setup, tmp_path):
    model, data, _, _ = setup
    project = Project.create(tmp_path / "p", "synthetic")
    first = ablation_check(JobContext("cpu"), model, data, "fc1", [3, 1], mode="mean", project=project)
    assert first.artifact and not first.reused
    how = project.artifacts("ablation")[first.artifact]["provenance"]
    assert how["model_fingerprint"] == model.fingerprint() and how["important_neurons"] == [3, 1]
    assert how["mode"] == "mean" and how["seed"] == 0 and "versions" in how
    again = ablation_check(JobContext("cpu"), model, data, "fc1", [3, 1], mode="mean",
                           project=Project.open(project.folder))
    assert again.reused and again.artifact == first.artifact
    assert {k: v for k, v in again.to_dict().items() if k != "reused"} == \
        {k: v for k, v in first.to_dict().items() if k != "reused"}
    assert load_ablation(project, first.artifact).random_neurons == first.random_neurons
    for change in (dict(mode="zero"), dict(seed=1), dict(draws=2), dict(important=[1, 3])):
        kwargs = {"important": [3, 1], "mode": "mean", **change}
        important = kwargs.pop("important")
        assert not ablation_check(JobContext("cpu"), model, data, "fc1", important, project=project, **kwargs).reused


def test_on_a_real_model_the_important_neurons_hurt_more(fashion_slice):
    """lenet5-fashion, fc2: the top-6 by LRP importance cost more accuracy than random sets of 6."""
    from workbench.core.importance.neuron_importance import compute_importance
    from workbench.core.models.model_io import load_model

    model = load_model("lenet5-fashion")
    importance = compute_importance(JobContext("cpu"), model, fashion_slice, "fc2", batch_size=1000)
    result = ablation_check(JobContext("cpu"), model, fashion_slice, "fc2", importance.top(6), draws=5)
    assert result.inputs == 1000 and result.downstream_layer == "fc3"
    assert result.important_hurts_more, result.to_dict()
    assert result.important_activation_change > result.random_activation_change_mean


def test_the_verdict_ranks_the_top_set_among_the_draws_and_is_clear_only_with_enough_draws():
    """Hand computations of the rank test: chance = (1 + draws at least as costly) / (draws + 1)."""
    from workbench.core.importance.ablation import CLEAR_DRAWS, AblationResult

    def result(top_accuracy, random_accuracies):
        return AblationResult(layer="fc1", m=2, mode="zero", draws=len(random_accuracies), seed=0, split="test",
                              inputs=100, baseline_accuracy=0.9, important_neurons=[0, 1],
                              important_accuracy=top_accuracy, random_neurons=[[2, 3]] * len(random_accuracies),
                              random_accuracies=random_accuracies, important_activation_change=0.1,
                              random_activation_changes=[0.1] * len(random_accuracies), downstream_layer="fc2")

    # The case: +0.6 points against random +0.5 ± 0.7: ahead on average, not clear at all.
    mixed = result(0.894, [0.9, 0.887, 0.9, 0.889, 0.899])
    assert mixed.important_hurts_more and mixed.draws_at_least_as_bad == 2
    assert mixed.chance == pytest.approx(3 / 6) and not mixed.clearly_important
    few = result(0.5, [0.89] * 5)  # worse than every draw, but 5 draws give chance 1/6 at best
    assert few.draws_at_least_as_bad == 0 and few.chance == pytest.approx(1 / 6) and not few.clearly_important
    many = result(0.5, [0.89] * CLEAR_DRAWS)
    assert many.chance == pytest.approx(1 / 20) and many.clearly_important
    tie = result(0.89, [0.89] * CLEAR_DRAWS)  # a draw as costly as the top counts against it
    assert tie.draws_at_least_as_bad == CLEAR_DRAWS and not tie.clearly_important
    assert many.to_dict()["clearly_important"] is True and many.to_dict()["chance"] == pytest.approx(0.05)
