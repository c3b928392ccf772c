"""The inputs importance keeps per neuron for its gallery (issue 32, item 3): the kept top-k equals a
brute-force ranking of every input of the split, one at a time; it survives storing and shards; a
gallery read from it equals the streamed gallery without a pass over the split; and a result stored
before anything was kept still yields a gallery."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.data.dataset import Dataset, DatasetCard, Split
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.execution.sharding import Distribution
from workbench.core.importance.gallery import neuron_gallery
from workbench.core.importance.lrp import LRP
from workbench.core.importance.neuron_importance import compute_importance, load_importance
from workbench.core.importance.top_inputs import TopInputs
from workbench.core.models.activations import NeuronDefinition
from workbench.core.models.model_io import LoadedModel, ModelInfo
from workbench.core.project.folder import Project

CLASSES = ["a", "b", "c"]
N = 100
K = 6


def tiny_net() -> nn.Sequential:
    torch.manual_seed(2)
    net = nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(1, 4, 3, padding=1)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(4 * 4 * 4, 8)), ("relu2", nn.ReLU()),
        ("fc2", nn.Linear(8, 3))])).eval().double()
    with torch.no_grad():
        net.fc1.bias[0] = -100.0  # a dead unit: every input ties at 0, so the lower indices must win
    return net


def loaded(module: nn.Module) -> LoadedModel:
    return LoadedModel(module, ModelInfo(name="tiny", source="test", format="test", input_shape=(1, 8, 8),
                                         class_names=CLASSES))


@pytest.fixture
def data() -> Dataset:
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(N, 1, 8, 8), dtype=np.uint8)
    images[7] = images[8]  # a tie between two inputs
    labels = rng.integers(0, 3, size=N)  # about a third right: misclassified inputs are ranked too
    return Dataset("synthetic", CLASSES, {"train": Split(images, labels), "test": Split(images[:10], labels[:10])},
                   DatasetCard("s", "test", "MIT"))


def one_at_a_time(net, data, definition: NeuronDefinition, modules: str):
    """The reference: every input of the split explained on its own, in a plain loop — its relevance
    per neuron (from its predicted logit) and its value at `modules` by a forward hook."""
    explainer = LRP(net)
    images = data.split("train").tensor().double()
    relevance, activation, prediction = [], [], []
    grab = {}
    handle = dict(net.named_modules())[modules].register_forward_hook(
        lambda mod, inp, out: grab.__setitem__("out", out.detach()))
    try:
        for i in range(N):
            x = images[i:i + 1]
            R = explainer.explain(x, layers=[definition.layer], to_input=False).layers[definition.layer][0]
            element = definition.conv_neuron == "element" or R.dim() == 1
            relevance.append(R.flatten() if element else R.sum(dim=(1, 2)))
            with torch.no_grad():
                prediction.append(int(net(x).argmax(1)))
            out = grab["out"][0]
            activation.append(out.flatten() if element else out.mean(dim=(1, 2)))
    finally:
        handle.remove()
    return torch.stack(relevance).numpy(), torch.stack(activation).numpy(), np.array(prediction)


def ranked(scores: np.ndarray, k: int) -> np.ndarray:
    """Largest first, ties to the lower index: what a full scan sorted by (−score, index) gives."""
    return np.lexsort((np.arange(len(scores)), -scores))[:k]


def assert_matches_reference(top: TopInputs, relevance, activation, prediction, positions=None):
    positions = np.arange(len(relevance)) if positions is None else positions
    for ranking, scores in (("relevance", relevance), ("activation", activation)):
        for n in range(scores.shape[1]):
            best = ranked(scores[:, n], K)
            kept = top.columns[ranking]
            np.testing.assert_array_equal(kept["index"][n], positions[best], err_msg=f"{ranking} of neuron {n}")
            np.testing.assert_allclose(kept["relevance"][n], relevance[best, n], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(kept["activation"][n], activation[best, n], rtol=1e-9, atol=1e-12)
            np.testing.assert_array_equal(kept["prediction"][n], prediction[best])


@pytest.mark.parametrize("layer, point, conv_neuron, modules", [
    ("conv1", "post", "channel-mean", "relu1"), ("fc1", "post", "channel-mean", "relu2"),
    ("fc1", "pre", "channel-mean", "fc1"), ("conv1", "post", "element", "relu1")])
def test_the_kept_top_k_is_a_full_ranking_of_every_input(data, layer, point, conv_neuron, modules):
    net = tiny_net()
    definition = NeuronDefinition(layer, point, conv_neuron)
    relevance, activation, prediction = one_at_a_time(net, data, definition, modules)
    for batch in (7, 1000):
        result = compute_importance(JobContext("cpu"), loaded(net), data, definition, batch_size=batch, top_inputs=K)
        top = result.top_inputs
        assert top.inputs == N and top.columns["relevance"]["index"].shape == (relevance.shape[1], K)
        assert_matches_reference(top, relevance, activation, prediction)
    if layer == "fc1" and point == "post":  # the dead unit: all zeros, so the first K inputs
        assert top.columns["activation"]["index"][0].tolist() == list(range(K))
    # Keeping them changes nothing in the sums (misclassified inputs still count for nothing there).
    plain = compute_importance(JobContext("cpu"), loaded(net), data, definition, batch_size=1000, top_inputs=0)
    assert plain.top_inputs is None
    np.testing.assert_array_equal(plain.totals, result.totals)
    np.testing.assert_array_equal(plain.counts, result.counts)


def test_a_sample_keeps_its_own_inputs_and_shards_keep_the_same_as_one_pass(data):
    net = tiny_net()
    definition = NeuronDefinition("fc1")
    relevance, activation, prediction = one_at_a_time(net, data, definition, "relu2")
    sampled = compute_importance(JobContext("cpu"), loaded(net), data, "fc1", batch_size=9, max_inputs=40, seed=3,
                                 top_inputs=K)
    positions = np.sort(np.random.default_rng(3).choice(N, 40, replace=False))
    assert sampled.top_inputs.inputs == 40
    assert_matches_reference(sampled.top_inputs, relevance[positions], activation[positions], prediction[positions],
                             positions)
    sharded = compute_importance(JobContext("cpu", distribution=Distribution(shards=3)), loaded(net), data, "fc1",
                                 batch_size=9, top_inputs=K)
    assert_matches_reference(sharded.top_inputs, relevance, activation, prediction)


def test_kept_inputs_are_stored_and_read_back(data, tmp_path):
    project = Project.create(tmp_path / "p", "p")
    net = tiny_net()
    first = compute_importance(JobContext("cpu"), loaded(net), data, "conv1", project=project, top_inputs=K)
    again = load_importance(project, first.artifact)
    assert again.reused and again.provenance["top_inputs"] == K
    for ranking, columns in first.top_inputs.columns.items():
        for name, values in columns.items():
            np.testing.assert_array_equal(again.top_inputs.columns[ranking][name], values)
    assert again.top_inputs.inputs == N and again.top_inputs.split == "train" and again.top_inputs.layer == "conv1"


def test_a_gallery_read_from_the_kept_inputs_equals_the_streamed_one_without_a_pass(data, monkeypatch):
    net = tiny_net()
    model = loaded(net)
    result = compute_importance(JobContext("cpu"), model, data, "fc1", top_inputs=K)
    streamed = neuron_gallery(JobContext("cpu"), model, data, "fc1", 3, k=K)
    passes = []
    original = Split.batches
    monkeypatch.setattr(Split, "batches", lambda self, *a, **kw: passes.append(self) or original(self, *a, **kw))
    kept = neuron_gallery(JobContext("cpu"), model, data, "fc1", 3, k=K, kept=result.top_inputs.neuron(3))
    assert passes == []  # no pass over the split: a lookup and one batch of heatmaps
    assert kept.inputs == N and "kept by the importance result" in kept.provenance["ranked"]
    for mine, theirs in ((kept.by_relevance, streamed.by_relevance), (kept.by_activation, streamed.by_activation)):
        assert [i.index for i in mine] == [i.index for i in theirs]
        assert [(i.label, i.prediction) for i in mine] == [(i.label, i.prediction) for i in theirs]
        np.testing.assert_allclose([i.score for i in mine], [i.score for i in theirs], rtol=1e-9)
        np.testing.assert_allclose([i.relevance for i in mine], [i.relevance for i in theirs], rtol=1e-9)
        np.testing.assert_allclose([i.activation for i in mine], [i.activation for i in theirs], rtol=1e-9)
        for a, b in zip(mine, theirs):
            np.testing.assert_allclose(a.heatmap, b.heatmap, rtol=1e-6, atol=1e-9)
    # Fewer kept than asked for: it streams instead, and says nothing false.
    more = neuron_gallery(JobContext("cpu"), model, data, "fc1", 3, k=K + 2, kept=result.top_inputs.neuron(3))
    assert passes and len(more.by_relevance) == K + 2 and "ranked" not in more.provenance
    with pytest.raises(WorkbenchError, match="not of neuron 4"):
        neuron_gallery(JobContext("cpu"), model, data, "fc1", 4, k=K, kept=result.top_inputs.neuron(3))


def test_a_result_stored_without_kept_inputs_still_yields_a_gallery(data, tmp_path):
    project = Project.create(tmp_path / "p", "p")
    net = tiny_net()
    model = loaded(net)
    old = compute_importance(JobContext("cpu"), model, data, "fc1", project=project, top_inputs=0)  # as before
    assert "top_by_relevance_index" not in project.load_artifact(old.artifact, "importance").names
    reused = compute_importance(JobContext("cpu"), model, data, "fc1", project=project)  # now keeps by default
    assert reused.reused and reused.artifact == old.artifact and reused.top_inputs is None
    gallery = neuron_gallery(JobContext("cpu"), model, data, "fc1", 3, k=K, kept=None)
    assert len(gallery.by_relevance) == K and gallery.inputs == N


def test_running_top_inputs_refuse_nan_and_a_bad_k():
    top = TopInputs(3, 2, "fc1")
    with pytest.raises(WorkbenchError, match="NaN"):
        top.offer([0, 1], [[0.0, np.nan], [1.0, 2.0]], [[0.0, 0.0], [1.0, 1.0]], [0, 1])
    with pytest.raises(WorkbenchError, match="at least 1"):
        TopInputs(0, 2)
