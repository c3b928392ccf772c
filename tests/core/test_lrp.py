"""LRP core (docs/methods/importance.md): conservation, the exact gradient×input oracle, hand-computed values, z+/αβ
identities, max-pool variants, Zennit agreement, and clear refusals. Tiny float64 nets, few images."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.importance.lrp import (LRP, LRP0, AlphaBeta, Composite, Epsilon, ZPlus, as_composite, make_rule,
                                relevance, stabilise)
from workbench.core.models.architectures import cifar_convnet, lenet1, lenet4, lenet5

AFFINE = (nn.Linear, nn.Conv1d, nn.Conv2d)
BATCHNORM = (nn.BatchNorm1d, nn.BatchNorm2d)


# --- models ------------------------------------------------------------------------------------------

def randomise_batchnorm(model: nn.Module, seed: int = 0) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, BATCHNORM):
            n = m.num_features
            m.running_mean.copy_(torch.rand(n, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(n, generator=g) * 1.5 + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
            m.bias.data.copy_((torch.rand(n, generator=g) - 0.5) * 0.4)
    return model


def zero_biases(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, AFFINE) and m.bias is not None:
            m.bias.data.zero_()
        if isinstance(m, BATCHNORM):  # folded bias k·(b − μ) + β is zero with μ = 0, β = 0
            m.running_mean.zero_()
            m.bias.data.zero_()
    return model


def every_layer_net() -> nn.Sequential:
    """Every supported sequential layer type, on 1×16×16 inputs (ReLU only, so the oracle is exact)."""
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3, padding=1, bias=False), nn.ReLU(), nn.Dropout(0.3), nn.AvgPool2d(2),
        nn.Conv2d(6, 8, 3, padding=1, stride=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        nn.Linear(32, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Identity(), nn.Linear(16, 5))


def smooth_activation_net() -> nn.Sequential:
    """Non-ReLU element-wise activations (they pass relevance through): conservation only, no oracle."""
    return nn.Sequential(
        nn.Conv2d(1, 3, 3), nn.Tanh(), nn.MaxPool2d(2), nn.Conv2d(3, 4, 3), nn.ELU(), nn.Flatten(),
        nn.Linear(4 * 4 * 4, 12), nn.GELU(), nn.Linear(12, 10), nn.SiLU(), nn.Linear(10, 6), nn.LeakyReLU(0.1),
        nn.Linear(6, 4), nn.Sigmoid(), nn.Linear(4, 3))


class Residual(nn.Module):
    """A small ResNet-style net with a residual sum and a concatenation: needs torch.fx."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.conv_a = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn_a = nn.BatchNorm2d(4)
        self.act_a = nn.ReLU()
        self.conv_b = nn.Conv2d(4, 4, 3, padding=1)
        self.side = nn.Conv2d(4, 2, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        x = self.relu(self.stem(x))
        out = self.conv_b(self.act_a(self.bn_a(self.conv_a(x))))
        out += x                                   # residual sum
        out = torch.relu(out)
        out = torch.cat([out, F.relu(self.side(out))], dim=1)
        out = self.pool(out)
        return self.fc(out.view(out.size(0), -1))


class Conv1dNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv1d(2, 4, 3), nn.ReLU(), nn.MaxPool1d(2), nn.Conv1d(4, 4, 3), nn.ReLU(),
                                  nn.AvgPool1d(2), nn.Flatten(), nn.Linear(24, 3))

    def forward(self, x):
        return self.body(x)


MODELS = {
    "lenet1": (lenet1, (1, 28, 28)), "lenet4": (lenet4, (1, 28, 28)), "lenet5": (lenet5, (1, 28, 28)),
    "cifar-convnet": (cifar_convnet, (3, 32, 32)), "every-layer": (every_layer_net, (1, 16, 16)),
    "residual": (Residual, (1, 8, 8)), "conv1d": (Conv1dNet, (2, 30)),
}
RELU_MODELS = ["lenet1", "lenet5", "cifar-convnet", "every-layer", "residual", "conv1d"]


