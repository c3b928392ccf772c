"""Layer normalisation and attention written so that the LRP-0 split of their output is the AttnLRP rule
(Achtibat et al., ICML 2024; docs/methods/importance.md#layer-normalisation-and-attention).

Each function computes its layer's usual output, but builds an autograd graph in which the factors AttnLRP
holds constant are constants: then "input ⊙ ∂z/∂input · R/s(z)", the proportional split every `split` node
applies, is the rule.

- **Layer and group normalisation** (`layer_norm`, `group_norm`): the standard deviation is held constant (AttnLRP's identity rule
  for the normalisation), so the layer is linear in its input — the mean subtraction and the affine part
  split relevance by LRP-0 and the bias keeps its share. Weight and bias are parameters, never inputs.
- **Attention** (`multi_head_attention`, for `nn.MultiheadAttention`), in one of two variants:
  `"cp"` holds the attention weights constant (CP-LRP, Ali et al., ICML 2022: the value path takes all
  relevance), the variant AttnLRP's authors use for vision transformers; `"attnlrp"` propagates through the
  softmax by AttnLRP's softmax rule and splits each bilinear product `A·V`, `Q·Kᵀ` evenly between its two
  factors (the uniform rule), which in gradient form scales the gradient reaching the queries and keys by
  1/4 and the values by 1/2.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workbench.core.errors import WorkbenchError


def layer_norm(x: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """`F.layer_norm` with its standard deviation held constant: the same values, a graph linear in `x`."""
    dims = tuple(range(-len(tuple(normalized_shape)), 0))
    centred = x - x.mean(dim=dims, keepdim=True)
    std = (centred.detach().pow(2).mean(dim=dims, keepdim=True) + eps).sqrt()
    y = centred / std
    if weight is not None:
        y = y * weight.detach()
    if bias is not None:
        y = y + bias.detach()
    return y


def group_norm(x: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """`F.group_norm` with each group's standard deviation held constant, as `layer_norm`'s."""
    n, channels = x.shape[:2]
    grouped = x.reshape(n, num_groups, -1)
    centred = grouped - grouped.mean(dim=-1, keepdim=True)
    std = (centred.detach().pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()
    y = (centred / std).reshape(x.shape)
    shape = (1, channels) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.detach().reshape(shape)
    if bias is not None:
        y = y + bias.detach().reshape(shape)
    return y


class _ScaledGradient(torch.autograd.Function):
    """The identity whose gradient is scaled: AttnLRP's uniform rule in gradient form."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


def refuse_attention(name: str, module: nn.Module) -> None:
    """Refuse, naming the setting, an attention layer this module's rule does not follow."""
    if module.bias_k is not None or module.add_zero_attn:
        raise WorkbenchError(f"LRP cannot follow attention layer {name!r}: it adds learnt or zero keys "
                             "(add_bias_kv / add_zero_attn).", "Explain a model whose MultiheadAttention layers "
                             "use neither option (the default).")


def multi_head_attention(module: nn.MultiheadAttention, variant: str, query: torch.Tensor, key: torch.Tensor,
                         value: torch.Tensor, key_padding_mask: torch.Tensor | None = None, need_weights: bool = True,
                         attn_mask: torch.Tensor | None = None, average_attn_weights: bool = True,
                         is_causal: bool = False) -> tuple[torch.Tensor, None]:
    """`module(query, key, value, …)` in evaluation, with the graph of attention `variant` ("cp" or "attnlrp").

    Returns `(output, None)`, as the module does with `need_weights=False`: LRP reads the output only.
    """
    if not module.batch_first:  # (L, N, E) → (N, L, E)
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    n, length, embed = query.shape
    heads, head_dim = module.num_heads, module.head_dim
    if module.in_proj_weight is not None:  # one packed projection when query, key and value share a size
        w_q, w_k, w_v = module.in_proj_weight.detach().chunk(3)
    else:
        w_q, w_k, w_v = (module.q_proj_weight.detach(), module.k_proj_weight.detach(),
                         module.v_proj_weight.detach())
    b_q = b_k = b_v = None
    if module.in_proj_bias is not None:
        b_q, b_k, b_v = module.in_proj_bias.detach().chunk(3)

    def by_head(t):
        return t.reshape(n, -1, heads, head_dim).transpose(1, 2)  # (N, H, L, d)

    q, k, v = by_head(F.linear(query, w_q, b_q)), by_head(F.linear(key, w_k, b_k)), by_head(F.linear(value, w_v, b_v))
    out = _attention(variant, q, k, v, _module_mask(attn_mask, key_padding_mask, is_causal, n, heads, length,
                                                    key.shape[1], q), 1 / math.sqrt(head_dim))
    out = F.linear(out.transpose(1, 2).reshape(n, length, embed), module.out_proj.weight.detach(),
                   module.out_proj.bias.detach() if module.out_proj.bias is not None else None)
    return (out if module.batch_first else out.transpose(0, 1)), None


