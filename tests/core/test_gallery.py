"""The neuron gallery and the input inspector (issue item 5): streaming top-k by relevance and by
activation against a full scan and argsort; the neuron's input heatmap against an independent
gradient × input oracle (LRP-0 equals it on ReLU nets, docs/methods/importance.md#conservation-check) and against
conservation; PNG export."""

from __future__ import annotations

import copy
import json
from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.data.dataset import Dataset, DatasetCard, Split
from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.importance.gallery import (GalleryProgress, InputExplanation, colour_level, diverging_rgb, explain_input,
                                    neuron_gallery, save_gallery_png)
from workbench.core.execution.jobs import JobContext
from workbench.core.importance.lrp import LRP
from workbench.core.models.model_io import LoadedModel, ModelInfo

CLASSES = ["a", "b", "c"]
N = 100


def tiny_net(bias: bool = True, dtype=torch.float64) -> nn.Sequential:
    torch.manual_seed(2)
    net = nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(1, 4, 3, padding=1, bias=bias)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(4 * 4 * 4, 8, bias=bias)), ("relu2", nn.ReLU()),
        ("fc2", nn.Linear(8, 3, bias=bias))])).eval().to(dtype)
    if bias:
        with torch.no_grad():
            net.conv1.bias.uniform_(-0.2, 0.2)  # biases of both signs, so they really absorb relevance
    return net


def loaded(module: nn.Module) -> LoadedModel:
    return LoadedModel(module, ModelInfo(name="tiny", source="test", format="test", input_shape=(1, 8, 8),
                                         class_names=CLASSES))


@pytest.fixture
def data():
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(N, 1, 8, 8), dtype=np.uint8)
    images[7] = images[8]  # a tie: the lower index must come first
    labels = rng.integers(0, 3, size=N)
    return Dataset("synthetic", CLASSES, {"train": Split(images, labels), "test": Split(images[:10], labels[:10])},
                   DatasetCard("s", "test", "MIT"))


def all_images(data, split="train"):
    return data.split(split).tensor().double()


def brute_force_relevance(net, x, layer, neuron):
    R = LRP(net).explain(x, layers=[layer], to_input=False).layers[layer]
    return (R.sum(dim=(2, 3)) if R.dim() == 4 else R)[:, neuron].numpy()


def argsort_top(scores, k):
    return np.argsort(-scores, kind="stable")[:k]


def gradient_times_input_heatmap(net, x, layer, neuron):
    """The oracle: on a ReLU net LRP-0 relevance at a layer output z is `z ⊙ ∂logit/∂z`; keeping neuron n's
    part and going down, the input relevance is `x ⊙ ∂(Σ_{j∈n} g_j z_j)/∂x` with `g = ∂logit/∂z` held fixed."""
    x = x.clone().requires_grad_(True)
    modules = dict(net.named_children())
    names = list(modules)
    h = x
    z = None
    for name in names:
        h = modules[name](h)
        if name == layer:
            z = h
    logits = h
    target = logits.argmax(1)
    (g,) = torch.autograd.grad(logits.gather(1, target[:, None]).sum(), z, retain_graph=True)
    keep = torch.zeros_like(z)
    keep[:, neuron] = 1
    (grad,) = torch.autograd.grad((keep * g.detach() * z).sum(), x)
    return (x.detach() * grad).sum(1).numpy()