def build(name: str, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """A seeded float64 model in eval mode and three inputs in [0, 1].

    Weights are scaled by 2.5 so activations keep their size through the layers (PyTorch's default
    init shrinks them about 2.5× per ReLU layer): logits of order 1 make the 1e-9 relative
    tolerances of the conservation tests meaningful rather than swamped by the 1e-12 stabiliser.
    """
    torch.manual_seed(seed)
    factory, shape = MODELS[name]
    model = randomise_batchnorm(factory()).double().eval()
    for m in model.modules():
        if isinstance(m, AFFINE):
            m.weight.data.mul_(2.5)
    x = torch.rand(3, *shape, dtype=torch.float64)
    return model, x


def outputs_and_grads(model: nn.Module, x: torch.Tensor):
    """Every leaf module's output and ∂logit_ŷ/∂output, by autograd on the unmodified model."""
    outputs = {}

    def keep(name):
        def hook(module, inputs, out):
            out.retain_grad()
            outputs[name] = out
            return out.clone()  # later in-place ops (out += x) must not alter the kept output
        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in model.named_modules() if n and not list(m.children())]
    x = x.clone().requires_grad_(True)
    try:
        logits = model(x)
    finally:
        for h in handles:
            h.remove()
    logits.gather(1, logits.argmax(1, keepdim=True)).sum().backward()
    return x, outputs


def followed_by_batchnorm(model: nn.Module) -> set[str]:
    leaves = [(n, m) for n, m in model.named_modules() if n and not list(m.children())]
    return {a for (a, ma), (_, mb) in zip(leaves, leaves[1:]) if isinstance(ma, AFFINE) and isinstance(mb, BATCHNORM)}


def close(a: torch.Tensor, b: torch.Tensor, rtol: float) -> bool:
    scale = max(float(b.abs().max()), 1e-300)
    return float((a - b).abs().max()) <= rtol * scale


# --- conservation: exact without biases; with them, a layer loses only its biases' share -------------

# Layers of the residual net that every path crosses; a branch (conv_a…conv_b, side) carries only part.
RESIDUAL_CUTS = ["stem", "relu", "add", "relu_1", "cat", "pool", "view", "fc"]


@pytest.mark.parametrize("name", ["lenet1", "lenet4", "lenet5", "cifar-convnet", "every-layer", "residual", "conv1d"])
def test_bias_free_relevance_sums_to_the_logit_at_every_layer(name):
    model, x = build(name)
    zero_biases(model)
    result = LRP(model).explain(x, layers=RESIDUAL_CUTS if name == "residual" else "all")
    logit = result.start
    assert torch.equal(logit, result.logits.max(1).values)
    sums = {n: r.flatten(1).sum(1) for n, r in result.layers.items()}
    sums["input"] = result.input.flatten(1).sum(1)
    assert len(sums) > 5
    for layer, total in sums.items():
        assert torch.all((total - logit).abs() <= 1e-9 * logit.abs()), (layer, total, logit)


def _sequential_leaves(model):
    return [(n, m) for n, m in model.named_modules() if n and not list(m.children())]


@pytest.mark.parametrize("name", ["lenet1", "lenet4", "lenet5", "cifar-convnet", "every-layer"])
def test_with_biases_each_layer_keeps_what_its_bias_does_not_absorb(name):
    """Σ_i R_i = Σ_j R_j (z_j − b_j)/s(z_j) for Conv/Linear (BN folded in); the rest conserve."""
    model, x = build(name)
    result = LRP(model).explain(x, layers="all")
    _, outputs = outputs_and_grads(model, x)
    leaves = _sequential_leaves(model)
    previous = "input"
    absorbed_somewhere = False
    for k, (name_k, module) in enumerate(leaves):
        r_in = result.input if previous == "input" else result.layers[previous]
        r_out = result.layers[name_k]
        sum_in = r_in.flatten(1).sum(1)
        if isinstance(module, AFFINE):
            after = leaves[k + 1][1] if k + 1 < len(leaves) else None
            z = outputs[leaves[k + 1][0]] if isinstance(after, BATCHNORM) else outputs[name_k]
            bias = module.bias.detach() if module.bias is not None else torch.zeros(z.shape[1], dtype=z.dtype)
            if isinstance(after, BATCHNORM):
                scale = after.weight / torch.sqrt(after.running_var + after.eps)
                bias = (scale * (bias - after.running_mean) + after.bias).detach()
            b = bias.view(1, -1, *([1] * (z.dim() - 2)))
            z = z.detach()
            expected = (r_out * (z - b) / stabilise(z, 1e-12)).flatten(1).sum(1)
            absorbed_somewhere |= bool(((expected - r_out.flatten(1).sum(1)).abs() > 1e-6).any())
        else:
            expected = r_out.flatten(1).sum(1)
        assert torch.all((sum_in - expected).abs() <= 1e-9 * expected.abs().clamp(min=1.0)), (name_k, sum_in, expected)
        previous = name_k
    assert absorbed_somewhere  # the identity was not vacuous: biases did take relevance


