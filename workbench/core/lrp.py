"""Layer-wise Relevance Propagation (LRP), our own, in PyTorch.

Spec: shared/spec/importance-and-coverage.md §1. The pieces:

- **Rules** (`LRP0`, `Epsilon`, `ZPlus`, `AlphaBeta`) are small objects that only *describe* how a
  layer linear in its input redistributes relevance: which signs of inputs and weights form the
  numerator terms, which part of the bias joins each denominator, the weight of each share and the
  stabiliser. One function (`_propagate_affine`) carries out any such description (§1.1).
- A **composite** (`Composite`) maps layer types to rules: one rule for Conv layers, one for Linear
  layers, and the max-pool variant (winner-take-all or equal-split). Everything else follows the
  fixed per-type propagation of §1.2.
- The **explainer** (`LRP`) turns a model into a plan of nodes once — the layers of an
  `nn.Sequential` in order, or the `torch.fx` graph of a residual model — folds BatchNorm into the
  preceding Conv/Linear, swaps in-place activations for out-of-place ones, and refuses any layer it
  has no propagation for, naming it. `LRP.explain` then runs one forward pass and one relevance pass,
  batched, on the model's device, starting from the predicted-class logit or a chosen class (§1.3).

Every linear step uses the gradient trick of §1.1: `z = layer(a)`, `c = ∂(Σ_j z_j·R_j/s(z_j))/∂a`,
`R_in = a ⊙ c`, so a pass costs about one forward and one input-gradient backward.
"""

from __future__ import annotations

import abc
import copy
import math
import operator
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.node import map_aggregate

from workbench.core.errors import WorkbenchError

# --- stabiliser --------------------------------------------------------------------------------


def default_stabiliser(dtype: torch.dtype) -> float:
    """The ε that only stabilises divisions (§1.1, LRP-0 row): 1e-12 in float64, 1e-9 otherwise."""
    return 1e-12 if dtype == torch.float64 else 1e-9


def stabilise(z: torch.Tensor, epsilon: float) -> torch.Tensor:
    """`s(z) = z + ε·sgn(z)` with `sgn(0) = +1` (§1.1), so s(z) is never zero.

    Built in place on one new tensor (2ε·[z ≥ 0] − ε + z; exact, as 2ε − ε = ε in floating point):
    on the CPU each fresh large tensor costs page faults, which dominated a `torch.where` version.
    """
    s = (z >= 0).to(z.dtype)
    return s.mul_(2 * epsilon).sub_(epsilon).add_(z)


def _ratio(R: torch.Tensor, z: torch.Tensor, epsilon: float) -> torch.Tensor:
    """`R / s(z)`, written into the stabiliser's own tensor."""
    s = stabilise(z, epsilon)
    return torch.div(R, s, out=s)


# --- rules -------------------------------------------------------------------------------------

_SIGN_PARTS = ("all", "pos", "neg")


def _sign_part(t: torch.Tensor, which: str) -> torch.Tensor:
    if which == "pos":
        return t.clamp(min=0)
    if which == "neg":
        return t.clamp(max=0)
    return t


@dataclass(frozen=True)
class Term:
    """One family of products `a_i·w_ij` in a rule's numerator.

    `inputs` / `weights` keep "all" values or only the "pos" or "neg" ones; `bias` is the part of
    `b_j` ("all", "pos", "neg") that joins the denominator this term belongs to, or None.
    """

    inputs: str = "all"
    weights: str = "all"
    bias: str | None = "all"

    def __post_init__(self):
        if self.inputs not in _SIGN_PARTS or self.weights not in _SIGN_PARTS or \
                self.bias not in (*_SIGN_PARTS, None):
            raise ValueError(f"invalid term {self}")


@dataclass(frozen=True)
class Share:
    """`coefficient · Σ_terms (a_i w_ij)_term / s(Σ_terms z_j,term) · R_j`: one weighted part of the relevance."""

    coefficient: float
    terms: tuple[Term, ...]


class Rule(abc.ABC):
    """How a layer linear in its input (Linear, Conv, an unfolded BatchNorm) redistributes relevance.

    Subclasses set `name` and return their `shares()`; `stabiliser(dtype)` gives the ε of `s(z)`.
    `zero_denominator_gives_zero` makes a share whose denominator is exactly 0 contribute nothing
    (the αβ row of §1.1; for z+ it is the same thing, as all its terms are then zero).
    """

    name = "rule"
    zero_denominator_gives_zero = False

    def __init__(self, bias_in_denominator: bool = True):
        self.bias_in_denominator = bool(bias_in_denominator)

    @abc.abstractmethod
    def shares(self) -> tuple[Share, ...]:
        """The terms this rule sums, with their weights and denominators."""

    def stabiliser(self, dtype: torch.dtype) -> float:
        return default_stabiliser(dtype)

    def _bias(self, part: str) -> str | None:
        return part if self.bias_in_denominator else None

    def describe(self) -> dict:
        """The rule's name and parameters, as recorded with every result (§2.5)."""
        return {"name": self.name, "bias_in_denominator": self.bias_in_denominator}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.describe().items() if k != "name")
        return f"{type(self).__name__}({params})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Rule) and self.describe() == other.describe()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.describe().items())))