@pytest.mark.parametrize("layer, neuron", [("conv1", 2), ("fc1", 5)])
def test_top_k_by_relevance_and_by_activation_match_a_full_scan(data, layer, neuron):
    net = tiny_net()
    model = loaded(net)
    x = all_images(data)
    relevance = brute_force_relevance(net, x, layer, neuron)
    with torch.no_grad():
        out = net.relu1(net.conv1(x)) if layer == "conv1" else \
            net.relu2(net.fc1(net.flatten(net.pool1(net.relu1(net.conv1(x))))))
        activation = (out.mean(dim=(2, 3)) if out.dim() == 4 else out)[:, neuron].numpy()
        predictions = net(x).argmax(1).numpy()
    for batch in (7, 1000):
        gallery = neuron_gallery(JobContext("cpu"), model, data, layer, neuron, k=6, batch_size=batch)
        assert [i.index for i in gallery.by_relevance] == argsort_top(relevance, 6).tolist()
        assert [i.index for i in gallery.by_activation] == argsort_top(activation, 6).tolist()
        np.testing.assert_allclose([i.score for i in gallery.by_relevance], np.sort(relevance)[::-1][:6], rtol=1e-9)
        np.testing.assert_allclose([i.score for i in gallery.by_activation], np.sort(activation)[::-1][:6], rtol=1e-9)
        for item in gallery.by_relevance + gallery.by_activation:
            assert item.label == data.split("train").labels[item.index] and item.prediction == predictions[item.index]
            assert item.relevance == pytest.approx(relevance[item.index], rel=1e-9)
            assert item.activation == pytest.approx(activation[item.index], rel=1e-9)
            assert item.heatmap.shape == (8, 8) and item.heatmap.dtype == np.float32
    assert gallery.layer == layer and gallery.neuron == neuron and gallery.split == "train"
    assert gallery.rule["dense"]["name"] == "lrp-0" and gallery.inputs == N


def test_ties_go_to_the_lower_index(data):
    gallery = neuron_gallery(JobContext("cpu"), loaded(tiny_net()), data, "fc1", 0, k=N, batch_size=8)
    order = [i.index for i in gallery.by_relevance]
    assert order.index(7) == order.index(8) - 1  # images 7 and 8 are identical


def test_sample_and_correct_only(data):
    net = tiny_net()
    model = loaded(net)
    x = all_images(data)
    relevance = brute_force_relevance(net, x, "fc1", 3)
    sample = np.sort(np.random.default_rng(4).choice(N, 30, replace=False))
    gallery = neuron_gallery(JobContext("cpu"), model, data, "fc1", 3, k=5, max_inputs=30, seed=4, batch_size=7)
    assert gallery.inputs == 30
    assert [i.index for i in gallery.by_relevance] == sample[argsort_top(relevance[sample], 5)].tolist()

    with torch.no_grad():
        correct = net(x).argmax(1).numpy() == data.split("train").labels
    masked = np.where(correct, relevance, -np.inf)
    only = neuron_gallery(JobContext("cpu"), model, data, "fc1", 3, k=5, correct_only=True)
    assert [i.index for i in only.by_relevance] == argsort_top(masked, 5).tolist()
    assert all(i.label == i.prediction for i in only.by_relevance + only.by_activation)
    assert [i.index for i in only.by_relevance] != [i.index for i in neuron_gallery(
        JobContext("cpu"), model, data, "fc1", 3, k=5).by_relevance]  # the filter changed something


@pytest.mark.parametrize("layer, neuron", [("conv1", 1), ("fc1", 6)])
def test_the_neuron_heatmap_equals_the_gradient_times_input_oracle(data, layer, neuron):
    net = tiny_net()
    gallery = neuron_gallery(JobContext("cpu"), loaded(net), data, layer, neuron, k=4)
    items = gallery.by_relevance + gallery.by_activation
    x = all_images(data)[[i.index for i in items]]
    oracle = gradient_times_input_heatmap(net, x, layer, neuron)
    np.testing.assert_allclose(np.stack([i.heatmap for i in items]), oracle, rtol=1e-5, atol=1e-6)
    assert np.abs(oracle).max() > 1e-3  # not trivially zero


def test_on_a_bias_free_net_the_heatmap_sums_to_the_neurons_relevance(data):
    net = tiny_net(bias=False)
    x = all_images(data)
    for layer in ("conv1", "fc1"):
        neuron = int(np.argmax([np.abs(brute_force_relevance(net, x, layer, n)).sum() for n in range(4)]))
        gallery = neuron_gallery(JobContext("cpu"), loaded(net), data, layer, neuron, k=5)
        for item in gallery.by_relevance + gallery.by_activation:
            assert float(item.heatmap.astype(np.float64).sum()) == pytest.approx(item.relevance, rel=1e-5, abs=1e-6)
        assert max(abs(i.relevance) for i in gallery.by_relevance) > 1e-3