# --- the exact oracle: LRP-0 equals gradient × input on ReLU nets ------------------------------------

@pytest.mark.parametrize("name", RELU_MODELS)
def test_lrp0_equals_activation_times_gradient_at_every_layer(name):
    model, x = build(name)
    x_grad, outputs = outputs_and_grads(model, x)
    result = LRP(model).explain(x, layers="all")
    folded = followed_by_batchnorm(model)
    checked = 0
    for layer, out in outputs.items():
        if layer in folded or layer not in result.layers:
            continue  # a Conv/Linear folded with its BatchNorm: relevance is read at the block output
        expected = (out * out.grad).detach()
        assert close(result.layers[layer], expected, 1e-7), layer
        checked += 1
    assert checked >= 5
    assert close(result.input, (x_grad * x_grad.grad).detach(), 1e-7)


def test_standalone_batchnorm_is_an_affine_map_with_a_warning():
    torch.manual_seed(1)
    model = randomise_batchnorm(nn.Sequential(
        nn.Conv2d(1, 3, 3), nn.ReLU(), nn.BatchNorm2d(3), nn.Flatten(), nn.Linear(3 * 6 * 6, 4))).double().eval()
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    with pytest.warns(UserWarning, match="'2'.*cannot be folded"):
        explainer = LRP(model)
    result = explainer.explain(x, layers="all")
    x_grad, outputs = outputs_and_grads(model, x)
    for layer in ("0", "1", "2"):
        assert close(result.layers[layer], (outputs[layer] * outputs[layer].grad).detach(), 1e-7)
    assert close(result.input, (x_grad * x_grad.grad).detach(), 1e-7)


def test_in_place_activations_are_swapped_and_the_model_is_untouched():
    model, x = build("lenet5")
    reference = LRP(model).explain(x, layers="all")
    inplace = copy.deepcopy(model)
    for name in ("relu1", "relu2", "relu3", "relu4"):
        setattr(inplace, name, nn.ReLU(inplace=True))
    result = LRP(inplace).explain(x, layers="all")
    for layer in reference.layers:
        assert torch.allclose(result.layers[layer], reference.layers[layer], rtol=0, atol=1e-12), layer
    assert torch.allclose(result.input, reference.input, rtol=0, atol=1e-12)
    assert inplace.relu1.inplace  # the user's model keeps its own modules


# --- hand-computed and brute-force values --------------------------------------------------------------

def tiny_dense() -> nn.Sequential:
    """x = [1, 2] → fc1 (W1, b1) → ReLU → fc2 (W2, b2): z1 = [−0.5, 3], a1 = [0, 3], logits [7, 3]."""
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)).double()
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, -1.0], [2.0, 1.0]]))
        model[0].bias.copy_(torch.tensor([0.5, -1.0]))
        model[2].weight.copy_(torch.tensor([[1.0, 2.0], [-1.0, 1.0]]))
        model[2].bias.copy_(torch.tensor([1.0, 0.0]))
    return model


@pytest.mark.parametrize("rule, hidden, inputs", [
    # LRP-0: R(a1) = a1·w/7·7 = [0, 6]; R(x) = x·w1/3·6 = [4, 4] (the negative bias of neuron 1 adds relevance)
    (LRP0(), [0.0, 6.0], [4.0, 4.0]),
    # ε = 0.5: R(a1) = [0, 6·7/7.5] = [0, 5.6]; R(x) = [2/3.5·5.6, 2/3.5·5.6] = [3.2, 3.2]
    (Epsilon(0.5), [0.0, 5.6], [3.2, 3.2]),
    # z+: Z⁺ = 6 + b⁺(=1) = 7 → [0, 6]; below Z⁺ = 2 + 2 + b⁺(=0) = 4 → [3, 3]
    (ZPlus(), [0.0, 6.0], [3.0, 3.0]),
    # αβ(2,1): positive share 2·[0, 6/7·7] = [0, 12], no negative products; below 2·[2/4, 2/4]·12 = [12, 12]
    (AlphaBeta(2, 1), [0.0, 12.0], [12.0, 12.0]),
    # bias kept out of the denominator: R(a1) = a1·w/6·7 = [0, 7]; R(x) = x·w1/4·7 = [3.5, 3.5]
    (LRP0(bias_in_denominator=False), [0.0, 7.0], [3.5, 3.5]),
])
def test_tiny_dense_model_matches_hand_computation(rule, hidden, inputs):
    result = LRP(tiny_dense(), rule).explain(torch.tensor([[1.0, 2.0]], dtype=torch.float64), layers=["1", "0"])
    assert result.target.tolist() == [0] and result.start.tolist() == [7.0]
    assert torch.allclose(result.layers["1"], torch.tensor([hidden], dtype=torch.float64), rtol=0, atol=1e-9)
    assert torch.allclose(result.layers["0"], torch.tensor([hidden], dtype=torch.float64), rtol=0, atol=1e-9)
    assert torch.allclose(result.input, torch.tensor([inputs], dtype=torch.float64), rtol=0, atol=1e-9)