class Epsilon(Rule):
    """LRP-ε: `R_i = Σ_j a_i w_ij / s(z_j) · R_j` with a user-set ε (default 0.01, §1.1)."""

    name = "epsilon"

    def __init__(self, epsilon: float = 0.01, bias_in_denominator: bool = True):
        super().__init__(bias_in_denominator)
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise WorkbenchError(f"LRP-ε needs a positive ε; got {epsilon!r}.",
                                 "Use a small positive number such as 0.01.")
        self.epsilon = float(epsilon)

    def shares(self) -> tuple[Share, ...]:
        return (Share(1.0, (Term("all", "all", self._bias("all")),)),)

    def stabiliser(self, dtype: torch.dtype) -> float:
        return self.epsilon

    def describe(self) -> dict:
        return {**super().describe(), "epsilon": self.epsilon}


class LRP0(Epsilon):
    """LRP-0, the IDC default: the ε formula with ε only a stabiliser (1e-9 float32, 1e-12 float64)."""

    name = "lrp-0"

    def __init__(self, bias_in_denominator: bool = True):
        Rule.__init__(self, bias_in_denominator)
        self.epsilon = None

    def stabiliser(self, dtype: torch.dtype) -> float:
        return default_stabiliser(dtype)

    def describe(self) -> dict:
        return Rule.describe(self)


class ZPlus(Rule):
    """z+: `R_i = Σ_j (a_i w_ij)⁺ / s(Z⁺_j) · R_j`, `Z⁺_j = Σ_i (a_i w_ij)⁺ [+ b_j⁺]` (§1.1).

    `(a w)⁺` is the positive part of the product: positive inputs with positive weights and
    negative inputs with negative weights.
    """

    name = "z+"
    zero_denominator_gives_zero = True

    def shares(self) -> tuple[Share, ...]:
        return (Share(1.0, (Term("pos", "pos", self._bias("pos")), Term("neg", "neg", None))),)


class AlphaBeta(Rule):
    """αβ: `Σ_j [α (a_i w_ij)⁺ / s(Z⁺_j) − β (a_i w_ij)⁻ / s(Z⁻_j)] · R_j`, α − β = 1 (§1.1).

    Default α = 2, β = 1 (the release used α = 3, β = 2 for pixel relevance). A share whose
    denominator is exactly 0 contributes 0.
    """

    name = "alpha-beta"
    zero_denominator_gives_zero = True

    def __init__(self, alpha: float = 2.0, beta: float = 1.0, bias_in_denominator: bool = True):
        super().__init__(bias_in_denominator)
        alpha, beta = float(alpha), float(beta)
        if beta < 0 or abs(alpha - beta - 1.0) > 1e-12:
            raise WorkbenchError(f"αβ-LRP needs α − β = 1 and β ≥ 0; got α = {alpha:g}, β = {beta:g}.",
                                 "Common choices: α = 2, β = 1 or α = 1, β = 0 (which is z+).")
        self.alpha, self.beta = alpha, beta

    def shares(self) -> tuple[Share, ...]:
        positive = (Term("pos", "pos", self._bias("pos")), Term("neg", "neg", None))
        negative = (Term("pos", "neg", self._bias("neg")), Term("neg", "pos", None))
        return (Share(self.alpha, positive), Share(-self.beta, negative))

    def describe(self) -> dict:
        return {**super().describe(), "alpha": self.alpha, "beta": self.beta}


RULE_NAMES = {"lrp-0": LRP0, "lrp0": LRP0, "epsilon": Epsilon, "lrp-epsilon": Epsilon, "z+": ZPlus,
              "zplus": ZPlus, "alpha-beta": AlphaBeta, "alphabeta": AlphaBeta}


def make_rule(name: str, **params) -> Rule:
    """A rule by name: 'lrp-0', 'epsilon' (epsilon=…), 'z+', 'alpha-beta' (alpha=…, beta=…);
    every rule takes `bias_in_denominator` (default True)."""
    cls = RULE_NAMES.get(str(name).lower())
    if cls is None:
        raise WorkbenchError(f"Unknown LRP rule {name!r}.", "Use one of: lrp-0, epsilon, z+, alpha-beta.")
    try:
        return cls(**params)
    except TypeError as exc:
        raise WorkbenchError(f"Rule {name!r} does not take these parameters: {', '.join(params)}.",
                             str(exc)) from exc


