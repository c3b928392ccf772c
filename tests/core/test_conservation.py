"""Where relevance goes (docs/methods/importance.md#conservation-check): `LRP.explain(track_absorbed=True)`
accounts for what each layer keeps back, so that start = layer + kept back, input by input, for every rule;
`conservation_check` sums that over a dataset. References: the per-layer bias share `Σ_j R_j b_j / s(z_j)`
computed by hand, and the bias-free case where nothing is kept back. Also: a layer LRP cannot handle names
the model's layers."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.data.dataset import Dataset, DatasetCard, Split
from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.importance.conservation import conservation_check
from workbench.core.importance.lrp import LRP, AlphaBeta, Composite, Epsilon, ZPlus, stabilise
from workbench.core.importance.neuron_importance import compute_importance
from workbench.core.models.model_io import LoadedModel, ModelInfo

RULES = ["lrp-0", Epsilon(0.1), ZPlus(), AlphaBeta(), Composite(conv=ZPlus(), dense=Epsilon(0.01)),
         Composite("lrp-0", maxpool="equal-split"), Epsilon(0.05, bias_in_denominator=False)]


def net(bias: bool = True) -> nn.Sequential:
    torch.manual_seed(3)
    model = nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(1, 4, 3, padding=1, bias=bias)), ("bn1", nn.BatchNorm2d(4)), ("relu1", nn.ReLU()),
        ("pool1", nn.MaxPool2d(2)), ("conv2", nn.Conv2d(4, 6, 3, padding=1, bias=bias)), ("relu2", nn.ReLU()),
        ("pool2", nn.AvgPool2d(2)), ("flatten", nn.Flatten()), ("fc1", nn.Linear(6 * 2 * 2, 10, bias=bias)),
        ("relu3", nn.ReLU()), ("fc2", nn.Linear(10, 3, bias=bias))])).double().eval()
    with torch.no_grad():
        model.bn1.running_mean.uniform_(-0.1, 0.1)
        model.bn1.running_var.uniform_(0.5, 1.5)
        if not bias:
            model.bn1.running_mean.zero_()
            model.bn1.bias.zero_()
    return model


def images(n=16):
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: getattr(r, "label", None) or repr(r))
def test_start_equals_layer_plus_what_the_layers_above_kept_back(rule):
    model = net()
    explainer = LRP(model, rule)
    x = images()
    for layer in ("fc1", "conv2", "conv1"):
        result = explainer.explain(x, layers=[layer], to_input=False, track_absorbed=True)
        R = result.layers[layer].flatten(1).sum(1)
        kept = sum(result.absorbed.values())
        torch.testing.assert_close(result.start, R + kept, rtol=1e-9, atol=1e-10)
    result = explainer.explain(x, track_absorbed=True)
    torch.testing.assert_close(result.start, result.input.flatten(1).sum(1) + sum(result.absorbed.values()),
                               rtol=1e-9, atol=1e-10)
    assert {"fc2", "fc1", "conv2", "conv1", "pool2"} <= set(result.absorbed)
    assert "bn1" not in result.absorbed  # folded into conv1


def test_the_kept_back_share_is_the_bias_share_of_the_formula():
    """LRP-0 at fc2: `Σ_j R_j b_j / s(z_j)` per input, computed by hand from the logits."""
    model = net()
    x = images()
    result = LRP(model).explain(x, layers=["fc1"], to_input=False, track_absorbed=True)
    with torch.no_grad():
        z = model(x)
    R = torch.zeros_like(z).scatter_(1, z.argmax(1, keepdim=True), z.gather(1, z.argmax(1, keepdim=True)))
    expected = (R * model.fc2.bias.detach() / stabilise(z, 1e-12)).sum(1)
    torch.testing.assert_close(result.absorbed["fc2"], expected, rtol=1e-9, atol=1e-12)
    assert float(expected.abs().max()) > 1e-3
    assert set(result.absorbed) == {"fc2"}  # propagation stopped at fc1: nothing below was crossed


def test_bias_free_layers_keep_back_only_the_stabilisers_sliver():
    model = net(bias=False)
    result = LRP(model).explain(images(), track_absorbed=True)
    for name, kept in result.absorbed.items():
        assert float(kept.abs().max()) < 1e-9, name
    torch.testing.assert_close(result.input.flatten(1).sum(1), result.start, rtol=1e-9, atol=1e-10)


def test_nothing_is_tracked_unless_asked():
    assert LRP(net()).explain(images()).absorbed == {}


# --- the dataset-level check ------------------------------------------------------------------------

@pytest.fixture
def model_and_data():
    module = net().float()
    model = LoadedModel(module, ModelInfo(name="net", source="test", format="test", input_shape=(1, 8, 8),
                                          class_names=["a", "b", "c"]))
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(60, 1, 8, 8), dtype=np.uint8)
    with torch.no_grad():
        predicted = module(torch.from_numpy(x).float() / 255).argmax(1).numpy()
    labels = predicted.copy()
    labels[::4] = (labels[::4] + 1) % 3
    data = Dataset("synthetic", ["a", "b", "c"], {"train": Split(x, labels)}, DatasetCard("s", "test", "MIT"))
    return model, data, int((labels == predicted).sum())


def test_conservation_check_balances_the_books(model_and_data):
    model, data, correct = model_and_data
    report = conservation_check(JobContext("cpu"), model, data, "conv2", batch_size=16)
    assert report.correct == correct == 45 and report.inputs == 60
    importance = compute_importance(JobContext("cpu"), model, data, "conv2")
    assert report.layer_total == pytest.approx(float(importance.totals.sum()), rel=1e-5)
    assert report.error < 1e-6 and report.max_input_error < 1e-4
    assert set(report.absorbed) == {"fc2", "fc1", "pool2"}
    assert abs(report.absorbed["fc2"]) > 1e-4 and report.layer_share != 1.0
    d = report.to_dict()
    assert d["error"] == report.error and d["absorbed_total"] == pytest.approx(report.start_total - report.layer_total,
                                                                               rel=1e-5)
    sampled = conservation_check(JobContext("cpu"), model, data, "fc1", max_inputs=20, seed=2)
    assert sampled.inputs == 20 and sampled.error < 1e-6


def test_conservation_check_refuses_unknown_layers_and_stops_when_cancelled(model_and_data):
    model, data, _ = model_and_data
    with pytest.raises(WorkbenchError, match="no layer 'fc5'") as info:
        conservation_check(JobContext("cpu"), model, data, "fc5")
    assert "conv2" in info.value.hint
    ctx = JobContext("cpu")
    ctx._on_progress = lambda done, total, message: ctx.cancel() if done >= 16 else None
    with pytest.raises(Cancelled):
        conservation_check(ctx, model, data, "fc1", batch_size=16)


def test_a_layer_lrp_cannot_handle_is_named_with_the_models_layers():
    model = nn.Sequential(OrderedDict([("conv1", nn.Conv2d(1, 2, 3)), ("norm", nn.LocalResponseNorm(2)),
                                       ("flatten", nn.Flatten()), ("fc", nn.Linear(2 * 6 * 6, 3))]))
    with pytest.raises(WorkbenchError, match="layer 'norm' \\(LocalResponseNorm\\)") as info:
        LRP(model)
    assert "The model's layers: conv1 (Conv2d), norm (LocalResponseNorm), flatten (Flatten), fc (Linear)" \
        in info.value.hint