def brute_force_dense(layers: list[nn.Linear], x: torch.Tensor, rule: str, alpha=2.0, beta=1.0, eps=1e-12,
                      bias_in_denominator=True) -> list[list[float]]:
    """The rule table of docs/methods/importance.md#rules, written out with Python loops over i and j
    (ReLU between the layers)."""
    acts = [x.tolist()]
    for k, layer in enumerate(layers):
        weight, bias = layer.weight.detach(), layer.bias.detach()
        z = [sum(acts[-1][i] * float(weight[j, i]) for i in range(layer.in_features)) + float(bias[j])
             for j in range(layer.out_features)]
        acts.append([max(v, 0.0) for v in z] if k + 1 < len(layers) else z)
    j_star = max(range(len(acts[-1])), key=lambda j: acts[-1][j])
    R = [acts[-1][j] if j == j_star else 0.0 for j in range(len(acts[-1]))]
    relevances = [R]

    def s(v):
        return v + eps if v >= 0 else v - eps

    for k in range(len(layers) - 1, -1, -1):
        layer, a = layers[k], acts[k]
        W = [[float(layer.weight.detach()[j, i]) for i in range(layer.in_features)] for j in range(layer.out_features)]
        b = [float(layer.bias.detach()[j]) if bias_in_denominator else 0.0 for j in range(layer.out_features)]
        R_in = [0.0] * layer.in_features
        for j in range(layer.out_features):
            products = [a[i] * W[j][i] for i in range(layer.in_features)]
            if rule == "lrp-0":
                z = sum(products) + b[j]
                for i in range(layer.in_features):
                    R_in[i] += products[i] / s(z) * R[j]
            else:
                zp = sum(p for p in products if p > 0) + max(b[j], 0.0)
                zn = sum(p for p in products if p < 0) + min(b[j], 0.0)
                a_, b_ = (1.0, 0.0) if rule == "z+" else (alpha, beta)
                for i in range(layer.in_features):
                    pos = products[i] / s(zp) if products[i] > 0 and zp != 0 else 0.0
                    neg = products[i] / s(zn) if products[i] < 0 and zn != 0 else 0.0
                    R_in[i] += (a_ * pos - b_ * neg) * R[j]
        R = R_in
        relevances.append(R)
    return relevances[::-1]  # input, hidden…, output


@pytest.mark.parametrize("rule", [LRP0(), ZPlus(), AlphaBeta(2, 1), AlphaBeta(3, 2), ZPlus(bias_in_denominator=False)])
def test_dense_net_matches_the_rule_table_brute_force(rule):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3)).double().eval()
    x = torch.randn(1, 6, dtype=torch.float64)  # negative inputs too: every sign case of z+/αβ is used
    result = LRP(model, rule).explain(x, layers=["0", "2"])
    for r in (result.input, result.layers["0"], result.layers["2"]):
        assert int((r != 0).sum()) >= 3  # relevance reaches several units of every layer: the check is not vacuous
    name = {"lrp-0": "lrp-0", "z+": "z+", "alpha-beta": "alpha-beta"}[rule.name]
    expected = brute_force_dense([model[0], model[2], model[4]], x[0], name,
                                 alpha=getattr(rule, "alpha", 2.0), beta=getattr(rule, "beta", 1.0),
                                 bias_in_denominator=rule.bias_in_denominator)
    assert torch.allclose(result.input[0], torch.tensor(expected[0], dtype=torch.float64), rtol=1e-9, atol=1e-12)
    assert torch.allclose(result.layers["0"][0], torch.tensor(expected[1], dtype=torch.float64), rtol=1e-9, atol=1e-12)
    assert torch.allclose(result.layers["2"][0], torch.tensor(expected[2], dtype=torch.float64), rtol=1e-9, atol=1e-12)


