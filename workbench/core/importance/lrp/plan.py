"""The plan: a model turned into nodes of its graph, each with its kind of relevance crossing
(docs/methods/importance.md#propagation-through-other-layers)."""

from __future__ import annotations

import copy
import operator
import threading
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.node import map_aggregate

from workbench.core.errors import WorkbenchError
from workbench.core.importance.lrp import linearised
from workbench.core.importance.lrp.propagation import AffineOp
from workbench.core.importance.lrp.rules import LRP0, Composite, Epsilon
from workbench.core.models.hooks import private_copy

# --- the plan: nodes of the model's graph --------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    """A reference to the output of node `index` inside another node's arguments."""

    index: int


# How relevance crosses each kind of node (docs/methods/importance.md#propagation-through-other-layers):
#   input     the model input
#   constant  a tensor attribute of the model, or computed from attributes and sizes only (a relative position
#             bias, an attention mask): relevance reaching it is absorbed, like a bias
#   affine    Linear / Conv (BatchNorm folded in) or an unfolded BatchNorm: the composite's rule
#   pass      element-wise activations, Dropout, Identity, folded BatchNorm: R_in = R_out
#   reshape   Flatten, view, reshape, …: R_in = R_out reshaped to the input's shape
#   route     permutations, concatenation, winner-take-all max-pool: R_in = ∂z/∂a applied to R_out
#   split     residual sums, average pooling, means: the proportional LRP-0 split a ⊙ ∂z/∂a · R/s(z); layer
#             normalisation and attention too, computed by `linearised` so that this split is AttnLRP's rule
#   maxsplit  equal-split max-pool
#   gate      a product (element-wise, matrix, einsum) g·x of a signal x and a gate g — a sigmoid's or hard sigmoid's
#             output (squeeze-and-excitation), a softmax's inside attention under the "cp" variant, or a constant:
#             the gate is held constant, so x takes all relevance. Under "attnlrp", a product of two signals (q·kᵀ,
#             A·v) becomes a split with share 1/2 (the uniform rule) and a softmax inside the model a split (the
#             softmax rule)
#   meta      size(), shape lookups and arithmetic on them: no tensors, no relevance
GRAPH_KINDS = ("affine", "route", "split")


@dataclass
class Node:
    name: str
    kind: str
    call: Callable | None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    what: str = ""              # the layer type, for messages
    op: AffineOp | None = None
    module: nn.Module | None = None
    value: Any = None           # for constants; a gate's signal operand
    scope: str = ""             # the path of the module the node runs in (its own, for a module)
    share: float = 1.0          # a split's factor: 1/2 for each operand of a product under the uniform rule

    def inputs(self) -> list[int]:
        found: list[int] = []
        map_aggregate((self.args, self.kwargs),
                      lambda v: found.append(v.index) if isinstance(v, Ref) and v.index not in found else None)
        return found


_PASS_MODULES = (nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Softplus, nn.ReLU6,
                 nn.Hardtanh, nn.Mish, nn.SELU, nn.CELU, nn.PReLU, nn.Hardswish, nn.Hardsigmoid, nn.Softsign,
                 nn.Tanhshrink, nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.AlphaDropout)
_RESHAPE_MODULES = (nn.Flatten, nn.Unflatten)
_MAXPOOL_MODULES = (nn.MaxPool1d, nn.MaxPool2d)
_ADAPTIVE_MAXPOOL_MODULES = (nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d)
_AVGPOOL_MODULES = (nn.AvgPool1d, nn.AvgPool2d, nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d)
_AFFINE_MODULES = (nn.Linear, nn.Conv1d, nn.Conv2d)
_BATCHNORM_MODULES = (nn.BatchNorm1d, nn.BatchNorm2d)
_SOFTMAX_MODULES = (nn.Softmax, nn.LogSoftmax)
_ATTENTION = "MultiheadAttention"  # what an attention node is: its output is read through `[0]`

_PASS_FUNCTIONS = {torch.relu, F.relu, torch.sigmoid, F.sigmoid, torch.tanh, F.tanh, F.gelu, F.silu, F.elu,
                   F.leaky_relu, F.relu6, F.hardtanh, F.softplus, F.mish, F.selu, F.celu, F.hardswish,
                   F.hardsigmoid, F.dropout, F.dropout1d, F.dropout2d, F.alpha_dropout}
