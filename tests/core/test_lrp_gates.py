"""LRP through gates and size arithmetic (docs/methods/importance.md): a product of a signal and a gate — a
sigmoid's or hard sigmoid's output, as in squeeze-and-excitation — holds the gate constant, so the signal
takes all the relevance and the gate's branch none; a product of two signals is refused by name; arithmetic on
sizes (a channel shuffle's `channels // groups`) carries no relevance. Checked against the same network with
each input's gate values frozen into a constant, and by conservation under LRP-0 without biases."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.importance.lrp.explainer import LRP


class Excited(nn.Module):
    """conv → squeeze-and-excitation (mean, fc, ReLU, fc, hard sigmoid) → gate × signal → channel shuffle →
    dense."""

    def __init__(self, frozen_gate: torch.Tensor | None = None):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(8, 4, 1, bias=False)
        self.fc2 = nn.Conv2d(4, 8, 1, bias=False)
        self.gate = nn.Hardsigmoid()
        self.flatten = nn.Flatten()
        self.dense = nn.Linear(8 * 6 * 6, 5, bias=False)
        self.register_buffer("frozen", frozen_gate)

    def forward(self, x):
        x = self.relu(self.conv(x))
        g = self.frozen if self.frozen is not None else self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))
        x = g * x
        n, c, h, w = x.size()
        x = x.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)  # a channel shuffle
        return self.dense(self.flatten(x))


def assert_conserved(model, x, explained) -> None:
    """LRP-0 without biases: each input's relevance sums to its predicted logit."""
    with torch.no_grad():
        logits = model(x)
    top = logits.gather(1, logits.argmax(1, keepdim=True)).squeeze(1)
    torch.testing.assert_close(explained.input.flatten(1).sum(1).double(), top.double(), rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def excited():
    torch.manual_seed(0)
    return Excited().eval()


def test_the_gate_is_held_constant_and_the_signal_takes_all(excited):
    x = torch.rand(3, 3, 6, 6)
    explained = LRP(excited, "lrp-0").explain(x, layers=["conv", "fc1", "fc2"])
    assert_conserved(excited, x, explained)
    assert torch.count_nonzero(explained.layers["fc1"]) == 0 and torch.count_nonzero(explained.layers["fc2"]) == 0
    for i in range(len(x)):  # each input's gate frozen into a constant: the same relevance
        with torch.no_grad():
            gate = excited.gate(excited.fc2(excited.relu(excited.fc1(excited.pool(excited.relu(
                excited.conv(x[i:i + 1])))))))
        frozen = Excited(gate).eval()
        frozen.load_state_dict(excited.state_dict(), strict=False)
        reference = LRP(frozen, "lrp-0").explain(x[i:i + 1], layers=["conv"])
        torch.testing.assert_close(explained.input[i:i + 1], reference.input, rtol=1e-5, atol=1e-8)
        torch.testing.assert_close(explained.layers["conv"][i:i + 1], reference.layers["conv"], rtol=1e-5, atol=1e-8)


class Squared(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(4, 2)

    def forward(self, x):
        return self.dense(x.flatten(1) * x.flatten(1))


class Halved(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(4, 2, bias=False)

    def forward(self, x):
        return self.dense(0.5 * x.flatten(1))


def test_a_product_of_two_signals_is_refused_by_name():
    with pytest.raises(WorkbenchError, match="'mul'.*of two signals"):
        LRP(Squared(), "lrp-0")


def test_a_signal_times_a_number_passes_its_relevance():
    torch.manual_seed(0)
    model = Halved().eval()
    x = torch.rand(5, 1, 2, 2)
    assert_conserved(model, x, LRP(model, "lrp-0").explain(x))


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "efficientnet_b0"])
def test_torchvision_networks_with_squeeze_and_excitation_are_explained(name):
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None, num_classes=4).eval()
    explained = LRP(model, "epsilon").explain(torch.rand(2, 3, 32, 32))
    assert explained.input.shape == (2, 3, 32, 32) and bool(torch.isfinite(explained.input).all())


class Halves(nn.Module):
    """ShuffleNet's pattern: the channels cut in two, one half through a convolution, the halves joined again."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1, bias=False)
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.dense = nn.Linear(4 * 5 * 5, 3, bias=False)

    def forward(self, x):
        left, right = x.chunk(2, dim=1)
        return self.dense(self.flatten(torch.cat((left, self.relu(self.conv(right))), dim=1)))


def test_pieces_cut_from_a_tensor_route_relevance_back_where_they_came_from():
    torch.manual_seed(0)
    model = Halves().eval()
    x = torch.rand(3, 4, 5, 5)
    explained = LRP(model, "lrp-0").explain(x)
    assert_conserved(model, x, explained)
    # the untouched half's relevance is the dense layer's LRP-0 share of it, by hand
    with torch.no_grad():
        predicted = model(x).argmax(1)
    w = model.dense.weight[predicted].view(3, 4, 5, 5)[:, :2]
    with torch.no_grad():
        hand = x[:, :2] * w  # z_k = x_k w_k, and R_k = z_k / z · R with R = z at the start: z_k itself
    torch.testing.assert_close(explained.input[:, :2], hand, rtol=1e-5, atol=1e-7)


def test_shufflenet_is_explained():
    torch.manual_seed(0)
    model = torchvision.models.shufflenet_v2_x0_5(num_classes=4).eval()
    explained = LRP(model, "epsilon").explain(torch.rand(2, 3, 32, 32))
    assert explained.input.shape == (2, 3, 32, 32) and bool(torch.isfinite(explained.input).all())