# --- z+ and αβ ---------------------------------------------------------------------------------------

def test_zplus_is_non_negative_and_conserves_where_the_positive_denominator_is_positive():
    model, x = build("lenet5")
    zero_biases(model)
    result = LRP(model, ZPlus()).explain(x, layers="all")
    sign = result.start.sign().view(-1, 1)
    for layer, r in [*result.layers.items(), ("input", result.input)]:
        assert torch.all(r.flatten(1) * sign >= -1e-12), layer
    _, outputs = outputs_and_grads(model, x)
    pairs = [("input", "conv1"), ("pool1", "conv2"), ("flatten", "fc1"), ("relu3", "fc2"), ("relu4", "fc3")]
    for below, layer in pairs:
        module = getattr(model, layer)
        a = x if below == "input" else outputs[below].detach()
        op = (lambda t, w: F.conv2d(t, w)) if isinstance(module, nn.Conv2d) else F.linear
        w = module.weight.detach()
        z_plus = op(a.clamp(min=0), w.clamp(min=0)) + op(a.clamp(max=0), w.clamp(max=0))
        kept = (result.layers[layer] * (z_plus > 0)).flatten(1).sum(1)
        r_in = result.input if below == "input" else result.layers[below]
        assert torch.allclose(r_in.flatten(1).sum(1), kept, rtol=1e-9, atol=0), layer


@pytest.mark.parametrize("bias_in_denominator", [True, False])
def test_alpha_beta_per_neuron_identity(bias_in_denominator):
    """One Linear layer, relevance on output j only: Σ_i R_i = z_j(α(Z⁺−b⁺)/Z⁺ − β(Z⁻−b⁻)/Z⁻)."""
    torch.manual_seed(5)
    layer = nn.Linear(6, 4).double()
    x = torch.randn(1, 6, dtype=torch.float64)
    rule = AlphaBeta(3, 2, bias_in_denominator=bias_in_denominator)
    explainer = LRP(nn.Sequential(layer), rule)
    w, b = layer.weight.detach(), layer.bias.detach()
    products = x[0] * w                                          # (4, 6): a_i w_ij for each j
    for j in range(4):
        result = explainer.explain(x, target=j)
        z = float(result.logits[0, j])
        pos, neg = float(products[j].clamp(min=0).sum()), float(products[j].clamp(max=0).sum())
        bp, bn = (max(float(b[j]), 0.0), min(float(b[j]), 0.0)) if bias_in_denominator else (0.0, 0.0)
        s_pos = float(stabilise(torch.tensor(pos + bp, dtype=torch.float64), 1e-12))
        s_neg = float(stabilise(torch.tensor(neg + bn, dtype=torch.float64), 1e-12))
        expected = z * (3 * pos / s_pos - 2 * neg / s_neg)
        assert abs(float(result.input.sum()) - expected) <= 1e-9 * abs(expected)
        if not bias_in_denominator:  # both signs present: the total conserves
            assert abs(float(result.input.sum()) - z) <= 1e-9 * abs(z)


def test_alpha_beta_zero_negative_denominator_contributes_nothing():
    layer = nn.Linear(2, 1).double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0]]))
        layer.bias.zero_()
    result = LRP(nn.Sequential(layer), AlphaBeta(2, 1)).explain(torch.tensor([[1.0, 1.0]], dtype=torch.float64))
    # all products positive: only the α share acts, so the relevance doubles: 2·[1, 2]
    assert torch.allclose(result.input, torch.tensor([[2.0, 4.0]], dtype=torch.float64), atol=1e-9)


# --- max-pool variants ---------------------------------------------------------------------------------

def pool_model(pool: nn.Module, n: int) -> nn.Sequential:
    model = nn.Sequential(pool, nn.Flatten(), nn.Linear(n, 1, bias=False)).double()
    model[2].weight.data.fill_(1.0)
    return model