MAXPOOL_VARIANTS = ("winner", "equal-split")


class Composite:
    """Which rule each layer type gets (§1.2): `conv` for Conv1d/2d, `dense` for Linear.

    `Composite("lrp-0")` uses one rule everywhere; `Composite(dense=Epsilon(0.01), conv=ZPlus())`
    mixes them. `maxpool` is "winner" (winner-take-all, the default, identical to Zennit) or
    "equal-split" (split among all positions equal to the window maximum, as the LRP Toolbox used
    by the DeepImportance release). Pooling by averaging and residual sums always use the LRP-0
    proportional split; element-wise activations, Dropout and reshapes pass relevance through.
    """

    def __init__(self, rule: Rule | str | None = None, *, conv: Rule | str | None = None,
                 dense: Rule | str | None = None, maxpool: str = "winner"):
        default = _as_rule(rule) if rule is not None else LRP0()
        self.conv = _as_rule(conv) if conv is not None else default
        self.dense = _as_rule(dense) if dense is not None else default
        if maxpool not in MAXPOOL_VARIANTS:
            raise WorkbenchError(f"Unknown max-pool variant {maxpool!r}.", "Use 'winner' or 'equal-split'.")
        self.maxpool = maxpool

    @property
    def label(self) -> str:
        """A short name for file names and titles, e.g. 'lrp-0' or 'z+-conv_epsilon-dense'."""
        def one(rule):
            return rule.name + (f"{rule.epsilon:g}" if isinstance(rule, Epsilon) and rule.epsilon else "") + \
                (f"{rule.alpha:g},{rule.beta:g}" if isinstance(rule, AlphaBeta) else "")

        text = one(self.dense) if self.conv == self.dense else f"{one(self.conv)}-conv_{one(self.dense)}-dense"
        return text + ("_equal-split" if self.maxpool == "equal-split" else "")

    def describe(self) -> dict:
        return {"conv": self.conv.describe(), "dense": self.dense.describe(), "maxpool": self.maxpool,
                "pooling": "lrp-0 proportional", "batchnorm": "folded into the preceding Conv/Linear"}

    def __repr__(self) -> str:
        return f"Composite(conv={self.conv!r}, dense={self.dense!r}, maxpool={self.maxpool!r})"


def _as_rule(rule: Rule | str) -> Rule:
    return rule if isinstance(rule, Rule) else make_rule(rule)


def as_composite(rule: Composite | Rule | str | None) -> Composite:
    """A composite from a composite, a rule (used everywhere) or a rule name; None is LRP-0."""
    return rule if isinstance(rule, Composite) else Composite(rule)


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
            self._weights[which] = _sign_part(self.weight, which)
        return self._weights[which]

    def bias_part(self, which: str | None) -> torch.Tensor | None:
        if which is None or self.bias is None:
            return None
        if which not in self._biases:
            self._biases[which] = _sign_part(self.bias, which)
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


def _propagate_affine(op: AffineOp, a_leaf: torch.Tensor, z: torch.Tensor | None, R: torch.Tensor,
                      absorbed: list | None = None) -> torch.Tensor:
    """Relevance at the input of a layer linear in its input, under the op's rule (§1.1).

    Plain LRP-0/ε reuses the forward pass's `z` and its autograd graph; rules with sign-split terms
    run the layer once per term on clamped inputs and weights, then take one input gradient.

    With an `absorbed` list, the relevance this layer keeps back is appended to it, per input (N,):
    `Σ_j R_j − Σ_shares coefficient · Σ_j (d_j − b_j)/s(d_j) · R_j`, with `d_j` the share's
    denominator and `b_j` the bias part in it. This is the rule's own algebra (the numerators of a
    share sum to `d_j − b_j` over the inputs), computed apart from the input gradient, so comparing
    it with the relevance that really arrives below checks the propagation (§1.4).
    """
    rule = op.rule
    eps = rule.stabiliser(R.dtype)
    shares = rule.shares()
    a = a_leaf.detach()
    if op.reuses_forward and z is not None:
        denominator = z.detach()
        if shares[0].terms[0].bias is None and op.bias is not None:
            denominator = denominator - op.broadcast_bias(op.bias, denominator)
        ratio = _ratio(R, denominator, eps)
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
            part = _sign_part(a, term.inputs) if term.inputs != "all" else a.detach()
            part.requires_grad_(True)
            with torch.enable_grad():
                outputs.append(op.call(part, op.weight_part(term.weights), op.bias_part(term.bias)))
            leaves.append(part)
        if not outputs:
            continue
        with torch.enable_grad():
            total = outputs[0] if len(outputs) == 1 else sum(outputs[1:], outputs[0])
        denominator = total.detach()
        ratio = _ratio(R, denominator, eps)
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