_OUT_OF_PLACE = {torch.relu_: torch.relu, F.relu_: F.relu, operator.iadd: operator.add}
_RESHAPE_FUNCTIONS = {torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze}
_ROUTE_FUNCTIONS = {torch.cat, torch.concat, torch.stack, torch.permute, torch.transpose, torch.swapaxes, torch.swapdims,
                    torch.movedim, torch.roll, F.max_pool1d, F.max_pool2d,
                    F.adaptive_max_pool1d, F.adaptive_max_pool2d}
_SPLIT_FUNCTIONS = {operator.add, torch.add, F.avg_pool1d, F.avg_pool2d, F.adaptive_avg_pool1d,
                    F.adaptive_avg_pool2d, torch.mean, torch.sum, torch.masked_fill}  # a masked entry keeps its share
_META_FUNCTIONS = {getattr, operator.getitem, len}
_GATE_FUNCTIONS = {operator.mul, torch.mul, operator.matmul, torch.matmul, torch.bmm, torch.einsum}
#: What a gate comes out of: an operand made by one of these (through views) scales the other operand.
_GATES = {"Sigmoid", "Hardsigmoid", "sigmoid", "hardsigmoid", "Tensor.sigmoid"}
_PASS_MODULE_NAMES = {"StochasticDepth"}  # torchvision's: the identity in evaluation
_SOFTMAX_FUNCTIONS = {torch.softmax, F.softmax, torch.log_softmax, F.log_softmax}
_MAXPOOL_FUNCTIONS = {F.max_pool1d, F.max_pool2d, F.adaptive_max_pool1d, F.adaptive_max_pool2d}

_PASS_METHODS = {"relu": "relu", "relu_": "relu", "sigmoid": "sigmoid", "sigmoid_": "sigmoid", "tanh": "tanh",
                 "tanh_": "tanh", "clone": "clone"}
_RESHAPE_METHODS = {"view", "reshape", "flatten", "squeeze", "unsqueeze", "contiguous", "view_as", "reshape_as"}
_ROUTE_METHODS = {"permute", "transpose", "swapaxes", "swapdims", "movedim", "expand", "expand_as", "repeat", "roll"}
_SPLIT_METHODS = {"add": "add", "add_": "add", "mean": "mean", "sum": "sum", "masked_fill": "masked_fill",
                  "masked_fill_": "masked_fill"}
_META_METHODS = {"size", "dim"}


def _call_method(name: str, self_, *args, **kwargs):
    return getattr(self_, name)(*args, **kwargs)


def unsupported(name: str, what: str) -> WorkbenchError:
    return WorkbenchError(
        f"LRP cannot propagate relevance through layer {name!r} ({what}): no rule covers this layer type.",
        "Supported: Linear, Conv1d/2d, element-wise activations, Flatten/reshape, Dropout and stochastic depth, "
        "MaxPool, AvgPool/AdaptiveAvgPool, BatchNorm, LayerNorm, GroupNorm, attention, residual additions, "
        "concatenation, indexing and chunks, and gates (a sigmoid's output times a signal, as in "
        "squeeze-and-excitation). Replace or remove the layer, or explain a model without it.")


