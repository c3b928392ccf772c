"""Relevance through layers linear in their input (`AffineOp`, `propagate_affine`) and the
equal-split max-pool (docs/methods/importance.md#rules and #propagation-through-other-layers)."""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from workbench.core.importance.lrp.rules import Rule, sign_part, stabilised_ratio

# --- layers linear in their input --------------------------------------------------------------


class AffineOp:
    """A layer linear in its input, `z = call(a, weight, bias)`, with a snapshot of its parameters.

    `channel_dim` is where the bias broadcasts: -1 for Linear, 1 for Conv and BatchNorm.
    """

    def __init__(self, call: Callable, weight: torch.Tensor, bias: torch.Tensor | None, channel_dim: int,
                 rule: Rule):
        self.call, self.weight, self.bias, self.channel_dim, self.rule = call, weight, bias, channel_dim, rule
        self._weights: dict[str, torch.Tensor] = {"all": weight}
        self._biases: dict[str, torch.Tensor | None] = {"all": bias}

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return self.call(a, self.weight, self.bias)

    @property
    def reuses_forward(self) -> bool:
        """Whether the rule is plain LRP-0/ε, which reuses the forward pass's `z` and its graph."""
        shares = self.rule.shares()
        return len(shares) == 1 and len(shares[0].terms) == 1 and shares[0].terms[0].inputs == "all" \
            and shares[0].terms[0].weights == "all"

    def weight_part(self, which: str) -> torch.Tensor:
        if which not in self._weights:
            self._weights[which] = sign_part(self.weight, which)
        return self._weights[which]

    def bias_part(self, which: str | None) -> torch.Tensor | None:
        if which is None or self.bias is None:
            return None
        if which not in self._biases:
            self._biases[which] = sign_part(self.bias, which)
        return self._biases[which]

    def broadcast_bias(self, bias: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        if self.channel_dim == -1:
            return bias
        shape = [1] * z.dim()
        shape[1] = -1
        return bias.view(shape)


def per_input_sum(t: torch.Tensor) -> torch.Tensor:
    """(N,) float64: each row of a batch-first tensor summed over all its other dimensions."""
    return t.detach().reshape(t.shape[0], -1).sum(1, dtype=torch.float64)


def propagate_affine(op: AffineOp, a_leaf: torch.Tensor, z: torch.Tensor | None, R: torch.Tensor,
                      absorbed: list | None = None) -> torch.Tensor:
    """Relevance at the input of a layer linear in its input, under the op's rule (docs/methods/importance.md#rules).

    Plain LRP-0/ε reuses the forward pass's `z` and its autograd graph; rules with sign-split terms
    run the layer once per term on clamped inputs and weights, then take one input gradient.

    With an `absorbed` list, the relevance this layer keeps back is appended to it, per input (N,):
    `Σ_j R_j − Σ_shares coefficient · Σ_j (d_j − b_j)/s(d_j) · R_j`, with `d_j` the share's
    denominator and `b_j` the bias part in it. This is the rule's own algebra (the numerators of a
    share sum to `d_j − b_j` over the inputs), computed apart from the input gradient, so comparing
    it with the relevance that really arrives below checks the propagation
    (docs/methods/importance.md#conservation-check).
    """
    rule = op.rule
    eps = rule.stabiliser(R.dtype)
    shares = rule.shares()
    a = a_leaf.detach()
    if op.reuses_forward and z is not None:
        denominator = z.detach()
        if shares[0].terms[0].bias is None and op.bias is not None:
            denominator = denominator - op.broadcast_bias(op.bias, denominator)
        ratio = stabilised_ratio(R, denominator, eps)
        if shares[0].coefficient != 1.0:
            ratio.mul_(shares[0].coefficient)
        (c,) = torch.autograd.grad(z, a_leaf, ratio)
        if absorbed is not None:
            numerator = z.detach() - op.broadcast_bias(op.bias, z) if op.bias is not None else z.detach()
            absorbed.append(per_input_sum(R) - per_input_sum(ratio * numerator))
        return c.mul_(a)  # c is a fresh tensor from the layer's input-gradient
    out = torch.zeros_like(a)
    kept = per_input_sum(R) if absorbed is not None else None
    for share in shares:
        leaves, outputs = [], []
        for term in share.terms:
            if term.inputs == "neg" and not bool((a < 0).any()):
                continue  # after a ReLU the negative inputs are all zero: the term adds nothing
            part = sign_part(a, term.inputs) if term.inputs != "all" else a.detach()
            part.requires_grad_(True)
            with torch.enable_grad():
                outputs.append(op.call(part, op.weight_part(term.weights), op.bias_part(term.bias)))
            leaves.append(part)
        if not outputs:
            continue
        with torch.enable_grad():
            total = outputs[0] if len(outputs) == 1 else sum(outputs[1:], outputs[0])
        denominator = total.detach()
        ratio = stabilised_ratio(R, denominator, eps)
        if rule.zero_denominator_gives_zero:
            ratio = torch.where(denominator == 0, torch.zeros_like(ratio), ratio)
        grads = torch.autograd.grad(total, leaves, ratio)
        for leaf, c in zip(leaves, grads):
            out.add_(leaf.detach() * c, alpha=share.coefficient)
        if kept is not None:
            numerator = denominator
            for term in share.terms:
                bias = op.bias_part(term.bias) if term.inputs != "neg" or bool((a < 0).any()) else None
                if bias is not None:
                    numerator = numerator - op.broadcast_bias(bias, denominator)
            kept -= share.coefficient * per_input_sum(ratio * numerator)
    if kept is not None:
        absorbed.append(kept)
    return out


def _pair(v, n: int = 2) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def equal_split_maxpool(module: nn.Module, a: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """Max-pool relevance split equally among all positions equal to their window's maximum
    (docs/methods/importance.md#propagation-through-other-layers).

    Windows are unfolded over an input padded with −∞ (and, for `ceil_mode`, enough extra −∞ on
    the far side to give the module's output size), ties found by equality with the window maximum,
    and each window's share folded back onto the positions it covers.
    """
    one_d = isinstance(module, nn.MaxPool1d)
    if one_d:
        a, R = a.unsqueeze(-2), R.unsqueeze(-2)
        kernel, stride = (1, _pair(module.kernel_size, 1)[0]), (1, _pair(module.stride or module.kernel_size, 1)[0])
        padding, dilation = (0, _pair(module.padding, 1)[0]), (1, _pair(module.dilation, 1)[0])
    else:
        kernel, stride = _pair(module.kernel_size), _pair(module.stride or module.kernel_size)
        padding, dilation = _pair(module.padding), _pair(module.dilation)
    n, c, h, w = a.shape
    ho, wo = R.shape[-2:]
    extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - (size + 2 * p))
             for o, s, d, k, size, p in zip((ho, wo), stride, dilation, kernel, (h, w), padding)]
    padded = F.pad(a, (padding[1], padding[1] + extra[1], padding[0], padding[0] + extra[0]), value=-math.inf)
    hp, wp = padded.shape[-2:]
    cols = F.unfold(padded.reshape(n * c, 1, hp, wp), kernel, dilation=dilation, stride=stride)
    winners = (cols == cols.amax(dim=1, keepdim=True)).to(R.dtype)
    shares = winners * (R.reshape(n * c, 1, -1) / winners.sum(dim=1, keepdim=True))
    back = F.fold(shares, (hp, wp), kernel, dilation=dilation, stride=stride).reshape(n, c, hp, wp)
    out = back[..., padding[0]:padding[0] + h, padding[1]:padding[1] + w]
    return out.squeeze(-2) if one_d else out
