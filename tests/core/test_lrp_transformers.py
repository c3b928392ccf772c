"""LRP through layer normalisation and attention (AttnLRP and its CP variant), against lxt — AttnLRP's authors'
reference code — and against the rules written out by hand."""

import importlib.metadata
import math
import pathlib
import sys
import types

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torchvision.models.swin_transformer import SwinTransformer
from torchvision.models.vision_transformer import VisionTransformer

from workbench.core.errors import WorkbenchError
from workbench.core.importance.lrp import LRP, Composite


def small_vit(classes: int = 5) -> nn.Module:
    torch.manual_seed(0)
    model = VisionTransformer(image_size=16, patch_size=4, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64,
                              num_classes=classes)
    nn.init.normal_(model.heads.head.weight, std=0.2)  # torchvision starts the head at zero: every logit 0
    return model.eval().double()


def gradient_times_input(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x ⊙ ∂(target logit)/∂x: LRP-0 of a network whose forward already holds constant what the rules hold."""
    x = x.clone().requires_grad_(True)
    logits = model(x)
    logits.gather(1, logits.argmax(1, keepdim=True)).sum().backward()
    return (x * x.grad).detach()


def conservation_error(result) -> float:
    total = result.input.flatten(1).sum(1, dtype=torch.float64) + sum(result.absorbed.values())
    return float(((total - result.start).abs() / result.start.abs()).max())


@pytest.fixture
def lxt_patches():
    """lxt's torchvision-ViT patches (`lxt.efficient.patches`), loaded without lxt's package `__init__`, which
    imports its language-model integrations and with them a transformers release that conflicts with diffusers."""
    try:
        root = pathlib.Path(importlib.metadata.distribution("lxt").locate_file("lxt"))
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("lxt is not installed (make setup installs it)")
    saved_modules = {name: sys.modules.get(name) for name in ("lxt", "lxt.efficient")}
    for name, folder in (("lxt", root), ("lxt.efficient", root / "efficient")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    import lxt.efficient.patches as patches

    classes = (nn.GELU, nn.LayerNorm, nn.MultiheadAttention)
    saved = {cls: dict(vars(cls)) for cls in classes}
    try:
        yield patches
    finally:
        for cls in classes:  # the patches replace methods of torch's classes for the whole process
            for attr in ("forward", "original_forward"):
                if attr in saved[cls]:
                    setattr(cls, attr, saved[cls][attr])
                elif attr in vars(cls):
                    delattr(cls, attr)
        for name, module in saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        for name in [n for n in sys.modules if n.startswith("lxt.")]:
            sys.modules.pop(name)


def test_a_vision_transformer_matches_lxt_cp_lrp(lxt_patches):
    model = small_vit()
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    ours = LRP(model, Composite("lrp-0", attention="cp")).explain(x, track_absorbed=True)
    # lxt's map for torchvision's ViT: identity rule on GELU, std held constant in LayerNorm, CP in attention
    lxt_patches.patch_method(lxt_patches.non_linear_forward, nn.GELU, keep_original=True)
    lxt_patches.patch_method(lxt_patches.layer_norm_forward, nn.LayerNorm)
    lxt_patches.patch_method(lxt_patches.cp_multi_head_attention_forward, nn.MultiheadAttention, keep_original=True)
    reference = gradient_times_input(model, x)
    assert torch.allclose(ours.input, reference, rtol=0, atol=1e-7 * float(reference.abs().max()))
    assert conservation_error(ours) < 1e-10


class SelfAttention(nn.Module):
    def __init__(self, attention: nn.MultiheadAttention, classes: int = 3):
        super().__init__()
        self.attention = attention
        self.head = nn.Linear(attention.embed_dim, classes)

    def forward(self, x):
        out, _ = self.attention(x, x, x, need_weights=False)
        return self.head(out.mean(1))


def attnlrp_by_hand(attention: nn.MultiheadAttention, x: torch.Tensor, R_out: torch.Tensor) -> torch.Tensor:
    """AttnLRP written out rule by rule: LRP-0 on the projections, the uniform rule on A·V and Q·Kᵀ, the softmax
    rule R_S = S ⊙ (R_A − A·ΣR_A)."""
    n, length, embed = x.shape
    heads, d = attention.num_heads, attention.head_dim
    w_q, w_k, w_v = attention.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = attention.in_proj_bias.detach().chunk(3)
    q, k, v = (F.linear(x, w, b).reshape(n, length, heads, d).transpose(1, 2)
               for w, b in ((w_q, b_q), (w_k, b_k), (w_v, b_v)))
    S = torch.einsum("nhld,nhsd->nhls", q, k) / math.sqrt(d)
    A = torch.softmax(S, -1)
    O = torch.einsum("nhls,nhsd->nhld", A, v)
    merged = O.transpose(1, 2).reshape(n, length, embed)
    y = attention.out_proj(merged)
    R_merged = merged * torch.einsum("nlf,fe->nle", R_out / y, attention.out_proj.weight.detach())
    R_O = R_merged.reshape(n, length, heads, d).transpose(1, 2)
    half = R_O / (2 * O)
    R_A = torch.einsum("nhls,nhsd,nhld->nhls", A, v, half)
    R_v = torch.einsum("nhls,nhsd,nhld->nhsd", A, v, half)
    R_S = S * (R_A - A * R_A.sum(-1, keepdim=True))
    half = R_S / (2 * S) / math.sqrt(d)
    R_q = torch.einsum("nhld,nhsd,nhls->nhld", q, k, half)
    R_k = torch.einsum("nhld,nhsd,nhls->nhsd", q, k, half)
    R_x = torch.zeros_like(x)
    for R, t, w in ((R_q, q, w_q), (R_k, k, w_k), (R_v, v, w_v)):
        ratio = (R / t).transpose(1, 2).reshape(n, length, embed)
        R_x = R_x + x * (ratio @ w)
    return R_x


def test_attnlrp_applies_the_softmax_and_uniform_rules():
    torch.manual_seed(1)
    attention = nn.MultiheadAttention(8, 2, batch_first=True).double()
    model = SelfAttention(attention).eval().double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    explainer = LRP(model, Composite("lrp-0", attention="attnlrp"))
    result = explainer.explain(x, layers=["attention"], track_absorbed=True)
    expected = attnlrp_by_hand(attention, x, result.layers["attention"])
    assert torch.allclose(result.input, expected, rtol=1e-8, atol=1e-10)
    assert conservation_error(result) < 1e-10  # what the softmax rule does not pass on is counted as absorbed


def test_cp_attention_gives_the_value_path_all_relevance():
    torch.manual_seed(2)
    attention = nn.MultiheadAttention(8, 2, batch_first=False).double()  # sequence-first, as the default is
    model = SelfAttention(attention).eval().double()
    x = torch.randn(6, 5, 8, dtype=torch.float64)  # (L, N, E): the model averages over what it thinks are tokens

    class HeldConstant(nn.Module):  # the same attention, its weights computed from detached queries and keys
        def forward(self, x):
            w_q, w_k, w_v = attention.in_proj_weight.chunk(3)
            b_q, b_k, b_v = attention.in_proj_bias.chunk(3)
            q, k, v = F.linear(x, w_q, b_q), F.linear(x, w_k, b_k), F.linear(x, w_v, b_v)
            split = [t.reshape(6, 5 * 2, 4).transpose(0, 1) for t in (q, k, v)]
            weights = torch.softmax(split[0].detach() @ split[1].detach().transpose(1, 2) / 2.0, -1)
            out = (weights @ split[2]).transpose(0, 1).reshape(6, 5, 8)
            return model.head(attention.out_proj(out).mean(1))

    ours = LRP(model, Composite("lrp-0")).explain(x)
    reference = gradient_times_input(HeldConstant().eval(), x)
    assert torch.allclose(ours.input, reference, rtol=1e-8, atol=1e-12)


class FusedAttention(nn.Module):
    """Attention written with `F.scaled_dot_product_attention`, as timm's and many users' models are."""

    def __init__(self, dim=8, heads=2, classes=3):
        super().__init__()
        self.heads, self.qkv, self.proj, self.head = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), \
            nn.Linear(dim, classes)

    def forward(self, x):
        n, length, dim = x.shape
        q, k, v = self.qkv(x).reshape(n, length, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(self.proj(out.transpose(1, 2).reshape(n, length, dim)).mean(1))


class WrittenOutAttention(FusedAttention):
    """The same attention with its matrix products and softmax written out."""

    def __init__(self):
        super().__init__()
        self.register_buffer("future", torch.ones(6, 6, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, x):
        n, length, dim = x.shape
        q, k, v = self.qkv(x).reshape(n, length, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-2, -1) * (dim // self.heads) ** -0.5
        scores = scores.masked_fill(self.future, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.head(self.proj(out.transpose(1, 2).reshape(n, length, dim)).mean(1))


@pytest.mark.parametrize("variant", ["cp", "attnlrp"])
def test_fused_and_written_out_attention_get_the_same_relevance(variant):
    torch.manual_seed(3)
    fused = FusedAttention().eval().double()
    written = WrittenOutAttention().eval().double()
    written.load_state_dict(fused.state_dict())
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    a = LRP(fused, Composite("lrp-0", attention=variant)).explain(x, track_absorbed=True)
    b = LRP(written, Composite("lrp-0", attention=variant)).explain(x, track_absorbed=True)
    assert torch.allclose(a.logits, b.logits)
    assert torch.allclose(a.input, b.input, rtol=1e-8, atol=1e-12)
    assert conservation_error(a) < 1e-10 and conservation_error(b) < 1e-10


def test_layer_norm_holds_its_standard_deviation_constant():
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(6, 6), nn.LayerNorm(6), nn.Linear(6, 2)).double().eval()
    nn.init.normal_(model[1].weight)
    nn.init.normal_(model[1].bias)
    x = torch.randn(3, 6, dtype=torch.float64)
    result = LRP(nn.Sequential(model), "lrp-0").explain(x, layers=["0.1", "0.0"], track_absorbed=True)
    # by hand: y = (h − mean h)/σ·γ + β is linear in h with σ fixed, J = diag(γ/σ)(I − 11ᵀ/D)
    h = model[0](x).detach()
    sigma = (h.var(1, unbiased=False, keepdim=True) + model[1].eps).sqrt()
    y = model[1](h).detach()
    centring = torch.eye(6, dtype=torch.float64) - 1 / 6
    J = (model[1].weight.detach() / sigma)[:, :, None] * centring  # (N, out, in)
    expected = h * torch.einsum("noi,no->ni", J, result.layers["0.1"] / y)
    assert torch.allclose(result.layers["0.0"], expected, rtol=1e-9, atol=1e-12)
    assert conservation_error(result) < 1e-10


@pytest.mark.parametrize("variant", ["cp", "attnlrp"])
def test_swin_and_convnext_are_traced_and_conserve(variant):
    torch.manual_seed(5)
    swin = SwinTransformer(patch_size=[2, 2], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4],
                           num_classes=4).eval().double()
    block = [torchvision.models.convnext.CNBlockConfig(16, 32, 1), torchvision.models.convnext.CNBlockConfig(32, None, 1)]
    convnext = torchvision.models.ConvNeXt(block, num_classes=4).eval().double()
    for model in (swin, convnext):
        x = torch.randn(2, 3, 16, 16, dtype=torch.float64)
        result = LRP(model, Composite("lrp-0", attention=variant)).explain(x, track_absorbed=True)
        assert torch.allclose(result.logits, model(x))  # the rules' forward computes what the model does
        assert conservation_error(result) < 1e-9


class TwoSignals(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.a(x) * self.b(x))


class SoftmaxAsValue(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.head = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.softmax(self.a(x), -1))


def test_products_of_two_signals_split_evenly_under_attnlrp_and_are_refused_under_cp():
    x = torch.randn(3, 4, dtype=torch.float64)
    model = TwoSignals().double().eval()
    with pytest.raises(WorkbenchError, match=r"'mul'.*two signals.*attnlrp"):
        LRP(model, Composite("lrp-0"))
    result = LRP(model, Composite("lrp-0", attention="attnlrp")).explain(x, layers=["mul", "a", "b"],
                                                                           track_absorbed=True)
    assert torch.allclose(result.layers["a"], result.layers["b"])  # each factor of a·b takes half of each R_j
    assert torch.allclose(result.layers["a"] + result.layers["b"], result.layers["mul"], atol=1e-12)
    assert conservation_error(result) < 1e-10


def test_a_softmax_used_as_a_value_is_refused_under_cp():
    with pytest.raises(WorkbenchError, match=r"softmax.*not only the weights of a product"):
        LRP(SoftmaxAsValue().double(), Composite("lrp-0"))


def test_attention_options_without_a_rule_are_refused_by_name():
    class WithBiasKV(SelfAttention):
        pass

    model = WithBiasKV(nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True))
    with pytest.raises(WorkbenchError, match=r"'attention'.*add_bias_kv"):
        LRP(model)

    class UsesWeights(SelfAttention):
        def forward(self, x):
            out, weights = self.attention(x, x, x)
            return self.head(out.mean(1)) + weights.sum()

    with pytest.raises(WorkbenchError, match=r"uses the attention weights of 'attention'"):
        LRP(UsesWeights(nn.MultiheadAttention(8, 2, batch_first=True)))
    with pytest.raises(WorkbenchError, match="Unknown attention variant"):
        Composite("lrp-0", attention="rollout")
    assert Composite("lrp-0", attention="attnlrp").label == "lrp-0_attnlrp"
    assert Composite("lrp-0", attention="attnlrp").describe()["attention"] == "attnlrp"
    assert "attention" not in Composite("lrp-0").describe()  # the default: stored results keep their keys


def test_group_norm_computes_as_torch_and_conserves():
    torch.manual_seed(6)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3))
    nn.init.normal_(model[1].weight)
    nn.init.normal_(model[1].bias)
    model = model.double().eval()
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    result = LRP(model).explain(x, track_absorbed=True)
    assert torch.allclose(result.logits, model(x))
    assert conservation_error(result) < 1e-10