def _module_node(name: str, module: nn.Module, args: tuple, kwargs: dict, composite: Composite) -> Node:
    what = type(module).__name__
    kind = type(module)
    if kind in _AFFINE_MODULES:
        return _affine_node(name, module, args, composite)
    if kind in _BATCHNORM_MODULES:  # folded into the layer before, or made an affine map, by finish_plan
        return Node(name, "batchnorm", None, args, kwargs, what, module=module)
    if getattr(module, "inplace", False):  # an in-place activation would overwrite an output the relevance pass needs
        module = copy.copy(module)
        module.inplace = False
    if kind in _PASS_MODULES or what in _PASS_MODULE_NAMES:
        return Node(name, "pass", module, args, kwargs, what, module=module)
    if kind in _RESHAPE_MODULES:
        return Node(name, "reshape", module, args, kwargs, what, module=module)
    if kind in _MAXPOOL_MODULES or kind in _ADAPTIVE_MAXPOOL_MODULES:
        if getattr(module, "return_indices", False):
            raise WorkbenchError(f"LRP cannot follow max-pool layer {name!r}: it returns indices.",
                                 "Set return_indices=False in the explained model.")
        if composite.maxpool == "equal-split":
            if kind in _ADAPTIVE_MAXPOOL_MODULES:
                raise WorkbenchError(f"The equal-split max-pool variant does not cover {what} layer {name!r}.",
                                     "Use the winner-take-all variant for this model.")
            return Node(name, "maxsplit", module, args, kwargs, what, module=module)
        return Node(name, "route", module, args, kwargs, what, module=module)
    if kind in _AVGPOOL_MODULES:
        return Node(name, "split", module, args, kwargs, what, module=module)
    if kind in _SOFTMAX_MODULES:
        return Node(name, "softmax", module, args, kwargs, what, module=module)
    if kind is nn.LayerNorm:
        call = partial(linearised.layer_norm, normalized_shape=module.normalized_shape, eps=module.eps,
                       weight=_snapshot(module.weight), bias=_snapshot(module.bias))
        return Node(name, "split", call, args, kwargs, what, module=module)
    if kind is nn.GroupNorm:
        call = partial(linearised.group_norm, num_groups=module.num_groups, eps=module.eps,
                       weight=_snapshot(module.weight), bias=_snapshot(module.bias))
        return Node(name, "split", call, args, kwargs, what, module=module)
    if kind is nn.MultiheadAttention:
        linearised.refuse_attention(name, module)
        call = partial(_first, partial(linearised.multi_head_attention, copy.deepcopy(module), composite.attention))
        return Node(name, "split", call, args, kwargs, _ATTENTION, module=module)
    raise unsupported(name, what)


def _snapshot(parameter: torch.Tensor | None) -> torch.Tensor | None:
    return parameter.detach().clone() if parameter is not None else None


def _first(call, *args, **kwargs):
    """The first of what `call` returns: an attention layer's output without its (unasked) weights."""
    return call(*args, **kwargs)[0]


def _affine_node(name: str, module: nn.Module, args: tuple, composite: Composite) -> Node:
    what = type(module).__name__
    weight = module.weight.detach().clone()
    bias = module.bias.detach().clone() if module.bias is not None else None
    if isinstance(module, nn.Linear):
        return Node(name, "affine", None, args, {}, what, op=AffineOp(F.linear, weight, bias, -1, composite.dense),
                     module=module)
    if module.padding_mode != "zeros":
        raise WorkbenchError(f"LRP cannot follow {what} layer {name!r} with padding_mode={module.padding_mode!r}.",
                             "Only zero padding is supported; use padding_mode='zeros'.")
    conv = F.conv1d if isinstance(module, nn.Conv1d) else F.conv2d
    call = partial(_conv_call, conv, module.stride, module.padding, module.dilation, module.groups)
    return Node(name, "affine", None, args, {}, what, op=AffineOp(call, weight, bias, 1, composite.conv),
                 module=module)


def _conv_call(conv, stride, padding, dilation, groups, x, weight, bias):
    return conv(x, weight, bias, stride, padding, dilation, groups)