def test_max_pool_winner_takes_all_and_equal_split_shares_ties():
    x = torch.tensor([[[[3.0, 3.0], [1.0, 3.0]]]], dtype=torch.float64)
    winner = LRP(pool_model(nn.MaxPool2d(2), 1), Composite(maxpool="winner")).explain(x).input
    split = LRP(pool_model(nn.MaxPool2d(2), 1), Composite(maxpool="equal-split")).explain(x).input
    # one winner, as the max-pool gradient (3·3/s(3) = 3 up to the 1e-12 stabiliser of the Linear layer)
    assert torch.allclose(winner.flatten(), torch.tensor([3.0, 0.0, 0.0, 0.0], dtype=torch.float64), atol=1e-11)
    assert torch.allclose(split.flatten(), torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=torch.float64), atol=1e-11)


@pytest.mark.parametrize("pool, shape", [
    (nn.MaxPool2d(3, stride=2, padding=1), (1, 2, 9, 9)),
    (nn.MaxPool2d(2, stride=2, ceil_mode=True), (1, 2, 7, 7)),
    (nn.MaxPool2d((2, 3), stride=(1, 2), dilation=(2, 1)), (1, 2, 9, 10)),
    (nn.MaxPool1d(3, stride=2, padding=1), (1, 2, 11)),
])
def test_equal_split_equals_winner_without_ties_and_conserves_with_them(pool, shape):
    torch.manual_seed(0)
    with torch.no_grad():
        n = pool(torch.zeros(shape)).numel()
    x = torch.rand(shape, dtype=torch.float64)
    winner = LRP(pool_model(pool, n), Composite(maxpool="winner")).explain(x)
    split = LRP(pool_model(pool, n), Composite(maxpool="equal-split")).explain(x)
    assert torch.allclose(winner.input, split.input, rtol=0, atol=1e-12)
    ties = (x * 4).round() / 4  # many equal values per window
    split = LRP(pool_model(pool, n), Composite(maxpool="equal-split")).explain(ties)
    winner = LRP(pool_model(pool, n), Composite(maxpool="winner")).explain(ties)
    assert not torch.allclose(winner.input, split.input)
    assert torch.allclose(split.input.sum(), split.start.sum(), rtol=1e-12)
    assert torch.allclose(winner.input.sum(), winner.start.sum(), rtol=1e-12)


# --- agreement with Zennit, the test oracle for the rules --------------------------------------------

def zennit_relevance(model: nn.Module, x: torch.Tensor, composite, names: list[str]):
    """Zennit's input relevance and the relevance arriving at each named module's output."""
    from zennit.attribution import Gradient

    grads = {}

    def capture(name):
        def hook(module, inputs, out):
            out.register_hook(lambda g: grads.__setitem__(name, g.detach()))
        return hook

    def start(out):
        pred = out.argmax(1, keepdim=True)
        return torch.zeros_like(out).scatter_(1, pred, out.gather(1, pred))

    modules = dict(model.named_modules())
    with Gradient(model, composite) as attributor:
        for m in model.modules():
            if isinstance(m, BATCHNORM):
                m.eps = 0.0  # Zennit 0.5.x leaves a factor 1/√(1+eps) in each merged BatchNorm
        handles = [modules[n].register_forward_hook(capture(n)) for n in names]
        try:
            _, rel = attributor(x.clone(), start)
        finally:
            for h in handles:
                h.remove()
    return rel.detach(), grads


def zennit_composite(kind: str, epsilon: float, canonize: bool):
    from zennit.canonizers import SequentialMergeBatchNorm
    from zennit.composites import EpsilonAlpha2Beta1, EpsilonPlus, LayerMapComposite
    from zennit.layer import Sum
    from zennit.rules import Epsilon as ZEpsilon
    from zennit.rules import Norm, Pass
    from zennit.types import Activation, AvgPool, Convolution

    canonizers = [SequentialMergeBatchNorm()] if canonize else None
    stab = 1e-12
    if kind in ("lrp-0", "epsilon", "epsilon-no-bias"):
        zero = "bias" if kind == "epsilon-no-bias" else None
        return LayerMapComposite([(Activation, Pass()), (AvgPool, Norm(stab)), (Sum, Norm(stab)),
                                  (Convolution, ZEpsilon(epsilon, zero_params=zero)),
                                  (nn.Linear, ZEpsilon(epsilon, zero_params=zero))], canonizers=canonizers)
    if kind == "z+":
        return EpsilonPlus(epsilon=epsilon, stabilizer=stab, canonizers=canonizers)
    return EpsilonAlpha2Beta1(epsilon=epsilon, stabilizer=stab, canonizers=canonizers)


