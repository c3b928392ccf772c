"""Streaming activation capture against a forward pass written out by hand with torch.nn.functional."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from workbench.core.data.dataset import Split
from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.models.activations import NeuronDefinition, collect_activations, stream_activations
from workbench.core.models.architectures import lenet5


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(3)
    return lenet5(10).eval()


@pytest.fixture(scope="module")
def images(fashion_slice):
    return fashion_slice.split("test").subset(np.arange(23))  # 23: batches of 5 leave a remainder


def manual_forward(net, x):
    """LeNet-5 by hand from its weights: every intermediate value, no hooks, no modules."""
    p = dict(net.named_parameters())
    v = {}
    v["conv1"] = F.conv2d(x, p["conv1.weight"], p["conv1.bias"])
    v["relu1"] = v["conv1"].clamp_min(0)
    v["pool1"] = F.max_pool2d(v["relu1"], 2)
    v["conv2"] = F.conv2d(v["pool1"], p["conv2.weight"], p["conv2.bias"])
    v["relu2"] = v["conv2"].clamp_min(0)
    v["pool2"] = F.max_pool2d(v["relu2"], 2)
    flat = v["pool2"].reshape(len(x), -1)
    v["fc1"] = flat @ p["fc1.weight"].T + p["fc1.bias"]
    v["relu3"] = v["fc1"].clamp_min(0)
    v["fc2"] = v["relu3"] @ p["fc2.weight"].T + p["fc2.bias"]
    v["relu4"] = v["fc2"].clamp_min(0)
    v["fc3"] = v["relu4"] @ p["fc3.weight"].T + p["fc3.bias"]
    return {k: t.detach().numpy() for k, t in v.items()}


@pytest.mark.parametrize("layer, point, conv_neuron, ref_key, reduce", [
    ("conv1", "pre", "channel-mean", "conv1", "mean"),
    ("conv1", "post", "channel-mean", "relu1", "mean"),
    ("conv2", "post", "element", "relu2", "flat"),
    ("conv2", "pre", "element", "conv2", "flat"),
    ("pool2", "post", "channel-mean", "pool2", "mean"),   # no activation after a pool: post = its output
    ("fc1", "pre", "channel-mean", "fc1", "flat"),        # dense layers ignore the conv definition
    ("fc2", "post", "element", "relu4", "flat"),
    ("fc3", "post", "channel-mean", "fc3", "flat"),
])
def test_activations_match_a_manual_forward(net, images, layer, point, conv_neuron, ref_key, reduce):
    ref = manual_forward(net, images.tensor())[ref_key]
    ref = ref.mean(axis=(2, 3)) if reduce == "mean" else ref.reshape(len(ref), -1)
    got = collect_activations(JobContext("cpu"), net, images, NeuronDefinition(layer, point, conv_neuron),
                              (1, 28, 28), batch_size=5)
    assert got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_pre_and_post_differ_exactly_by_the_relu(net, images):
    pre = collect_activations(JobContext("cpu"), net, images, NeuronDefinition("fc1", "pre"), (1, 28, 28))
    post = collect_activations(JobContext("cpu"), net, images, NeuronDefinition("fc1", "post"), (1, 28, 28))
    assert (pre < 0).any()
    np.testing.assert_allclose(post, np.maximum(pre, 0), atol=1e-6)


def test_several_layers_in_one_pass_with_predictions(net, images):
    defs = [NeuronDefinition("conv1", "post"), NeuronDefinition("fc2", "pre"),
            NeuronDefinition("conv1", "pre", "element")]
    ref = manual_forward(net, images.tensor())
    starts, preds, per_def = [], [], {d: [] for d in defs}
    for start, acts, pred in stream_activations(JobContext("cpu"), net, images, defs, (1, 28, 28), batch_size=5):
        starts.append(start)
        preds.append(pred)
        for d in defs:
            per_def[d].append(acts[d])
    assert starts == [0, 5, 10, 15, 20]
    np.testing.assert_array_equal(np.concatenate(preds), ref["fc3"].argmax(1))
    np.testing.assert_allclose(np.concatenate(per_def[defs[0]]), ref["relu1"].mean(axis=(2, 3)), atol=1e-5)
    np.testing.assert_allclose(np.concatenate(per_def[defs[1]]), ref["fc2"], atol=1e-5)
    assert np.concatenate(per_def[defs[2]]).shape == (23, 6 * 24 * 24)


def test_selected_indices_in_the_given_order(net, images):
    d = NeuronDefinition("fc1", "post")
    full = collect_activations(JobContext("cpu"), net, images, d, (1, 28, 28))
    idx = [20, 3, 3, 11]
    part = collect_activations(JobContext("cpu"), net, images, d, (1, 28, 28), batch_size=3, indices=idx)
    np.testing.assert_allclose(part, full[idx], atol=1e-6)


def test_in_place_activation_does_not_overwrite_pre_values():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU(inplace=True)).eval()
    split = Split(np.random.default_rng(0).random((6, 1, 2, 2)).astype(np.float32), np.zeros(6, np.int64))
    pre = collect_activations(JobContext("cpu"), net, split, NeuronDefinition("1", "pre"), (1, 2, 2))
    with torch.no_grad():
        ref = net[1](split.tensor().flatten(1)).numpy()
    assert (ref < 0).any()
    np.testing.assert_allclose(pre, ref, atol=1e-6)


def test_hooks_are_removed_afterwards(net, images):
    collect_activations(JobContext("cpu"), net, images, NeuronDefinition("conv1"), (1, 28, 28))
    assert all(not m._forward_hooks for m in net.modules())


def test_cancel_stops_within_a_batch(net, images):
    ctx = JobContext("cpu")
    seen = []
    gen = stream_activations(ctx, net, images, [NeuronDefinition("conv1")], (1, 28, 28), batch_size=5)
    with pytest.raises(Cancelled):
        for start, _, _ in gen:
            seen.append(start)
            ctx.cancel()
    assert seen == [0]
    assert all(not m._forward_hooks for m in net.modules())


def test_unknown_layer_and_bad_definitions(net, images):
    with pytest.raises(WorkbenchError) as err:
        collect_activations(JobContext("cpu"), net, images, NeuronDefinition("conv9"), (1, 28, 28))
    assert "conv9" in err.value.message and "conv1" in err.value.hint
    with pytest.raises(WorkbenchError, match="pre"):
        NeuronDefinition("conv1", point="middle")
    with pytest.raises(WorkbenchError, match="channel-mean"):
        NeuronDefinition("conv1", conv_neuron="pixel")
    assert NeuronDefinition("fc1", "pre", "element").to_dict() == {
        "layer": "fc1", "point": "pre", "conv_neuron": "element"}


def test_torchscript_model_is_refused_clearly(net, images):
    scripted = torch.jit.script(net)
    with pytest.raises(WorkbenchError) as err:
        collect_activations(JobContext("cpu"), scripted, images, NeuronDefinition("conv1"), (1, 28, 28))
    assert "conv1" in err.value.message and "state_dict" in err.value.hint


def test_float64_models_get_float64_inputs(digits_model, digits):
    from workbench.core.execution.jobs import JobContext
    from workbench.core.models.activations import NeuronDefinition, collect_activations

    definition = NeuronDefinition("fc1", "post")
    single = collect_activations(JobContext("cpu"), digits_model.module, digits.split("test"), definition, (1, 8, 8))
    digits_model.module.double()
    double = collect_activations(JobContext("cpu"), digits_model.module, digits.split("test"), definition, (1, 8, 8))
    assert double.dtype == np.float32 and double.shape == single.shape
    np.testing.assert_allclose(double, single, rtol=1e-4, atol=1e-5)


def test_post_point_of_a_conv_bn_relu_block_is_after_the_relu():
    """The "post" point is the block output after any BatchNorm and activation
    (docs/methods/importance.md#neurons-and-their-values)."""
    from workbench.core.models.architectures import cifar_convnet, lenet5
    from workbench.core.models.layers import layer_catalogue

    layers = {l.name: l for l in layer_catalogue(cifar_convnet(10), (3, 32, 32))}
    assert layers["conv1"].activation == "relu1" and layers["conv4"].activation == "relu4"
    assert layers["fc1"].activation == "relu5" and layers["fc2"].activation is None
    lenet = {l.name: l for l in layer_catalogue(lenet5(10), (1, 28, 28))}
    assert lenet["conv2"].activation == "relu2" and lenet["pool2"].activation is None


def test_two_threads_capturing_from_one_model_each_get_their_own_values(net, images):
    """Two jobs run one model at once (the GUI's lanes): a hook must capture only its own thread's passes."""
    import threading

    definition = NeuronDefinition("fc1", "post")
    small = Split(images.images[:37], images.labels[:37])
    expected = {name: collect_activations(JobContext("cpu"), net, data, definition, (1, 28, 28), batch_size=8)
                for name, data in (("all", images), ("small", small))}
    got, errors, start = {}, [], threading.Barrier(2)

    def run(name, data):
        try:
            start.wait()
            got[name] = [collect_activations(JobContext("cpu"), net, data, definition, (1, 28, 28), batch_size=8)
                         for _ in range(20)]  # enough passes for the two threads' batches to interleave
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=item) for item in (("all", images), ("small", small))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for name in expected:
        for values in got[name]:
            np.testing.assert_allclose(values, expected[name], rtol=1e-6, atol=1e-6)