def _batchnorm_scale(name: str, bn: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """`k = γ/√(σ²+eps)` and `β − kμ` of a BatchNorm in eval mode
    (docs/methods/importance.md#propagation-through-other-layers)."""
    if bn.running_mean is None or bn.running_var is None:
        raise WorkbenchError(f"BatchNorm layer {name!r} keeps no running statistics, so it is not a fixed affine map.",
                             "LRP needs BatchNorm with track_running_stats=True (the default) in eval mode.")
    var, mean = bn.running_var.detach(), bn.running_mean.detach()
    gamma = bn.weight.detach() if bn.weight is not None else torch.ones_like(var)
    beta = bn.bias.detach() if bn.bias is not None else torch.zeros_like(mean)
    k = gamma / torch.sqrt(var + bn.eps)
    return k, beta - k * mean


def _batchnorm_op(name: str, bn: nn.Module, composite: Composite) -> AffineOp:
    """A BatchNorm not after a Conv/Linear: the map `k·x + (β − kμ)` under LRP-0/ε, with a warning
    (docs/methods/importance.md#propagation-through-other-layers)."""
    warnings.warn(f"BatchNorm layer {name!r} does not follow a Conv/Linear layer, so it cannot be folded; "
                  "LRP treats it as the element-wise affine map k·x + (β − kμ) with the LRP-0/ε rule.",
                  stacklevel=3)
    k, shift = _batchnorm_scale(name, bn)
    rule = composite.dense if isinstance(composite.dense, Epsilon) else LRP0(composite.dense.bias_in_denominator)
    return AffineOp(_diagonal_call, k.clone(), shift.clone(), 1, rule)


def _diagonal_call(x, weight, bias):
    shape = [1] * x.dim()
    shape[1] = -1
    out = x * weight.view(shape)
    return out + bias.view(shape) if bias is not None else out


def _fold_batchnorm(node: Node, name: str, bn: nn.Module) -> None:
    """Fold a BatchNorm into the Conv/Linear before it: `W' = k·W`, `b' = k·(b − μ) + β`
    (docs/methods/importance.md#propagation-through-other-layers)."""
    k, shift = _batchnorm_scale(name, bn)
    op = node.op
    weight = op.weight * k.view(-1, *([1] * (op.weight.dim() - 1)))
    bias = shift + (k * op.bias if op.bias is not None else 0)
    call = op.call
    if op.channel_dim == -1:  # a BatchNorm1d normalises dim 1, which is the Linear's output only for (N, F)
        call = partial(_linear_2d_only, node.name)
    node.op = AffineOp(call, weight, bias, op.channel_dim, op.rule)
    node.what += f"+{type(bn).__name__}"


def _linear_2d_only(name, x, weight, bias):
    if x.dim() != 2:
        raise WorkbenchError(f"Layer {name!r} is a Linear layer folded with a BatchNorm1d, which LRP supports "
                             f"only on (N, features) inputs; it got {x.dim()} dimensions.",
                             "Explain a model whose Linear+BatchNorm1d pairs see flat inputs.")
    return F.linear(x, weight, bias)


def _function_node(name: str, fn, args: tuple, kwargs: dict, composite: Composite) -> Node:
    what = getattr(fn, "__name__", repr(fn))
    fn = _OUT_OF_PLACE.get(fn, fn)
    if "inplace" in kwargs:
        kwargs = {**kwargs, "inplace": False}
    if fn in _MAXPOOL_FUNCTIONS and composite.maxpool == "equal-split":
        raise WorkbenchError(f"The equal-split max-pool variant does not cover the functional max-pool {name!r}.",
                             "Use an nn.MaxPool module in the model, or the winner-take-all variant.")
    torchvision_op = what if getattr(fn, "__module__", "").startswith("torchvision") else None
    if fn in _PASS_FUNCTIONS or torchvision_op == "stochastic_depth":  # as dropout: the identity in evaluation
        return Node(name, "pass", fn, args, kwargs, what)
    if torchvision_op == "shifted_window_attention":  # Swin's
        return Node(name, "split", partial(linearised.shifted_window_attention, composite.attention), args, kwargs,
                    what)
    if torchvision_op in ("_patch_merging_pad", "_patch_merging_pad_v2"):  # Swin's: padding and strided slices
        return Node(name, "route", fn, args, kwargs, what)
    if fn is F.pad and kwargs.get("mode", args[2] if len(args) > 2 else "constant") == "constant":
        return Node(name, "route", fn, args, kwargs, what)
    if fn in _RESHAPE_FUNCTIONS:
        return Node(name, "reshape", fn, args, kwargs, what)
    if fn in _ROUTE_FUNCTIONS:
        return Node(name, "route", fn, args, kwargs, what)
    if fn in _SPLIT_FUNCTIONS:
        if fn is torch.add and kwargs.get("alpha", 1) != 1:
            raise unsupported(name, "torch.add with alpha ≠ 1")
        return Node(name, "split", fn, args, kwargs, what)
    if fn in _META_FUNCTIONS:
        return Node(name, "meta", fn, args, kwargs, what)
    if fn in _GATE_FUNCTIONS:
        return Node(name, "gate", fn, args, kwargs, what)
    if fn in _SOFTMAX_FUNCTIONS:
        return Node(name, "softmax", fn, args, kwargs, what)
    if fn is F.layer_norm:
        return Node(name, "split", linearised.layer_norm, args, kwargs, what)
    if fn is F.group_norm:
        return Node(name, "split", linearised.group_norm, args, kwargs, what)
    if fn is F.scaled_dot_product_attention:
        return Node(name, "split", partial(linearised.scaled_dot_product_attention, composite.attention), args, kwargs,
                    what)
    raise unsupported(name, f"function {what}")


def _method_node(name: str, method: str, args: tuple, kwargs: dict) -> Node:
    what = f"Tensor.{method}"
    if method in _PASS_METHODS:
        return Node(name, "pass", partial(_call_method, _PASS_METHODS[method]), args, kwargs, what)
    if method in _RESHAPE_METHODS:
        return Node(name, "reshape", partial(_call_method, method), args, kwargs, what)
    if method in _ROUTE_METHODS:
        return Node(name, "route", partial(_call_method, method), args, kwargs, what)
    if method in _SPLIT_METHODS:
        return Node(name, "split", partial(_call_method, _SPLIT_METHODS[method]), args, kwargs, what)
    if method in _META_METHODS:
        return Node(name, "meta", partial(_call_method, method), args, kwargs, what)
    if method in ("softmax", "log_softmax"):
        return Node(name, "softmax", partial(_call_method, method), args, kwargs, what)
    if method in ("mul", "mul_", "matmul", "bmm"):
        return Node(name, "gate", partial(_call_method, method.rstrip("_")), args, kwargs, what)
    raise unsupported(name, what)


def is_plain_sequential(model: nn.Module) -> bool:
    return type(model) is nn.Sequential and all(
        not list(child.children()) or is_plain_sequential(child) for child in model.children())


def _sequential_leaves(model: nn.Module, prefix: str = "") -> list[tuple[str, nn.Module]]:
    leaves = []
    for name, child in model.named_children():
        full = f"{prefix}{name}"
        leaves.extend(_sequential_leaves(child, full + ".") if list(child.children()) else [(full, child)])
    return leaves


def sequential_plan(model: nn.Module, composite: Composite) -> tuple[list[Node], int]:
    """An `nn.Sequential` (possibly nested): its leaf layers in order, each fed by the one before."""
    nodes = [Node("input", "input", None, (), {}, "input")]
    for name, module in _sequential_leaves(model):
        nodes.append(_module_node(name, module, (Ref(len(nodes) - 1),), {}, composite))
        nodes[-1].scope = name
    return nodes, len(nodes) - 1


#: torch.fx patches module-level functions of torch for the whole process while it traces: two traces at once
#: (two views' jobs on two threads) undo each other's patches ("CURRENT_PATCHER is None") or see each other's
#: proxies, so one traces at a time.
_TRACING = threading.Lock()


class _ThisThreadTracer(torch.fx.Tracer):
    """A tracer that records only the calls of the thread that traces. While it traces, torch.fx has replaced
    `nn.Module.__call__` for the whole process: another thread's forward pass (a training job beside the
    explanation) would otherwise be sent to this tracer, which refuses a module that is not the traced
    model's. Such a call runs as usual instead."""

    def __init__(self):
        super().__init__()
        self.thread = threading.get_ident()

    def call_module(self, m, forward, args, kwargs):
        if threading.get_ident() != self.thread:
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)