def _equal_split_maxpool(module: nn.Module, a: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """Max-pool relevance split equally among all positions equal to their window's maximum (§1.2).

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


# --- the plan: nodes of the model's graph --------------------------------------------------------


@dataclass(frozen=True)
class _Ref:
    """A reference to the output of node `index` inside another node's arguments."""

    index: int


# How relevance crosses each kind of node (§1.2):
#   input     the model input
#   constant  a tensor attribute of the model (relevance reaching it is absorbed, like a bias)
#   affine    Linear / Conv (BatchNorm folded in) or an unfolded BatchNorm: the composite's rule
#   pass      element-wise activations, Dropout, Identity, folded BatchNorm: R_in = R_out
#   reshape   Flatten, view, reshape, …: R_in = R_out reshaped to the input's shape
#   route     permutations, concatenation, winner-take-all max-pool: R_in = ∂z/∂a applied to R_out
#   split     residual sums, average pooling, means: the proportional LRP-0 split a ⊙ ∂z/∂a · R/s(z)
#   maxsplit  equal-split max-pool
#   meta      size(), shape lookups: no tensors, no relevance
_GRAPH_KINDS = ("affine", "route", "split")


@dataclass
class _Node:
    name: str
    kind: str
    call: Callable | None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    what: str = ""              # the layer type, for messages
    op: AffineOp | None = None
    module: nn.Module | None = None
    value: Any = None           # for constants

    def inputs(self) -> list[int]:
        found: list[int] = []
        map_aggregate((self.args, self.kwargs),
                      lambda v: found.append(v.index) if isinstance(v, _Ref) and v.index not in found else None)
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

_PASS_FUNCTIONS = {torch.relu, F.relu, torch.sigmoid, F.sigmoid, torch.tanh, F.tanh, F.gelu, F.silu, F.elu,
                   F.leaky_relu, F.relu6, F.hardtanh, F.softplus, F.mish, F.selu, F.celu, F.hardswish,
                   F.hardsigmoid, F.dropout, F.dropout1d, F.dropout2d, F.alpha_dropout}
_OUT_OF_PLACE = {torch.relu_: torch.relu, F.relu_: F.relu, operator.iadd: operator.add}
_RESHAPE_FUNCTIONS = {torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze}
_ROUTE_FUNCTIONS = {torch.cat, torch.concat, torch.permute, torch.transpose, F.max_pool1d, F.max_pool2d,
                    F.adaptive_max_pool1d, F.adaptive_max_pool2d}
_SPLIT_FUNCTIONS = {operator.add, torch.add, F.avg_pool1d, F.avg_pool2d, F.adaptive_avg_pool1d,
                    F.adaptive_avg_pool2d, torch.mean, torch.sum}
_META_FUNCTIONS = {getattr, operator.getitem, len}
_SOFTMAX_FUNCTIONS = {torch.softmax, F.softmax, torch.log_softmax, F.log_softmax}
_MAXPOOL_FUNCTIONS = {F.max_pool1d, F.max_pool2d, F.adaptive_max_pool1d, F.adaptive_max_pool2d}

_PASS_METHODS = {"relu": "relu", "relu_": "relu", "sigmoid": "sigmoid", "sigmoid_": "sigmoid", "tanh": "tanh",
                 "tanh_": "tanh", "clone": "clone"}
_RESHAPE_METHODS = {"view", "reshape", "flatten", "squeeze", "unsqueeze", "contiguous", "view_as", "reshape_as"}
_ROUTE_METHODS = {"permute", "transpose"}
_SPLIT_METHODS = {"add": "add", "add_": "add", "mean": "mean", "sum": "sum"}
_META_METHODS = {"size", "dim"}


def _call_method(name: str, self_, *args, **kwargs):
    return getattr(self_, name)(*args, **kwargs)


def _unsupported(name: str, what: str) -> WorkbenchError:
    return WorkbenchError(
        f"LRP cannot propagate relevance through layer {name!r} ({what}): no rule covers this layer type.",
        "Supported: Linear, Conv1d/2d, element-wise activations, Flatten/reshape, Dropout, MaxPool, "
        "AvgPool/AdaptiveAvgPool, BatchNorm, residual additions and concatenation. Replace or remove the "
        "layer, or explain a model without it.")


def _module_node(name: str, module: nn.Module, args: tuple, kwargs: dict, composite: Composite) -> _Node:
    what = type(module).__name__
    kind = type(module)
    if kind in _AFFINE_MODULES:
        return _affine_node(name, module, args, composite)
    if kind in _BATCHNORM_MODULES:  # folded into the layer before, or made an affine map, by _finish_plan
        return _Node(name, "batchnorm", None, args, kwargs, what, module=module)
    if getattr(module, "inplace", False):  # §1.5: an in-place activation would overwrite a kept output
        module = copy.copy(module)
        module.inplace = False
    if kind in _PASS_MODULES:
        return _Node(name, "pass", module, args, kwargs, what, module=module)
    if kind in _RESHAPE_MODULES:
        return _Node(name, "reshape", module, args, kwargs, what, module=module)
    if kind in _MAXPOOL_MODULES or kind in _ADAPTIVE_MAXPOOL_MODULES:
        if getattr(module, "return_indices", False):
            raise WorkbenchError(f"LRP cannot follow max-pool layer {name!r}: it returns indices.",
                                 "Set return_indices=False in the explained model.")
        if composite.maxpool == "equal-split":
            if kind in _ADAPTIVE_MAXPOOL_MODULES:
                raise WorkbenchError(f"The equal-split max-pool variant does not cover {what} layer {name!r}.",
                                     "Use the winner-take-all variant for this model.")
            return _Node(name, "maxsplit", module, args, kwargs, what, module=module)
        return _Node(name, "route", module, args, kwargs, what, module=module)
    if kind in _AVGPOOL_MODULES:
        return _Node(name, "split", module, args, kwargs, what, module=module)
    if kind in _SOFTMAX_MODULES:
        return _Node(name, "softmax", module, args, kwargs, what, module=module)
    raise _unsupported(name, what)


def _affine_node(name: str, module: nn.Module, args: tuple, composite: Composite) -> _Node:
    what = type(module).__name__
    weight = module.weight.detach().clone()
    bias = module.bias.detach().clone() if module.bias is not None else None
    if isinstance(module, nn.Linear):
        return _Node(name, "affine", None, args, {}, what, op=AffineOp(F.linear, weight, bias, -1, composite.dense),
                     module=module)
    if module.padding_mode != "zeros":
        raise WorkbenchError(f"LRP cannot follow {what} layer {name!r} with padding_mode={module.padding_mode!r}.",
                             "Only zero padding is supported; use padding_mode='zeros'.")
    conv = F.conv1d if isinstance(module, nn.Conv1d) else F.conv2d
    call = partial(_conv_call, conv, module.stride, module.padding, module.dilation, module.groups)
    return _Node(name, "affine", None, args, {}, what, op=AffineOp(call, weight, bias, 1, composite.conv),
                 module=module)


def _conv_call(conv, stride, padding, dilation, groups, x, weight, bias):
    return conv(x, weight, bias, stride, padding, dilation, groups)


def _batchnorm_scale(name: str, bn: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """`k = γ/√(σ²+eps)` and `β − kμ` of a BatchNorm in eval mode (§1.2)."""
    if bn.running_mean is None or bn.running_var is None:
        raise WorkbenchError(f"BatchNorm layer {name!r} keeps no running statistics, so it is not a fixed affine map.",
                             "LRP needs BatchNorm with track_running_stats=True (the default) in eval mode.")
    var, mean = bn.running_var.detach(), bn.running_mean.detach()
    gamma = bn.weight.detach() if bn.weight is not None else torch.ones_like(var)
    beta = bn.bias.detach() if bn.bias is not None else torch.zeros_like(mean)
    k = gamma / torch.sqrt(var + bn.eps)
    return k, beta - k * mean


def _batchnorm_op(name: str, bn: nn.Module, composite: Composite) -> AffineOp:
    """A BatchNorm not after a Conv/Linear: the map `k·x + (β − kμ)` under LRP-0/ε, with a warning (§1.2)."""
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


def _fold_batchnorm(node: _Node, name: str, bn: nn.Module) -> None:
    """Fold a BatchNorm into the Conv/Linear before it: `W' = k·W`, `b' = k·(b − μ) + β` (§1.2)."""
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


def _function_node(name: str, fn, args: tuple, kwargs: dict, composite: Composite) -> _Node:
    what = getattr(fn, "__name__", repr(fn))
    fn = _OUT_OF_PLACE.get(fn, fn)
    if "inplace" in kwargs:
        kwargs = {**kwargs, "inplace": False}
    if fn in _MAXPOOL_FUNCTIONS and composite.maxpool == "equal-split":
        raise WorkbenchError(f"The equal-split max-pool variant does not cover the functional max-pool {name!r}.",
                             "Use an nn.MaxPool module in the model, or the winner-take-all variant.")
    if fn in _PASS_FUNCTIONS:
        return _Node(name, "pass", fn, args, kwargs, what)
    if fn in _RESHAPE_FUNCTIONS:
        return _Node(name, "reshape", fn, args, kwargs, what)
    if fn in _ROUTE_FUNCTIONS:
        return _Node(name, "route", fn, args, kwargs, what)
    if fn in _SPLIT_FUNCTIONS:
        if fn is torch.add and kwargs.get("alpha", 1) != 1:
            raise _unsupported(name, "torch.add with alpha ≠ 1")
        return _Node(name, "split", fn, args, kwargs, what)
    if fn in _META_FUNCTIONS:
        return _Node(name, "meta", fn, args, kwargs, what)
    if fn in _SOFTMAX_FUNCTIONS:
        return _Node(name, "softmax", fn, args, kwargs, what)
    raise _unsupported(name, f"function {what}")


def _method_node(name: str, method: str, args: tuple, kwargs: dict) -> _Node:
    what = f"Tensor.{method}"
    if method in _PASS_METHODS:
        return _Node(name, "pass", partial(_call_method, _PASS_METHODS[method]), args, kwargs, what)
    if method in _RESHAPE_METHODS:
        return _Node(name, "reshape", partial(_call_method, method), args, kwargs, what)
    if method in _ROUTE_METHODS:
        return _Node(name, "route", partial(_call_method, method), args, kwargs, what)
    if method in _SPLIT_METHODS:
        return _Node(name, "split", partial(_call_method, _SPLIT_METHODS[method]), args, kwargs, what)
    if method in _META_METHODS:
        return _Node(name, "meta", partial(_call_method, method), args, kwargs, what)
    if method in ("softmax", "log_softmax"):
        return _Node(name, "softmax", partial(_call_method, method), args, kwargs, what)
    raise _unsupported(name, what)


def _is_plain_sequential(model: nn.Module) -> bool:
    return type(model) is nn.Sequential and all(
        not list(child.children()) or _is_plain_sequential(child) for child in model.children())


def _sequential_leaves(model: nn.Module, prefix: str = "") -> list[tuple[str, nn.Module]]:
    leaves = []
    for name, child in model.named_children():
        full = f"{prefix}{name}"
        leaves.extend(_sequential_leaves(child, full + ".") if list(child.children()) else [(full, child)])
    return leaves


def _sequential_plan(model: nn.Module, composite: Composite) -> tuple[list[_Node], int]:
    """An `nn.Sequential` (possibly nested): its leaf layers in order, each fed by the one before."""
    nodes = [_Node("input", "input", None, (), {}, "input")]
    for name, module in _sequential_leaves(model):
        nodes.append(_module_node(name, module, (_Ref(len(nodes) - 1),), {}, composite))
    return nodes, len(nodes) - 1


def _fx_plan(model: nn.Module, composite: Composite) -> tuple[list[_Node], int]:
    """Any other model through `torch.fx` symbolic tracing (residual networks, §1.2)."""
    if isinstance(model, torch.jit.ScriptModule):
        raise WorkbenchError("LRP cannot look inside a TorchScript model.",
                             "Load the weights as a state_dict together with their architecture instead.")
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception as exc:
        raise WorkbenchError(
            f"LRP cannot follow this model: it is not an nn.Sequential and torch.fx cannot trace it "
            f"({type(exc).__name__}: {exc}).",
            "Express the model as an nn.Sequential, or remove data-dependent control flow from its forward().",
            details=repr(exc)) from exc
    nodes: list[_Node] = []
    index: dict[Any, int] = {}
    output = None

    def ref(arg):
        return _Ref(index[arg]) if isinstance(arg, torch.fx.Node) else arg

    for fx_node in graph.nodes:
        args, kwargs = map_aggregate(fx_node.args, ref), map_aggregate(fx_node.kwargs, ref)
        if fx_node.op == "placeholder":
            if any(n.kind == "input" for n in nodes):
                raise WorkbenchError("LRP explains models with one input; this model takes several.",
                                     "Wrap the model so that it takes a single image tensor.")
            node = _Node("input", "input", None, (), {}, "input")
        elif fx_node.op == "get_attr":
            value = _attribute(model, fx_node.target)
            node = _Node(fx_node.name, "constant", None, (), {}, "attribute",
                         value=value.detach() if isinstance(value, torch.Tensor) else value)
        elif fx_node.op == "call_module":
            node = _module_node(fx_node.target, model.get_submodule(fx_node.target), args, kwargs, composite)
        elif fx_node.op == "call_function":
            node = _function_node(fx_node.name, fx_node.target, args, kwargs, composite)
        elif fx_node.op == "call_method":
            node = _method_node(fx_node.name, fx_node.target, args, kwargs)
        elif fx_node.op == "output":
            if not isinstance(args[0], _Ref):
                raise WorkbenchError("LRP explains models that return one tensor of logits; this one returns "
                                     f"{type(fx_node.args[0]).__name__}.",
                                     "Wrap the model so that forward() returns only the logits.")
            output = args[0].index
            continue
        else:
            raise _unsupported(fx_node.name, fx_node.op)
        index[fx_node] = len(nodes)
        nodes.append(node)
    return nodes, output


def _attribute(model: nn.Module, target: str):
    obj = model
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _users(nodes: list[_Node]) -> list[list[int]]:
    users: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for j in node.inputs():
            users[j].append(i)
    return users


def _finish_plan(nodes: list[_Node], output: int, composite: Composite) -> tuple[list[_Node], int]:
    """Strip a trailing softmax, fold BatchNorm into the layer before, refuse softmax elsewhere."""
    users = [[u for u in us if nodes[u].kind != "meta"] for us in _users(nodes)]  # size() calls do not count
    while nodes[output].kind == "softmax" and len(nodes[output].inputs()) == 1:
        output = nodes[output].inputs()[0]  # §1: relevance starts from the logits, not probabilities
    for i, node in enumerate(nodes[:output + 1]):
        if node.kind == "softmax":
            raise WorkbenchError(f"LRP cannot propagate through softmax layer {node.name!r} inside the model.",
                                 "Only a softmax at the very end is allowed (it is skipped: LRP starts from logits).")
        if node.kind == "batchnorm":
            inputs = node.inputs()
            before = nodes[inputs[0]] if len(inputs) == 1 else None
            if before is not None and before.kind == "affine" and type(before.module) in _AFFINE_MODULES \
                    and len(users[inputs[0]]) == 1 and "+" not in before.what:
                _fold_batchnorm(before, node.name, node.module)
                node.kind = "pass"  # with no call: the folded layer before already applied it
            else:
                node.kind, node.op = "affine", _batchnorm_op(node.name, node.module, composite)
    return nodes, output


# --- the explainer -------------------------------------------------------------------------------


@dataclass
class Relevance:
    """The outcome of one relevance pass over a batch.

    `logits` (N, K) and `target` (N,) of the forward pass; `start` (N,) the starting relevance
    (the target logit, 0 for rows not kept); `layers` the relevance at the output of each asked-for
    layer, shaped like that output; `input` the relevance at the input (or None if not asked for).
    `absorbed` (only with `track_absorbed`): for each layer the pass crossed that keeps relevance
    back — Conv/Linear biases and stabilisers, pooling and residual sums (stabiliser, constants) —
    the amount it kept, per input, (N,) float64.
    """

    logits: torch.Tensor
    target: torch.Tensor
    start: torch.Tensor
    layers: dict[str, torch.Tensor]
    input: torch.Tensor | None
    absorbed: dict[str, torch.Tensor] = field(default_factory=dict)


class LRP:
    """An LRP explainer for one model and composite.

    Construction analyses the model once: it must be an `nn.Sequential` or `torch.fx`-traceable,
    and every layer must have a propagation rule (otherwise a `WorkbenchError` names the layer).
    BatchNorm is folded and parameters are snapshotted on the model's device in its dtype; build a
    new explainer after changing the weights. The model is put in eval mode (spec conventions).

    Relevance is read at layer *outputs*. A Conv/Linear folded with the BatchNorm after it forms one
    layer, so its relevance is that at the BatchNorm's output (as with Zennit's merged BatchNorm);
    element-wise activations pass relevance through, so "pre" and "post" read the same (§1.5).
    Propagation runs in the model's dtype (the float32 stabiliser is 1e-9); callers that sum
    relevance over many inputs should accumulate in float64, as `importance.py` does.
    """

    def __init__(self, model: nn.Module, composite: Composite | Rule | str | None = None):
        self.composite = as_composite(composite)
        model.eval()
        try:
            if _is_plain_sequential(model):
                nodes, output = _sequential_plan(model, self.composite)
            else:
                nodes, output = _fx_plan(model, self.composite)
            self._nodes, self._output = _finish_plan(nodes, output, self.composite)
        except WorkbenchError as exc:  # the user picks a layer next: say which layers the model has
            raise WorkbenchError(exc.message, f"{exc.hint} The model's layers: {_layer_list(model)}.".strip(),
                                 exc.details) from exc
        self._users = _users(self._nodes)
        self._names = self._name_index()
        parameter = next(iter(model.parameters()), None)
        self.device = parameter.device if parameter is not None else torch.device("cpu")
        self.dtype = parameter.dtype if parameter is not None else torch.get_default_dtype()

    def _name_index(self) -> dict[str, list[int]]:
        names: dict[str, list[int]] = {}
        for i, node in enumerate(self._nodes[:self._output + 1]):
            if node.kind not in ("meta", "constant"):
                names.setdefault(node.name, []).append(i)
        return names

    @property
    def layer_names(self) -> list[str]:
        """Names at which relevance can be read: 'input', then every layer in execution order."""
        return list(self._names)

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
                track_absorbed: bool = False) -> Relevance:
        """Relevance for a batch `x`, from the target logit (default: the predicted class, §1.3).

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
        before masking. `track_absorbed`: fill `Relevance.absorbed` (see there).
        """
        chosen = self._resolve(layers)
        masked = {self._resolve(name)[name]: mask for name, mask in (masks or {}).items()}
        x = x.to(self.device, self.dtype)
        options = {"masks": masked, "track_absorbed": track_absorbed}
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
                 diagnose: bool, masks: dict[int, torch.Tensor], track_absorbed: bool) -> Relevance:
        first_needed = 0 if to_input or not chosen else min(chosen.values())
        values, leaves = self._forward(x, first_needed)
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
        return Relevance(logits, target, start, recorded, input_relevance, absorbed or {})

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
            if node.kind == "constant":
                values[i] = node.value
                continue
            needs_graph = i >= first_needed and node.kind in _GRAPH_KINDS and \
                (node.kind != "affine" or node.op.reuses_forward)
            if needs_graph:
                local = {j: values[j].detach().requires_grad_(True) for j in node.inputs()
                         if isinstance(values[j], torch.Tensor) and values[j].is_floating_point()}
                leaves[i] = local
                lookup = local
            else:
                lookup = {}
            args, kwargs = map_aggregate((node.args, node.kwargs),
                                         lambda v: (lookup.get(v.index, values[v.index]) if isinstance(v, _Ref) else v))
            with torch.set_grad_enabled(needs_graph):
                if node.kind == "affine":
                    out = node.op.forward(args[0])
                elif node.call is None:  # a BatchNorm folded into the layer before
                    out = args[0]
                else:
                    out = node.call(*args, **kwargs)
            if node.kind == "meta" and isinstance(out, torch.Tensor) and \
                    any(isinstance(values[j], torch.Tensor) for j in node.inputs()):
                raise _unsupported(node.name, f"{node.what} on a tensor")
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
        wanted = {i: name for name, i in chosen.items()}
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
            if i in wanted:
                recorded[wanted[i]] = R
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
            if kept is not None:
                if node.kind == "split":  # what the proportional split does not pass on to a layer's output
                    kept.append(per_input_sum(R) - sum(per_input_sum(R_in) for j, R_in in passed_on
                                                       if self._nodes[j].kind != "constant"))
                absorbed[node.name] = absorbed[node.name] + kept[0] if node.name in absorbed else kept[0]
            values[i] = leaves[i] = None  # free what this node kept for the pass
        return recorded, input_relevance

    def _propagate(self, node: _Node, i: int, values, local, R: torch.Tensor,
                   absorbed: list | None = None) -> list[tuple[int, torch.Tensor]]:
        """Relevance for each tensor input of node `i`, given the relevance `R` at its output (§1.2)."""
        inputs = [j for j in node.inputs() if isinstance(values[j], torch.Tensor)]
        if node.kind == "pass":
            return [(inputs[0], R)]
        if node.kind == "reshape":
            return [(inputs[0], R.reshape(values[inputs[0]].shape))]
        if node.kind == "affine":
            a = local[inputs[0]] if local else values[inputs[0]]
            return [(inputs[0], _propagate_affine(node.op, a, values[i] if local else None, R, absorbed))]
        if node.kind == "maxsplit":
            return [(inputs[0], _equal_split_maxpool(node.module, values[inputs[0]], R))]
        z = values[i]
        grad_inputs = [local[j] for j in inputs]
        if node.kind == "route":
            grads = torch.autograd.grad(z, grad_inputs, R, allow_unused=True)
            return [(j, g) for j, g in zip(inputs, grads) if g is not None]
        # "split": the proportional LRP-0 rule of pooling and residual sums
        ratio = _ratio(R, z.detach(), default_stabiliser(R.dtype))
        grads = torch.autograd.grad(z, grad_inputs, ratio, allow_unused=True)
        return [(j, leaf.detach() * g) for j, leaf, g in zip(inputs, grad_inputs, grads) if g is not None]


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