OURS = {"lrp-0": Composite(LRP0()), "epsilon": Composite(Epsilon(0.01)),
        "epsilon-no-bias": Composite(Epsilon(0.01, bias_in_denominator=False)),
        "z+": Composite(conv=ZPlus(), dense=Epsilon(0.01)),
        "alpha-beta": Composite(conv=AlphaBeta(2, 1), dense=Epsilon(0.01))}


@pytest.mark.parametrize("name, kind", [(name, kind) for name in ("lenet5", "cifar-convnet") for kind in OURS]
                         + [("every-layer", "lrp-0"), ("lenet1", "z+")])
def test_agrees_with_zennit_at_the_input_and_every_layer(name, kind):
    pytest.importorskip("zennit", reason="Zennit is a test extra: pip install zennit==0.5.1")
    model, x = build(name)
    ours = LRP(model, OURS[kind]).explain(x, layers="all")
    names = [n for n, m in model.named_modules() if n and not list(m.children())]
    epsilon = 1e-12 if kind == "lrp-0" else 0.01
    theirs, grads = zennit_relevance(copy.deepcopy(model), x, zennit_composite(kind, epsilon, True), names)
    assert close(ours.input, theirs, 1e-5)
    compared = 0
    for layer in names:
        if layer in grads and layer in ours.layers:
            assert close(ours.layers[layer], grads[layer], 1e-5), layer
            compared += 1
    assert compared >= 8


# --- API behaviour and refusals ----------------------------------------------------------------------

def test_a_chosen_class_and_a_keep_mask_set_the_starting_relevance():
    model, x = build("lenet5")
    explainer = LRP(model)
    chosen = explainer.explain(x, target=4)
    assert chosen.target.tolist() == [4, 4, 4] and torch.equal(chosen.start, chosen.logits[:, 4])
    assert torch.equal(explainer.explain(x, target=[4, 4, 4]).input, chosen.input)
    predicted = explainer.explain(x)
    assert predicted.target.tolist() != [4, 4, 4] and not torch.allclose(predicted.input, chosen.input)
    kept = explainer.explain(x, keep=torch.tensor([True, False, True]), layers=["fc1"])
    assert kept.start[1] == 0 and float(kept.input[1].abs().sum()) == 0.0
    assert float(kept.layers["fc1"][0].abs().sum()) > 0
    with pytest.raises(WorkbenchError, match="target class"):
        explainer.explain(x, target=10)


def test_propagation_stops_at_the_deepest_requested_layer():
    model, x = build("lenet5")
    explainer = LRP(model)
    shallow = explainer.explain(x, layers=["fc2"], to_input=False)
    full = explainer.explain(x, layers=["fc2"])
    assert shallow.input is None and set(shallow.layers) == {"fc2"}
    assert torch.equal(shallow.layers["fc2"], full.layers["fc2"])


def test_layer_names_and_unknown_layers():
    model, x = build("residual")
    explainer = LRP(model)
    names = explainer.layer_names
    assert names[0] == "input" and "conv_a" in names and "add" in names and "cat" in names and "fc" in names
    with pytest.raises(WorkbenchError, match="no layer 'nope'.*") as info:
        explainer.explain(x, layers=["nope"])
    assert "conv_a" in info.value.hint


def test_float32_model_and_other_input_dtypes():
    torch.manual_seed(0)
    model = lenet5().eval()
    result = relevance(model, torch.rand(2, 1, 28, 28, dtype=torch.float64), layers=["fc1"])
    assert result.input.dtype == torch.float32
    assert torch.allclose(result.input.flatten(1).sum(1), result.layers["fc1"].sum(1), rtol=0.5)


def test_trailing_softmax_is_skipped():
    model, x = build("lenet1")
    with_softmax = nn.Sequential(*model.children(), nn.Softmax(dim=1)).double()
    assert torch.equal(LRP(with_softmax).explain(x).logits, model(x).detach())