def _traced(model: nn.Module) -> torch.fx.GraphModule:
    tracer = _ThisThreadTracer()
    graph = tracer.trace(model)
    return torch.fx.GraphModule(tracer.root, graph, type(model).__name__)


def fx_plan(model: nn.Module, composite: Composite) -> tuple[list[Node], int]:
    """Any other model through `torch.fx` symbolic tracing (residual networks;
    docs/methods/importance.md#layer-wise-relevance-propagation)."""
    try:
        with _TRACING:  # a copy without hooks: a job's hook on a block would run on the tracer's proxies
            traced = _traced(private_copy(model))
            graph = traced.graph
    except Exception as exc:
        raise WorkbenchError(
            f"LRP cannot follow this model: it is not an nn.Sequential and torch.fx cannot trace it "
            f"({type(exc).__name__}: {exc}).",
            "Express the model as an nn.Sequential, or remove data-dependent control flow from its forward().",
            details=repr(exc)) from exc
    nodes: list[Node] = []
    index: dict[Any, int] = {}
    output = None

    def ref(arg):
        return Ref(index[arg]) if isinstance(arg, torch.fx.Node) else arg

    for fx_node in graph.nodes:
        args, kwargs = map_aggregate(fx_node.args, ref), map_aggregate(fx_node.kwargs, ref)
        if fx_node.op == "placeholder":
            if any(n.kind == "input" for n in nodes):
                raise WorkbenchError("LRP explains models with one input; this model takes several.",
                                     "Wrap the model so that it takes a single image tensor.")
            node = Node("input", "input", None, (), {}, "input")
        elif fx_node.op == "get_attr":
            value = _attribute(traced, fx_node.target)  # the copy's: tracing adds tensors it met (_tensor_constant0)
            node = Node(fx_node.name, "constant", None, (), {}, "attribute",
                         value=value.detach() if isinstance(value, torch.Tensor) else value)
        elif fx_node.op == "call_module" and _on_constants_only(nodes, fx_node, args, kwargs):
            node = Node(fx_node.target, "constant", private_copy(model.get_submodule(fx_node.target)), args, kwargs,
                        "computed from constants")  # Swin v2's continuous position bias
        elif fx_node.op == "call_module":
            node = _module_node(fx_node.target, model.get_submodule(fx_node.target), args, kwargs, composite)
        elif _is_pieces(fx_node):  # chunk/split/unbind: each piece taken from it becomes a route of its own
            node = Node(fx_node.name, "meta", _pieces_call(fx_node), args, kwargs, _PIECES)
        elif (fx_node.op == "call_function" and fx_node.target is operator.getitem and isinstance(args[0], Ref)
              and nodes[args[0].index].what == _PIECES):
            pieces = nodes[args[0].index]
            node = Node(fx_node.name, "route", partial(_piece, pieces.call, args[1]), pieces.args, pieces.kwargs,
                        f"piece {args[1]} of {pieces.name}")
        elif fx_node.op == "call_function" and fx_node.target is operator.getitem and isinstance(args[0], Ref) \
                and nodes[args[0].index].what == _ATTENTION:
            node = _attention_output(_operation_name(fx_node), nodes[args[0].index], args)
        elif fx_node.op in ("call_function", "call_method") and _on_constants_only(nodes, fx_node, args, kwargs):
            call = fx_node.target if fx_node.op == "call_function" else partial(_call_method, fx_node.target)
            node = Node(_operation_name(fx_node), "constant", call, args, kwargs, "computed from constants")
        elif fx_node.op == "call_function" and fx_node.target is operator.getitem and isinstance(args[0], Ref) \
                and nodes[args[0].index].kind != "meta":  # x[:, 0], a class token: relevance goes where it was read
            node = Node(_operation_name(fx_node), "route", operator.getitem, args, kwargs, "indexing")
        elif fx_node.op in ("call_function", "call_method") and _on_sizes_only(nodes, args, kwargs):
            call = fx_node.target if fx_node.op == "call_function" else partial(_call_method, fx_node.target)
            node = Node(fx_node.name, "meta", call, args, kwargs, "arithmetic on sizes")  # a channel shuffle's //
        elif fx_node.op == "call_function":
            node = _function_node(_operation_name(fx_node), fx_node.target, args, kwargs, composite)
        elif fx_node.op == "call_method":
            node = _method_node(_operation_name(fx_node), fx_node.target, args, kwargs)
        elif fx_node.op == "output":
            if not isinstance(args[0], Ref):
                raise WorkbenchError("LRP explains models that return one tensor of logits; this one returns "
                                     f"{type(fx_node.args[0]).__name__}.",
                                     "Wrap the model so that forward() returns only the logits.")
            output = args[0].index
            continue
        else:
            raise unsupported(fx_node.name, fx_node.op)
        node.scope = fx_node.target if fx_node.op == "call_module" else _scope(fx_node)
        index[fx_node] = len(nodes)
        nodes.append(node)
    return nodes, output