def test_with_biases_the_heatmap_sums_to_the_relevance_less_what_the_biases_keep(data):
    net = tiny_net()
    x = all_images(data)[:20]
    explainer = LRP(net)
    mask = torch.zeros(8)
    mask[4] = 1
    result = explainer.explain(x, layers=["fc1"], masks={"fc1": mask}, track_absorbed=True)
    R_n = result.layers["fc1"][:, 4]
    heat = result.input.sum(dim=(1, 2, 3))
    kept = sum(result.absorbed[name] for name in ("fc1", "conv1"))
    torch.testing.assert_close(heat, R_n - kept, rtol=1e-9, atol=1e-12)
    assert float((R_n - heat).abs().max()) > 1e-3  # the biases do keep some back here
    assert set(result.absorbed) == {"fc2", "fc1", "conv1"}

    gallery = neuron_gallery(JobContext("cpu"), loaded(net), data, "fc1", 4, k=3)
    for item in gallery.by_relevance:
        one = explainer.explain(all_images(data)[[item.index]], layers=["fc1"], masks={"fc1": mask},
                                track_absorbed=True)
        expected = float(one.layers["fc1"][0, 4] - one.absorbed["fc1"][0] - one.absorbed["conv1"][0])
        assert float(item.heatmap.astype(np.float64).sum()) == pytest.approx(expected, rel=1e-5)


def test_masks_are_linear_and_the_recorded_layer_relevance_is_unmasked(data):
    """Propagation below a layer is linear in its relevance: the heatmaps of every neuron alone add up to the
    unmasked heatmap. The relevance reported at the masked layer is the unmasked one."""
    net = tiny_net()
    x = all_images(data)[:10]
    explainer = LRP(net)
    full = explainer.explain(x, layers=["conv1"])
    parts = []
    for c in range(4):
        mask = torch.zeros(4, 1, 1)
        mask[c] = 1
        part = explainer.explain(x, layers=["conv1"], masks={"conv1": mask})
        torch.testing.assert_close(part.layers["conv1"], full.layers["conv1"])
        parts.append(part.input)
    torch.testing.assert_close(sum(parts), full.input, rtol=1e-9, atol=1e-12)
    with pytest.raises(WorkbenchError, match="does not fit layer 'conv1'"):
        explainer.explain(x, layers=["conv1"], masks={"conv1": torch.ones(5, 1, 1)})