def scaled_dot_product_attention(variant: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor:
    """`F.scaled_dot_product_attention` in evaluation (no dropout), with the graph of attention `variant`."""
    if enable_gqa and query.shape[-3] != key.shape[-3]:  # grouped queries: each key/value head serves a group
        repeat = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(repeat, dim=-3), value.repeat_interleave(repeat, dim=-3)
    length, source = query.shape[-2], key.shape[-2]
    mask = _sdpa_mask(attn_mask, is_causal, length, source, query)
    return _attention(variant, query, key, value, mask, scale if scale is not None else 1 / math.sqrt(query.shape[-1]))


def _attention(variant: str, q, k, v, mask, scale: float) -> torch.Tensor:
    """softmax(q·kᵀ·scale + mask)·v, with q and k held constant ("cp") or the gradients of the uniform rule."""
    if variant == "cp":
        q, k = q.detach(), k.detach()
    else:
        q, k, v = _ScaledGradient.apply(q, 0.25), _ScaledGradient.apply(k, 0.25), _ScaledGradient.apply(v, 0.5)
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores + mask
    return torch.softmax(scores, dim=-1) @ v


def _additive(mask: torch.Tensor, like: torch.Tensor, masked: bool) -> torch.Tensor:
    """A mask as an additive term: a boolean one −∞ where it equals `masked`, 0 elsewhere; a float one as it is."""
    mask = mask.to(like.device)
    if mask.dtype != torch.bool:
        return mask.to(like.dtype)
    return torch.zeros_like(mask, dtype=like.dtype).masked_fill(mask == masked, -math.inf)


def _module_mask(attn_mask, key_padding_mask, is_causal: bool, n: int, heads: int, length: int, source: int,
                 like: torch.Tensor) -> torch.Tensor | None:
    """`nn.MultiheadAttention`'s masks (a boolean True masks) as one additive (N, H, L, S) term, or None."""
    if is_causal and attn_mask is None:
        attn_mask = torch.ones(length, source, dtype=torch.bool, device=like.device).triu(1)
    total = None
    if attn_mask is not None:
        total = _additive(attn_mask, like, masked=True)
        total = total.reshape(n, heads, length, source) if total.dim() == 3 else total
    if key_padding_mask is not None:
        padding = _additive(key_padding_mask, like, masked=True).reshape(n, 1, 1, source)
        total = padding if total is None else total + padding
    return total


def _sdpa_mask(attn_mask, is_causal: bool, length: int, source: int, like: torch.Tensor) -> torch.Tensor | None:
    """`F.scaled_dot_product_attention`'s mask (a boolean True takes part) as an additive term, or None."""
    if is_causal and attn_mask is None:
        attn_mask = torch.ones(length, source, dtype=torch.bool, device=like.device).tril()
    return None if attn_mask is None else _additive(attn_mask, like, masked=False)


def shifted_window_attention(variant: str, input: torch.Tensor, qkv_weight: torch.Tensor, proj_weight: torch.Tensor,
                             relative_position_bias: torch.Tensor, window_size: list[int], num_heads: int,
                             shift_size: list[int], attention_dropout: float = 0.0, dropout: float = 0.0,
                             qkv_bias: torch.Tensor | None = None, proj_bias: torch.Tensor | None = None,
                             logit_scale: torch.Tensor | None = None, training: bool = True) -> torch.Tensor:
    """torchvision's Swin window attention (v1, and v2's cosine attention) in evaluation, with the graph of
    attention `variant`: (N, H, W, C) → (N, H, W, C).

    The windows are cut from the padded, cyclically shifted map; each attends within itself, with the learnt
    relative position bias and, where the shift joined distant regions, the mask that keeps them apart — both
    constants, as is v2's learnt logit scale. v2 normalises queries and keys: the norms are held constant, as
    layer normalisation's standard deviation is.
    """
    n, height, width, channels = input.shape
    wh, ww = window_size
    x = F.pad(input, (0, 0, 0, (ww - width % ww) % ww, 0, (wh - height % wh) % wh))
    padded_h, padded_w = x.shape[1], x.shape[2]
    shift = [0 if wh >= padded_h else shift_size[0], 0 if ww >= padded_w else shift_size[1]]
    if sum(shift) > 0:
        x = torch.roll(x, shifts=(-shift[0], -shift[1]), dims=(1, 2))
    rows, cols = padded_h // wh, padded_w // ww
    x = x.view(n, rows, wh, cols, ww, channels).permute(0, 1, 3, 2, 4, 5).reshape(n * rows * cols, wh * ww, channels)
    if logit_scale is not None and qkv_bias is not None:  # v2 learns no key bias
        qkv_bias = qkv_bias.detach().clone()
        qkv_bias[qkv_bias.numel() // 3: 2 * qkv_bias.numel() // 3] = 0
    qkv = F.linear(x, qkv_weight.detach(), qkv_bias.detach() if qkv_bias is not None else None)
    q, k, v = qkv.reshape(x.shape[0], x.shape[1], 3, num_heads, channels // num_heads).permute(2, 0, 3, 1, 4)
    if logit_scale is not None:  # cosine attention
        q = q / q.detach().norm(dim=-1, keepdim=True).clamp_min(1e-12)
        k = k / k.detach().norm(dim=-1, keepdim=True).clamp_min(1e-12)
        scale = torch.clamp(logit_scale.detach(), max=math.log(100.0)).exp()
    else:
        scale = (channels // num_heads) ** -0.5
    mask = relative_position_bias.detach()
    if sum(shift) > 0:
        mask = mask + _shift_mask(padded_h, padded_w, window_size, shift, x).unsqueeze(1).repeat(n, 1, 1, 1)
    out = _attention(variant, q, k, v, mask, scale)
    out = F.linear(out.transpose(1, 2).reshape(x.shape[0], x.shape[1], channels), proj_weight.detach(),
                   proj_bias.detach() if proj_bias is not None else None)
    out = out.view(n, rows, cols, wh, ww, channels).permute(0, 1, 3, 2, 4, 5).reshape(n, padded_h, padded_w, channels)
    if sum(shift) > 0:
        out = torch.roll(out, shifts=(shift[0], shift[1]), dims=(1, 2))
    return out[:, :height, :width, :].contiguous()


def _shift_mask(padded_h: int, padded_w: int, window_size: list[int], shift: list[int],
                like: torch.Tensor) -> torch.Tensor:
    """(windows, L, L): −100 between positions of a window that came from different regions of the map before
    the cyclic shift, 0 elsewhere (torchvision's value, so the outputs agree)."""
    wh, ww = window_size
    region = torch.zeros((padded_h, padded_w), dtype=like.dtype, device=like.device)
    count = 0
    for h in ((0, -wh), (-wh, -shift[0]), (-shift[0], None)):
        for w in ((0, -ww), (-ww, -shift[1]), (-shift[1], None)):
            region[h[0]:h[1], w[0]:w[1]] = count
            count += 1
    region = region.view(padded_h // wh, wh, padded_w // ww, ww).permute(0, 2, 1, 3).reshape(-1, wh * ww)
    different = region.unsqueeze(1) != region.unsqueeze(2)
    return torch.zeros_like(different, dtype=like.dtype).masked_fill(different, -100.0)