_PIECES = "pieces"  # what a chunk/split/unbind node is: a tuple of tensors, read only through its pieces
_PIECE_FUNCTIONS = {torch.chunk, torch.split, torch.unbind, torch.tensor_split}
_PIECE_METHODS = {"chunk", "split", "unbind", "tensor_split"}


def _is_pieces(fx_node) -> bool:
    return (fx_node.op == "call_function" and fx_node.target in _PIECE_FUNCTIONS) or \
        (fx_node.op == "call_method" and fx_node.target in _PIECE_METHODS)


def _pieces_call(fx_node):
    return fx_node.target if fx_node.op == "call_function" else partial(_call_method, fx_node.target)


def _piece(call, k, *args, **kwargs):
    """Piece `k` of `call(*args, **kwargs)`: relevance routes back to where the piece was cut from."""
    return call(*args, **kwargs)[k]


def _attention_output(name: str, attention: Node, args: tuple) -> Node:
    """`attention(…)[0]`: the output the attention node already gives; `[1]`, its weights, which the node does
    not compute (`x, _ = attention(…)`; a model that uses them is refused by `finish_plan`)."""
    if args[1] == 0:
        return Node(name, "pass", _identity, args[:1], {}, "attention output")
    return Node(name, "meta", _nothing, args[:1], {}, _ATTENTION_WEIGHTS, value=attention.name)