def test_explain_input_matches_lrp(data):
    net = tiny_net()
    model = loaded(net)
    x = data.split("test").tensor(slice(3, 4)).double()
    reference = LRP(net).explain(x, layers=["conv1"])
    explanation = explain_input(model, data, "test", 3, "conv1")
    assert isinstance(explanation, InputExplanation)
    np.testing.assert_allclose(explanation.heatmap, reference.input.sum(1)[0].numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(explanation.layer_relevance, reference.layers["conv1"].sum(dim=(2, 3))[0].numpy(),
                               rtol=1e-5, atol=1e-7)
    with torch.no_grad():
        activation = net.relu1(net.conv1(x)).mean(dim=(2, 3))[0].numpy()
    np.testing.assert_allclose(explanation.layer_activation, activation, rtol=1e-6)
    assert explanation.prediction == int(reference.logits.argmax(1)) and explanation.label == data.split("test").labels[3]
    assert explanation.heatmap.shape == (8, 8) and explanation.layer_relevance.shape == (4,)

    one = explain_input(model, data, "test", 3, "conv1", neuron=2)
    np.testing.assert_allclose(one.heatmap, gradient_times_input_heatmap(net, x, "conv1", 2)[0], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(one.layer_relevance, explanation.layer_relevance)  # the layer is read before masking
    with pytest.raises(WorkbenchError, match="no image 10"):
        explain_input(model, data, "test", 10, "conv1")
    with pytest.raises(WorkbenchError, match="no neuron 4"):
        explain_input(model, data, "test", 0, "conv1", neuron=4)


def test_float32_models_work_too(data):
    net = tiny_net(dtype=torch.float32)
    gallery = neuron_gallery(JobContext("cpu"), loaded(net), data, "fc1", 1, k=3)
    relevance = brute_force_relevance(net, data.split("train").tensor(), "fc1", 1)
    assert [i.index for i in gallery.by_relevance] == argsort_top(relevance, 3).tolist()
    explain_input(loaded(net), data, "test", 0, "fc1", neuron=1)


def test_bad_requests_are_refused(data):
    model = loaded(tiny_net())
    with pytest.raises(WorkbenchError, match="no neuron 8"):
        neuron_gallery(JobContext("cpu"), model, data, "fc1", 8)
    with pytest.raises(WorkbenchError, match="no layer 'fc7'") as info:
        neuron_gallery(JobContext("cpu"), model, data, "fc7", 0)
    assert "conv1" in info.value.hint
    with pytest.raises(WorkbenchError, match="k must be"):
        neuron_gallery(JobContext("cpu"), model, data, "fc1", 0, k=0)
    broken = copy.deepcopy(model)
    broken.module.fc1.weight.data[0, 0] = float("nan")
    with pytest.raises(WorkbenchError, match="fc1"):
        neuron_gallery(JobContext("cpu"), broken, data, "conv1", 0)


def test_progress_partials_and_cancellation(data):
    progress, partials = [], []
    ctx = JobContext("cpu", on_progress=lambda d, t, m: progress.append(d), on_partial=partials.append)
    gallery = neuron_gallery(ctx, loaded(tiny_net()), data, "fc1", 2, k=4, batch_size=30)
    assert progress == [0, 30, 60, 90, 100]
    assert all(isinstance(p, GalleryProgress) for p in partials) and [p.done for p in partials] == [30, 60, 90, 100]
    assert partials[-1].relevance_indices.tolist() == [i.index for i in gallery.by_relevance]

    ctx = JobContext("cpu")
    ctx._on_progress = lambda done, total, message: ctx.cancel() if done >= 30 else None
    with pytest.raises(Cancelled):
        neuron_gallery(ctx, loaded(tiny_net()), data, "fc1", 2, batch_size=30)


def test_pngs_are_written(data, tmp_path):
    from PIL import Image

    gallery = neuron_gallery(JobContext("cpu"), loaded(tiny_net()), data, "conv1", 0, k=4)
    files = save_gallery_png(gallery, data, tmp_path / "out")
    assert len(files) == 2 * (1 + 4) and all(f.exists() and f.suffix == ".png" for f in files)
    sheet = Image.open(tmp_path / "out" / "conv1-neuron0-by-relevance.png")
    assert sheet.mode == "RGB" and sheet.size[0] > 3 * 8 * 8
    panel = np.asarray(Image.open(files[1]))
    assert panel.shape == (112, 3 * 112 + 8, 3)  # image | heatmap | overlay, nearest-neighbour ×14
    record = json.loads((tmp_path / "out" / "gallery.json").read_text())
    assert [i["index"] for i in record["by_relevance"]] == [i.index for i in gallery.by_relevance]
    assert record["levels"]["relevance"] > 0 and not list((tmp_path / "out").glob("*.tmp"))


def test_the_diverging_map_is_centred_at_zero():
    rgb = diverging_rgb(np.array([-2.0, -1.0, 0.0, 1.0, 2.0]), level=1.0)
    assert rgb[2].tolist() == [255, 255, 255]
    assert rgb[0].tolist() == rgb[1].tolist() and rgb[3].tolist() == rgb[4].tolist()  # saturates beyond ±level
    assert rgb[1][2] > rgb[1][0] and rgb[3][0] > rgb[3][2]  # negative blue, positive red
    assert colour_level([np.zeros((2, 2))]) == 1.0