class Upsampling(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.grow = nn.Upsample(scale_factor=2)
        self.fc = nn.Linear(2 * 12 * 12, 3)

    def forward(self, x):
        return self.fc(self.grow(self.conv(x)).flatten(1))


class Branching(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: torch.fx cannot trace it
            return self.fc(x)
        return -self.fc(x)


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y = self.fc(x)
        return y, y


class FunctionalPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2, bias=False)

    def forward(self, x):
        return self.fc(F.max_pool2d(x, 2).flatten(1))


class Multiplying(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x) * self.fc(x)


@pytest.mark.parametrize("model, message", [
    (nn.Sequential(nn.Conv2d(1, 2, 3), nn.LocalResponseNorm(2), nn.Flatten(), nn.Linear(8, 2)),
     r"layer '1' \(LocalResponseNorm\)"),
    (Upsampling(), r"layer 'grow' \(Upsample\)"),
    (Branching(), "cannot trace"),
    (TwoOutputs(), "returns only the logits|return one tensor"),
    (Multiplying(), r"layer 'mul' \(function mul of two signals"),
    (nn.Sequential(nn.Linear(4, 4), nn.Softmax(dim=1), nn.Linear(4, 2)), "softmax layer '1'"),
])
def test_models_it_cannot_handle_are_refused_naming_the_layer(model, message):
    with pytest.raises(WorkbenchError, match=message):
        LRP(model)


def test_torchscript_and_equal_split_on_adaptive_max_pool_are_refused():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated; such files still exist
        scripted = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    with pytest.raises(WorkbenchError, match="TorchScript"):
        LRP(scripted)
    with pytest.raises(WorkbenchError, match="equal-split.*AdaptiveMaxPool2d"):
        LRP(nn.Sequential(nn.AdaptiveMaxPool2d(1), nn.Flatten()), Composite(maxpool="equal-split"))
    with pytest.raises(WorkbenchError, match="equal-split.*functional max-pool 'max_pool2d'"):
        LRP(FunctionalPool(), Composite(maxpool="equal-split"))
    x = torch.rand(2, 1, 4, 4, dtype=torch.float64)
    result = LRP(FunctionalPool().double()).explain(x)  # winner-take-all: the max-pool gradient
    assert torch.allclose(result.input.flatten(1).sum(1), result.start, rtol=1e-9)
    assert int((result.input != 0).sum()) == 2 * 4


def test_nan_in_the_forward_pass_names_the_first_layer():
    model, x = build("lenet5")
    model.fc1.weight.data[0, 0] = float("nan")
    with pytest.raises(WorkbenchError, match="NaN or infinite, first at layer 'fc1'"):
        LRP(model).explain(x)


def test_overflowing_relevance_names_the_layer_it_came_through():
    """The forward pass is finite, but relevance overflows float32 below fc1 (z = 1 from ±1000 inputs)."""
    model = nn.Sequential(nn.Linear(2, 1, bias=False), nn.ReLU(), nn.Linear(1, 2, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, -1.0]]))
        model[2].weight.copy_(torch.tensor([[2e38], [0.0]]))
    x = torch.tensor([[1000.0, 999.0]])
    explainer = LRP(model)
    assert bool(torch.isfinite(explainer.explain(x, layers=["0"], to_input=False).layers["0"]).all())
    with pytest.raises(WorkbenchError, match="output of layer 'input', propagating back through layer '0'"):
        explainer.explain(x)


def test_rule_objects_and_names():
    assert make_rule("epsilon", epsilon=0.1) == Epsilon(0.1)
    assert make_rule("z+") == ZPlus() and make_rule("alpha-beta") == AlphaBeta(2, 1)
    assert as_composite("lrp-0").label == "lrp-0"
    assert Composite(conv=ZPlus(), dense=Epsilon(0.01), maxpool="equal-split").label == \
        "z+-conv_epsilon0.01-dense_equal-split"
    assert Composite(AlphaBeta(3, 2)).describe()["conv"] == \
        {"name": "alpha-beta", "bias_in_denominator": True, "alpha": 3.0, "beta": 2.0}
    with pytest.raises(WorkbenchError, match="α − β = 1"):
        AlphaBeta(2, 2)
    with pytest.raises(WorkbenchError, match="Unknown LRP rule"):
        make_rule("gamma")
    with pytest.raises(WorkbenchError, match="positive ε"):
        Epsilon(0)
    with pytest.raises(WorkbenchError, match="max-pool variant"):
        Composite(maxpool="average")
    assert torch.equal(stabilise(torch.tensor([-2.0, 0.0, -0.0, 3.0]), 0.5), torch.tensor([-2.5, 0.5, 0.5, 3.5]))


def test_no_warning_for_folded_batchnorm():
    model, _ = build("cifar-convnet")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LRP(model)