_ATTENTION_WEIGHTS = "attention weights"


def _nothing(*args):
    return None


def _identity(x):
    return x


def _scope(fx_node) -> str:
    """The path of the innermost module whose forward() ran the operation ('' for the model's own)."""
    stack = fx_node.meta.get("nn_module_stack") or {}
    return list(stack.values())[-1][0] if stack else ""


def _operation_name(fx_node) -> str:
    """A function's or method's layer name: named after the module it runs in (`layer3.1.add`, the residual
    sum of block layer3.1), so its name says where it is; torch.fx's own name at the model's top level."""
    scope = _scope(fx_node)
    if not scope:
        return fx_node.name
    operation = fx_node.target if isinstance(fx_node.target, str) else getattr(fx_node.target, "__name__", "")
    return f"{scope}.{operation or fx_node.name}"


def _refs(args, kwargs) -> list[Ref]:
    found: list[Ref] = []
    map_aggregate((args, kwargs), lambda a: found.append(a) if isinstance(a, Ref) else None)
    return found


def _on_sizes_only(nodes: list[Node], args, kwargs) -> bool:
    """Whether an operation reads only sizes and numbers (`channels // groups`), no tensor."""
    refs = _refs(args, kwargs)
    return bool(refs) and all(nodes[r.index].kind == "meta" for r in refs)


#: Operations that read only the size, dtype and device of their tensor operand.
_SHAPE_ONLY = {torch.zeros_like, torch.ones_like, torch.full_like, torch.empty_like, "new_zeros", "new_ones",
               "new_full", "new_empty"}


def _on_constants_only(nodes: list[Node], fx_node, args, kwargs) -> bool:
    """Whether an operation's value depends on no input value: it reads the model's tensors and sizes only
    (Swin's relative position bias), or only its operand's size (`x.new_zeros(…)`)."""
    if fx_node.target in _SHAPE_ONLY:
        return True
    kinds = {nodes[r.index].kind for r in _refs(args, kwargs)}
    return "constant" in kinds and kinds <= {"constant", "meta"}


_SOFTMAXES = {"Softmax", "softmax", "Tensor.softmax"}
_ELEMENTWISE_PRODUCTS = {"mul", "Tensor.mul"}


def _is_gate(nodes: list[Node], index: int, composite: Composite) -> bool:
    """Whether node `index` is a gate or a constant, looking through views, dropout and scalings of one input."""
    gates = _GATES | (_SOFTMAXES if composite.attention == "cp" else set())
    node = nodes[index]
    while node.kind in ("reshape", "route", "pass", "gate") and node.what not in gates:
        inputs = [j for j in node.inputs() if nodes[j].kind != "meta"]
        if len(inputs) != 1:
            break
        node = nodes[inputs[0]]
    return node.kind == "constant" or node.what in gates


