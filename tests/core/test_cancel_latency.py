"""Cancelling stops a job within a step whatever its batch size: a huge batch runs in pieces with a
check between them, and IDC's fit checks before every k-means fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.core.coverage.idc import IDC
from workbench.core.data.dataset import Split
from workbench.core.errors import Cancelled
from workbench.core.execution.jobs import JobContext
from workbench.core.models.activations import STEP_INPUTS, NeuronDefinition, stream_activations
from workbench.core.models.model_io import LoadedModel, ModelInfo
from workbench.core.models.training import predict


class CancellingNet(torch.nn.Module):
    """Counts the inputs of each forward pass over data and cancels its job after the first (the
    one-image passes that read the model's layers are not counted)."""

    def __init__(self, ctx: JobContext):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 10)
        self.ctx, self.calls = ctx, []

    def forward(self, x):
        if len(x) > 2:
            self.calls.append(len(x))
            self.ctx.cancel()
        return self.fc1(x.flatten(1))


def _big_split(n: int = 3 * STEP_INPUTS) -> Split:
    rng = np.random.default_rng(0)
    return Split(rng.integers(0, 256, (n, 1, 8, 8)).astype(np.uint8), rng.integers(0, 10, n))


def test_a_huge_batch_of_activations_stops_after_one_piece():
    ctx = JobContext("cpu")
    net = CancellingNet(ctx)
    with pytest.raises(Cancelled):
        for _ in stream_activations(ctx, net, _big_split(), [NeuronDefinition("fc1")], (1, 8, 8),
                                    batch_size=3 * STEP_INPUTS):
            pass
    assert net.calls == [STEP_INPUTS]


def test_a_huge_batch_of_predictions_stops_after_one_piece():
    ctx = JobContext("cpu")
    net = CancellingNet(ctx)
    model = LoadedModel(net, ModelInfo(name="n", source="test", format="module", input_shape=(1, 8, 8)))
    with pytest.raises(Cancelled):
        predict(ctx, model, _big_split(), batch_size=3 * STEP_INPUTS)
    assert net.calls == [STEP_INPUTS]


def test_pieces_give_the_same_activations_as_one_pass():
    torch.manual_seed(0)
    net = torch.nn.Sequential()
    net.add_module("fc1", torch.nn.Linear(64, 10))
    net = torch.nn.Sequential(torch.nn.Flatten(), net)
    split = _big_split(STEP_INPUTS + 100)
    (_, acts, predictions), = stream_activations(JobContext("cpu"), net, split, [NeuronDefinition("1.fc1")],
                                                 (1, 8, 8), batch_size=len(split))
    with torch.no_grad():
        whole = net(split.tensor())
    np.testing.assert_allclose(next(iter(acts.values())), whole.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(predictions, whole.argmax(1).numpy())


def test_idc_checks_before_every_k_means_fit():
    rng = np.random.default_rng(0)
    idc = IDC(neurons=[0, 1, 2])
    idc.start_fit()
    idc.partial_fit(rng.normal(size=(500, 3)).astype(np.float32))
    calls = []

    def check():
        calls.append(1)
        if len(calls) == 2:
            raise Cancelled()

    with pytest.raises(Cancelled):
        idc.finish_fit(check=check)
    assert len(calls) == 2  # stopped at the second fit, not after all nine
    idc.finish_fit()  # and a fit nobody cancels still runs
    assert idc.fitted and len(idc.clusters) == 3


class CancellingSplit(Split):
    """A split that records how many inputs each read of its images takes and cancels the job at the first."""

    def __init__(self, images, labels, ctx: JobContext, reads: list):
        super().__init__(images, labels)
        self.ctx, self.reads = ctx, reads

    def tensor(self, index=None):
        out = super().tensor(index)
        if len(out) > 2:
            self.reads.append(len(out))
            self.ctx.cancel()
        return out


def test_relevance_and_attacks_on_a_huge_batch_stop_after_one_bounded_piece():
    """Asked for one batch of 12,288 inputs, relevance and the attacks read a bounded piece and stop."""
    from workbench.core.data.dataset import Dataset, DatasetCard, step_batch
    from workbench.core.importance.neuron_importance import LRP_PASSES, compute_importance
    from workbench.core.robustness.attacks import PGD_STEPS, attack_split

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    model = LoadedModel(net.eval(), ModelInfo(name="n", source="test", format="module", input_shape=(1, 8, 8)))
    big = _big_split()
    for run, passes in ((lambda ctx, split: compute_importance(
                            ctx, model, Dataset("big", [str(c) for c in range(10)], {"train": split},
                                                DatasetCard("big", "test", "-")), "1", batch_size=len(split)),
                         LRP_PASSES),
                        (lambda ctx, split: attack_split(ctx, model, split, 0.1, batch_size=len(split)),
                         PGD_STEPS + 2)):
        ctx, reads = JobContext("cpu"), []
        with pytest.raises(Cancelled):
            run(ctx, CancellingSplit(big.images, big.labels, ctx, reads))
        assert reads == [step_batch(len(big), passes)] and reads[0] < STEP_INPUTS  # one piece, then the cancel
