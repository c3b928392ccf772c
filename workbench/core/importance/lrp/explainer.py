"""The LRP explainer (`LRP`, `Relevance`, `relevance`): one forward and one relevance pass over a plan
(docs/methods/importance.md#starting-relevance)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn
from torch.fx.node import map_aggregate

from workbench.core.errors import WorkbenchError
from workbench.core.importance.lrp.plan import (GRAPH_KINDS, Node, Ref, finish_plan, fx_plan, is_plain_sequential, node_users,
                                     sequential_plan, unsupported)
from workbench.core.importance.lrp.propagation import equal_split_maxpool, per_input_sum, propagate_affine
from workbench.core.importance.lrp.rules import Composite, Rule, as_composite, default_stabiliser, stabilised_ratio
from workbench.core.models.hooks import call_name
from workbench.core.models.layers import refuse_unreadable

# --- the explainer -------------------------------------------------------------------------------


@dataclass
class Relevance:
    """The outcome of one relevance pass over a batch.

    `logits` (N, K) and `target` (N,) of the forward pass; `start` (N,) the starting relevance
    (the target logit, 0 for rows not kept); `layers` the relevance at the output of each asked-for
    layer, shaped like that output; `input` the relevance at the input (or None if not asked for).
    `absorbed` (only with `track_absorbed`): for each layer the pass crossed that keeps relevance
    back — Conv/Linear biases and stabilisers, pooling and residual sums (stabiliser, constants) —
    the amount it kept, per input, (N,) float64. `outputs`: the forward pass's output of each layer
    asked for with `outputs=`, detached.
    """

    logits: torch.Tensor
    target: torch.Tensor
    start: torch.Tensor
    layers: dict[str, torch.Tensor]
    input: torch.Tensor | None
    absorbed: dict[str, torch.Tensor] = field(default_factory=dict)
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)


class LRP:
    """An LRP explainer for one model and composite.

    Construction analyses the model once: it must be an `nn.Sequential` or `torch.fx`-traceable,
    and every layer must have a propagation rule (otherwise a `WorkbenchError` names the layer).
    BatchNorm is folded and parameters are snapshotted on the model's device in its dtype; build a
    new explainer after changing the weights. The model is put in eval mode
    (docs/methods/README.md#conventions-shared-by-all-pages).

    Relevance is read at layer *outputs*. A Conv/Linear folded with the BatchNorm after it forms one
    layer, so its relevance is that at the BatchNorm's output (as with Zennit's merged BatchNorm);
    element-wise activations pass relevance through, so "pre" and "post" read the same
    (docs/methods/importance.md#neurons-and-their-values).
    Propagation runs in the model's dtype (the float32 stabiliser is 1e-9); callers that sum
    relevance over many inputs should accumulate in float64, as `importance/neuron_importance.py` does.
    """

    def __init__(self, model: nn.Module, composite: Composite | Rule | str | None = None):
        self.composite = as_composite(composite)
        refuse_unreadable(model)  # before eval(), which an exported program's module refuses in words of its own
        model.eval()
        try:
            if is_plain_sequential(model):
                nodes, output = sequential_plan(model, self.composite)
            else:
                nodes, output = fx_plan(model, self.composite)
            self._nodes, self._output = finish_plan(nodes, output, self.composite)
        except WorkbenchError as exc:  # the user picks a layer next: say which layers the model has
            raise WorkbenchError(exc.message, f"{exc.hint} The model's layers: {_layer_list(model)}.".strip(),
                                 exc.details) from exc
        self._users = node_users(self._nodes)
        self._names = self._name_index()
        parameter = next(iter(model.parameters()), None)
        self.device = parameter.device if parameter is not None else torch.device("cpu")
        self.dtype = parameter.dtype if parameter is not None else torch.get_default_dtype()

    def _name_index(self) -> dict[str, list[int]]:
        """{layer name: [node]} in execution order: a module the model calls k times is k layers, its k-th
        call named `name#k` as in the layer catalogue (`models/hooks.layer_call`); a block (`layer3`,
        `layer3.1`, `features.6`) is read at the last node that runs inside it, its output."""
        entries: list[tuple[int, int, str]] = []  # (node, 0 or a block's depth, name)
        calls: dict[str, int] = {}
        last: dict[str, int] = {}
        for i, node in enumerate(self._nodes[:self._output + 1]):
            if node.kind in ("meta", "constant"):
                continue
            calls[node.name] = calls.get(node.name, 0) + 1
            entries.append((i, 0, call_name(node.name, calls[node.name])))
            parts = node.scope.split(".") if node.scope else []
            own = len(parts) if node.scope != node.name else len(parts) - 1  # a module is not a block of itself
            for depth in range(1, own + 1):
                last[".".join(parts[:depth])] = i
        taken = {name for _, _, name in entries}
        entries += [(i, 1 + block.count("."), block) for block, i in last.items() if block not in taken]
        entries.sort(key=lambda e: (e[0], e[1] > 0, -e[1]))  # a node, then the blocks it ends, innermost first
        names: dict[str, list[int]] = {}
        for i, _, name in entries:
            names.setdefault(name, []).append(i)
        return names

    @property
    def layer_names(self) -> list[str]:
        """Names at which relevance can be read: 'input', then every layer in execution order."""
        return list(self._names)

    def reads(self, name: str) -> bool:
        """Whether relevance and outputs can be read at layer `name`: the model has it and runs it once."""
        return len(self._names.get(name, ())) == 1

    def _resolve(self, layers: Iterable[str] | str) -> dict[str, int]:
        if isinstance(layers, str):
            layers = self.layer_names if layers == "all" else [layers]
        chosen = {}
        for name in layers:
            if name not in self._names:
                raise WorkbenchError(f"The model has no layer {name!r} to read relevance at.",
                                     f"Valid layers: {', '.join(self.layer_names)}.")
            if len(self._names[name]) > 1:
                raise WorkbenchError(f"Layer {name!r} is used {len(self._names[name])} times in the model, so its "
                                     "relevance is ambiguous.", "Read relevance at a layer that runs once.")
            chosen[name] = self._names[name][0]
        return chosen

    def explain(self, x: torch.Tensor, target: int | Sequence[int] | torch.Tensor | None = None, *,
                layers: Iterable[str] | str = (), to_input: bool = True,
                keep: torch.Tensor | Callable[[torch.Tensor], torch.Tensor] | None = None,
                check_finite: bool = True, masks: dict[str, torch.Tensor] | None = None,
                track_absorbed: bool = False, outputs: Iterable[str] = ()) -> Relevance:
        """Relevance for a batch `x`, from the target logit (default: the predicted class;
        docs/methods/importance.md#starting-relevance).

        `layers`: names (or "all") at whose outputs to return relevance. `to_input`: also return the
        input relevance; when False, propagation stops at the deepest asked-for layer. `keep`: a
        boolean (N,) mask, or a function of the logits giving one; rows not kept start from zero
        relevance. `check_finite`: a NaN or infinite output or relevance raises a `WorkbenchError`
        naming the first layer where it appeared. The check costs one test of the logits and of the
        returned relevance; only when that fails is the pass repeated layer by layer to name the layer.

        `masks`: {layer: tensor} multiplies the relevance at that layer's output by the tensor
        (broadcast against the output, e.g. a one-hot (C, 1, 1) channel mask or (F,) unit mask)
        before it goes further down, so the relevance below — the input heatmap — is that of the
        kept neurons only. `layers` still reports the relevance at a masked layer as it arrived,
        before masking. `track_absorbed`: fill `Relevance.absorbed` (see there). `outputs`: layer names
        whose forward outputs to return as well (`Relevance.outputs`), so a caller that needs a layer's
        activations too does not run a second forward pass.
        """
        chosen = self._resolve(layers)
        masked = {self._resolve(name)[name]: mask for name, mask in (masks or {}).items()}
        x = x.to(self.device, self.dtype)
        options = {"masks": masked, "track_absorbed": track_absorbed, "outputs": self._resolve(list(outputs))}
        result = self._explain(x, target, chosen, to_input, keep, check_finite, diagnose=False, **options)
        if check_finite and not all(bool(torch.isfinite(r).all()) for r in
                                    (*result.layers.values(), *([result.input] if result.input is not None else []))):
            self._explain(x, target, chosen, to_input, keep, check_finite, diagnose=True, **options)
            bad = [name for name, r in result.layers.items() if not bool(torch.isfinite(r).all())] or ["input"]
            raise WorkbenchError(f"Relevance at layer {bad[0]!r} is NaN or infinite.",
                                 "Check the model's weights and inputs for extreme values.")
        return result

    __call__ = explain

    def _explain(self, x, target, chosen: dict[str, int], to_input: bool, keep, check_finite: bool,
                 diagnose: bool, masks: dict[int, torch.Tensor], track_absorbed: bool,
                 outputs: dict[str, int]) -> Relevance:
        first_needed = 0 if to_input or not chosen else min(chosen.values())
        values, leaves = self._forward(x, first_needed)
        # Taken before the relevance pass, which frees each node's value as it goes.
        forward_outputs = {name: values[i].detach() for name, i in outputs.items()}
        logits = values[self._output].detach()
        if check_finite and not bool(torch.isfinite(logits).all()):
            self._raise_forward(values)
        target = self._target(target, logits)
        start = logits.gather(1, target[:, None]).squeeze(1)
        if keep is not None:
            mask = keep(logits) if callable(keep) else keep
            start = start * mask.to(self.device, start.dtype)
        R_out = torch.zeros_like(logits).scatter_(1, target[:, None], start[:, None])
        absorbed = {} if track_absorbed else None
        recorded, input_relevance = self._backward(values, leaves, R_out, chosen, to_input, diagnose, masks,
                                                   absorbed)
        return Relevance(logits, target, start, recorded, input_relevance, absorbed or {}, forward_outputs)

    def _target(self, target, logits: torch.Tensor) -> torch.Tensor:
        if logits.dim() != 2:
            raise WorkbenchError(f"LRP needs logits of shape (N, classes); the model returns {tuple(logits.shape)}.",
                                 "Explain a classifier whose output is one score per class.")
        n, k = logits.shape
        if target is None:
            return logits.argmax(1)
        t = torch.as_tensor(target, device=logits.device, dtype=torch.long)
        t = t.expand(n) if t.dim() == 0 else t
        if t.shape != (n,) or (t.numel() and (int(t.min()) < 0 or int(t.max()) >= k)):
            raise WorkbenchError(f"The target class must be one index in 0–{k - 1} or one per image; "
                                 f"got {tuple(t.shape)} values.", "Pass a class index or None for the prediction.")
        return t

    def _forward(self, x: torch.Tensor, first_needed: int):
        """Run the plan; nodes at or after `first_needed` that need it keep their local autograd graph."""
        values: list[Any] = [None] * len(self._nodes)
        leaves: list[dict[int, torch.Tensor] | None] = [None] * len(self._nodes)
        for i, node in enumerate(self._nodes[:self._output + 1]):
            if node.kind == "input":
                values[i] = x
                continue
            if node.kind == "constant" and node.call is None:
                values[i] = node.value
                continue
            needs_graph = i >= first_needed and node.kind in GRAPH_KINDS and \
                (node.kind != "affine" or node.op.reuses_forward)
            if needs_graph:
                local = {j: values[j].detach().requires_grad_(True) for j in node.inputs()
                         if isinstance(values[j], torch.Tensor) and values[j].is_floating_point()}
                leaves[i] = local
                lookup = local
            else:
                lookup = {}
            args, kwargs = map_aggregate((node.args, node.kwargs),
                                         lambda v: (lookup.get(v.index, values[v.index]) if isinstance(v, Ref) else v))
            with torch.set_grad_enabled(needs_graph):
                if node.kind == "affine":
                    out = node.op.forward(args[0])
                elif node.call is None:  # a BatchNorm folded into the layer before
                    out = args[0]
                else:
                    out = node.call(*args, **kwargs)
            if node.kind == "meta" and isinstance(out, torch.Tensor) and \
                    any(isinstance(values[j], torch.Tensor) for j in node.inputs()):
                raise unsupported(node.name, f"{node.what} on a tensor")
            values[i] = out
        return values, leaves

    def _raise_forward(self, values: list[Any]) -> None:
        """Name the first layer whose output is NaN or infinite (the logits were)."""
        first = self._output
        for i, value in enumerate(values[:self._output + 1]):
            if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
                first = i
                break
        node = self._nodes[first]
        raise WorkbenchError(f"The model's output is NaN or infinite, first at layer {node.name!r} ({node.what}).",
                             "Check the input images and the model's weights for NaN or infinite values.")

    def _backward(self, values, leaves, R_out, chosen: dict[str, int], to_input: bool, diagnose: bool,
                  masks: dict[int, torch.Tensor], absorbed: dict[str, torch.Tensor] | None):
        """Walk the nodes from the output back, summing the relevance each receives from its users.

        A node's relevance is complete when its turn comes (all its users come later in the plan).
        With `diagnose`, every node's relevance is tested and the first non-finite one is reported.
        `masks` multiply a node's relevance after it is recorded; `absorbed` collects what each
        node keeps back (see `Relevance.absorbed`).
        """
        relevance: dict[int, torch.Tensor] = {self._output: R_out}
        wanted: dict[int, list[str]] = {}  # a block and its last layer are one node: both are recorded
        for name, i in chosen.items():
            wanted.setdefault(i, []).append(name)
        recorded: dict[str, torch.Tensor] = {}
        input_index = next(i for i, n in enumerate(self._nodes) if n.kind == "input")
        stop = input_index if to_input else (min(chosen.values()) if chosen else self._output)
        input_relevance = None
        for i in range(self._output, stop - 1, -1):
            node = self._nodes[i]
            R = relevance.pop(i, None)
            if R is None and (i in wanted or i == input_index) and isinstance(values[i], torch.Tensor):
                R = torch.zeros_like(values[i])
            if R is None:
                continue
            if diagnose and not bool(torch.isfinite(R).all()):
                via = ", ".join(repr(self._nodes[u].name) for u in self._users[i]) or "the start"
                raise WorkbenchError(
                    f"Relevance became NaN or infinite at the output of layer {node.name!r}, "
                    f"propagating back through layer {via}.",
                    "Check the model's weights and inputs for extreme values; a larger ε (LRP-ε) may help.")
            for name in wanted.get(i, ()):
                recorded[name] = R
            if i in masks:
                R = R * _broadcast_mask(masks[i], R, node.name)
            if i == input_index:
                input_relevance = R
            if i == stop or node.kind in ("input", "constant", "meta"):
                continue
            kept = [] if absorbed is not None and node.kind in ("affine", "split") else None
            passed_on = self._propagate(node, i, values, leaves[i], R, kept)
            for j, R_in in passed_on:
                relevance[j] = relevance[j] + R_in if j in relevance else R_in
            if absorbed is not None and kept is None:  # a route into a constant: a class token, a position table
                to_constants = [per_input_sum(R_in) for j, R_in in passed_on if self._nodes[j].kind == "constant"]
                kept = [sum(to_constants)] if to_constants else None
            if kept is not None:
                if node.kind == "split":  # what the proportional split does not pass on to a layer's output
                    kept.append(per_input_sum(R) - sum(per_input_sum(R_in) for j, R_in in passed_on
                                                       if self._nodes[j].kind != "constant"))
                absorbed[node.name] = absorbed[node.name] + kept[0] if node.name in absorbed else kept[0]
            values[i] = leaves[i] = None  # free what this node kept for the pass
        return recorded, input_relevance

    def _propagate(self, node: Node, i: int, values, local, R: torch.Tensor,
                   absorbed: list | None = None) -> list[tuple[int, torch.Tensor]]:
        """Relevance for each tensor input of node `i`, given the relevance `R` at its output
        (docs/methods/importance.md#propagation-through-other-layers)."""
        inputs = [j for j in node.inputs() if isinstance(values[j], torch.Tensor)]
        if node.kind == "pass":
            return [(inputs[0], R)]
        if node.kind == "gate":  # the gate held constant: the signal takes all (summed over what it was broadcast to)
            return [(node.value, _sum_to_shape(R, values[node.value].shape))]
        if node.kind == "reshape":
            return [(inputs[0], R.reshape(values[inputs[0]].shape))]
        if node.kind == "affine":
            a = local[inputs[0]] if local else values[inputs[0]]
            return [(inputs[0], propagate_affine(node.op, a, values[i] if local else None, R, absorbed))]
        if node.kind == "maxsplit":
            return [(inputs[0], equal_split_maxpool(node.module, values[inputs[0]], R))]
        z = values[i]
        # a product with a constant factor splits to its signal alone; an integer index takes no relevance
        inputs = [node.value] if node.value is not None else [j for j in inputs if j in local]
        grad_inputs = [local[j] for j in inputs]
        if node.kind == "route":
            grads = torch.autograd.grad(z, grad_inputs, R, allow_unused=True)
            return [(j, g) for j, g in zip(inputs, grads) if g is not None]
        # "split": the proportional LRP-0 rule of pooling and residual sums
        ratio = stabilised_ratio(R, z.detach(), default_stabiliser(R.dtype))
        if node.share != 1.0:
            ratio.mul_(node.share)
        grads = torch.autograd.grad(z, grad_inputs, ratio, allow_unused=True)
        return [(j, _times(leaf.detach(), g)) for j, leaf, g in zip(inputs, grad_inputs, grads) if g is not None]


def _times(a: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """`a ⊙ gradient`, 0 where the gradient is 0 even if `a` is infinite: a masked attention score (−∞) gets none."""
    out = a * gradient
    return out if bool(torch.isfinite(a).all()) else out.masked_fill_(gradient == 0, 0)


def _sum_to_shape(R: torch.Tensor, shape) -> torch.Tensor:
    """`R` summed over the dimensions an operand of `shape` was broadcast along, so its total is kept."""
    if tuple(R.shape) == tuple(shape):
        return R
    extra = R.dim() - len(shape)
    R = R.sum(dim=tuple(range(extra))) if extra > 0 else R
    dims = tuple(d for d, size in enumerate(shape) if size == 1 and R.shape[d] != 1)
    return R.sum(dim=dims, keepdim=True) if dims else R


def _layer_list(model: nn.Module, at_most: int = 40) -> str:
    """'conv1 (Conv2d), relu1 (ReLU), …': the model's leaf layers, for messages."""
    leaves = [f"{name} ({type(m).__name__})" for name, m in model.named_modules() if name and not list(m.children())]
    more = f", … and {len(leaves) - at_most} more" if len(leaves) > at_most else ""
    return ", ".join(leaves[:at_most]) + more


def _broadcast_mask(mask: torch.Tensor, R: torch.Tensor, name: str) -> torch.Tensor:
    mask = torch.as_tensor(mask, device=R.device, dtype=R.dtype)
    try:
        if torch.broadcast_shapes(mask.shape, R.shape) == R.shape:
            return mask
    except RuntimeError:
        pass
    raise WorkbenchError(f"A relevance mask of shape {tuple(mask.shape)} does not fit layer {name!r}, whose output "
                         f"has shape {tuple(R.shape)}.", "Give a mask that broadcasts against the layer output, "
                         "e.g. (channels, 1, 1) for a conv layer or (features,) for a dense one.")


def relevance(model: nn.Module, x: torch.Tensor, target=None, *, rule: Composite | Rule | str | None = None,
              layers: Iterable[str] | str = (), to_input: bool = True) -> Relevance:
    """One-off LRP: build an explainer for `model` and explain the batch `x` (see `LRP.explain`)."""
    return LRP(model, rule).explain(x, target, layers=layers, to_input=to_input)