def _resolve_gate(nodes: list[Node], i: int, composite: Composite) -> None:
    """Which operand of product node `i` is the signal (`node.value`): the one that is not a gate; None for a
    product of two signals."""
    node = nodes[i]
    operands = [r.index for r in _refs(node.args, node.kwargs) if nodes[r.index].kind != "meta"]
    signals = [j for j in operands if not _is_gate(nodes, j, composite)]
    if len(operands) == 1:
        signals = operands  # a tensor times a number: a fixed scaling
    node.value = signals[0] if len(signals) == 1 else None


def _reached(nodes: list[Node], output: int) -> set[int]:
    """The nodes relevance reaches from the output: a gate passes it to its signal only."""
    reached, todo = set(), [output]
    while todo:
        i = todo.pop()
        if i in reached:
            continue
        reached.add(i)
        node = nodes[i]
        todo += [node.value] if node.kind == "gate" and node.value is not None else node.inputs()
    return reached


def _refuse_product(node: Node) -> WorkbenchError:
    what = node.what if node.what.startswith("Tensor.") else f"function {node.what}"
    return unsupported(node.name, f"{what} of two signals: under the 'cp' attention variant a product x·y has a "
                                  "rule only when one factor is a gate — a sigmoid's, hard sigmoid's or softmax's "
                                  "output; the 'attnlrp' variant splits it evenly")


def _attribute(model: nn.Module, target: str):
    obj = model
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def node_users(nodes: list[Node]) -> list[list[int]]:
    users: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for j in node.inputs():
            users[j].append(i)
    return users


def finish_plan(nodes: list[Node], output: int, composite: Composite) -> tuple[list[Node], int]:
    """Strip a trailing softmax, fold BatchNorm into the layer before, settle which operand of each product is the
    signal, and give softmax and products of two signals that relevance reaches their rule — or refuse them."""
    every_user = node_users(nodes)
    users = [[u for u in us if nodes[u].kind != "meta"] for us in every_user]  # size() calls do not count
    while nodes[output].kind == "softmax" and len(nodes[output].inputs()) == 1:
        # relevance starts from the logits, not probabilities (docs/methods/importance.md#starting-relevance)
        output = nodes[output].inputs()[0]
    for i, node in enumerate(nodes[:output + 1]):
        if node.what == _ATTENTION_WEIGHTS and every_user[i]:
            raise WorkbenchError(f"LRP cannot follow {nodes[every_user[i][0]].name!r}: it uses the attention weights of "
                                 f"{node.value!r} as a value.", "Explain a model that uses only the attention output.")
        if node.kind == "batchnorm":
            inputs = node.inputs()
            before = nodes[inputs[0]] if len(inputs) == 1 else None
            if before is not None and before.kind == "affine" and type(before.module) in _AFFINE_MODULES \
                    and len(users[inputs[0]]) == 1 and "+" not in before.what:
                _fold_batchnorm(before, node.name, node.module)
                node.kind = "pass"  # with no call: the folded layer before already applied it
            else:
                node.kind, node.op = "affine", _batchnorm_op(node.name, node.module, composite)
        if node.kind == "gate":
            _resolve_gate(nodes, i, composite)
    for i in sorted(_reached(nodes, output)):  # only where relevance goes does a node need a rule
        node = nodes[i]
        if node.kind == "gate" and node.value is not None and node.what not in _ELEMENTWISE_PRODUCTS:
            node.kind = "split"  # A·v with A held constant: linear in v, the LRP-0 split to v alone
        if node.kind == "gate" and node.value is None:
            if composite.attention != "attnlrp":
                raise _refuse_product(node)
            node.kind, node.share = "split", 0.5  # the uniform rule: each factor takes half
        if node.kind == "softmax":
            if composite.attention != "attnlrp" or node.what not in _SOFTMAXES:
                raise WorkbenchError(
                    f"LRP cannot propagate through softmax layer {node.name!r} inside the model: its output is not "
                    "only the weights of a product (attention).", "A softmax at the very end is skipped (LRP starts "
                    "from logits); inside, one that weights a product is held constant, or, under the 'attnlrp' "
                    "attention variant, follows AttnLRP's softmax rule.")
            node.kind = "split"  # the proportional split of a softmax is AttnLRP's softmax rule
    return nodes, output
