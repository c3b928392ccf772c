"""LRP rules: the stabiliser, the rule objects (`LRP0`, `Epsilon`, `ZPlus`, `AlphaBeta`), `make_rule`
and the `Composite` that maps layer types to rules (docs/methods/importance.md#rules; the max-pool
variants: #propagation-through-other-layers)."""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass

import torch

from workbench.core.errors import WorkbenchError

# --- stabiliser --------------------------------------------------------------------------------


def default_stabiliser(dtype: torch.dtype) -> float:
    """The ε that only stabilises divisions: 1e-12 in float64, 1e-9 otherwise
    (docs/methods/importance.md#rules, LRP-0 row)."""
    return 1e-12 if dtype == torch.float64 else 1e-9


def stabilise(z: torch.Tensor, epsilon: float) -> torch.Tensor:
    """`s(z) = z + ε·sgn(z)` with `sgn(0) = +1`, so s(z) is never zero.

    Built in place on one new tensor (2ε·[z ≥ 0] − ε + z; exact, as 2ε − ε = ε in floating point):
    on the CPU each fresh large tensor costs page faults, which dominated a `torch.where` version.
    """
    s = (z >= 0).to(z.dtype)
    return s.mul_(2 * epsilon).sub_(epsilon).add_(z)


def stabilised_ratio(R: torch.Tensor, z: torch.Tensor, epsilon: float) -> torch.Tensor:
    """`R / s(z)`, written into the stabiliser's own tensor."""
    s = stabilise(z, epsilon)
    return torch.div(R, s, out=s)


# --- rules -------------------------------------------------------------------------------------

_SIGN_PARTS = ("all", "pos", "neg")


def sign_part(t: torch.Tensor, which: str) -> torch.Tensor:
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
    (the αβ row of the table in docs/methods/importance.md#rules; for z+ it is the same thing, as all
    its terms are then zero).
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
        """The rule's name and parameters, as recorded with every result."""
        return {"name": self.name, "bias_in_denominator": self.bias_in_denominator}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.describe().items() if k != "name")
        return f"{type(self).__name__}({params})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Rule) and self.describe() == other.describe()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.describe().items())))


class Epsilon(Rule):
    """LRP-ε: `R_i = Σ_j a_i w_ij / s(z_j) · R_j` with a user-set ε (default 0.01;
    docs/methods/importance.md#rules)."""

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
    """z+: `R_i = Σ_j (a_i w_ij)⁺ / s(Z⁺_j) · R_j`, `Z⁺_j = Σ_i (a_i w_ij)⁺ [+ b_j⁺]`
    (docs/methods/importance.md#rules).

    `(a w)⁺` is the positive part of the product: positive inputs with positive weights and
    negative inputs with negative weights.
    """

    name = "z+"
    zero_denominator_gives_zero = True

    def shares(self) -> tuple[Share, ...]:
        return (Share(1.0, (Term("pos", "pos", self._bias("pos")), Term("neg", "neg", None))),)


class AlphaBeta(Rule):
    """αβ: `Σ_j [α (a_i w_ij)⁺ / s(Z⁺_j) − β (a_i w_ij)⁻ / s(Z⁻_j)] · R_j`, α − β = 1
    (docs/methods/importance.md#rules; Bach et al., 2015).

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
ATTENTION_VARIANTS = ("cp", "attnlrp")


class Composite:
    """Which rule each layer type gets: `conv` for Conv1d/2d, `dense` for Linear
    (docs/methods/importance.md#rules).

    `Composite("lrp-0")` uses one rule everywhere; `Composite(dense=Epsilon(0.01), conv=ZPlus())`
    mixes them. `maxpool` is "winner" (winner-take-all, the default, identical to Zennit) or
    "equal-split" (split among all positions equal to the window maximum, as the LRP Toolbox used
    by the DeepImportance release). Pooling by averaging and residual sums always use the LRP-0
    proportional split; element-wise activations, Dropout and reshapes pass relevance through.
    Layer normalisation follows AttnLRP (its standard deviation held constant). `attention` is "cp"
    (attention weights held constant: the variant AttnLRP's authors use for vision transformers, the
    default) or "attnlrp" (through the softmax, bilinear products split evenly); see
    docs/methods/importance.md#layer-normalisation-and-attention.
    """

    def __init__(self, rule: Rule | str | None = None, *, conv: Rule | str | None = None,
                 dense: Rule | str | None = None, maxpool: str = "winner", attention: str = "cp"):
        default = _as_rule(rule) if rule is not None else LRP0()
        self.conv = _as_rule(conv) if conv is not None else default
        self.dense = _as_rule(dense) if dense is not None else default
        if maxpool not in MAXPOOL_VARIANTS:
            raise WorkbenchError(f"Unknown max-pool variant {maxpool!r}.", "Use 'winner' or 'equal-split'.")
        if attention not in ATTENTION_VARIANTS:
            raise WorkbenchError(f"Unknown attention variant {attention!r}.", "Use 'cp' or 'attnlrp'.")
        self.maxpool, self.attention = maxpool, attention

    @property
    def label(self) -> str:
        """A short name for file names and titles, e.g. 'lrp-0' or 'z+-conv_epsilon-dense'."""
        def one(rule):
            return rule.name + (f"{rule.epsilon:g}" if isinstance(rule, Epsilon) and rule.epsilon else "") + \
                (f"{rule.alpha:g},{rule.beta:g}" if isinstance(rule, AlphaBeta) else "")

        text = one(self.dense) if self.conv == self.dense else f"{one(self.conv)}-conv_{one(self.dense)}-dense"
        return text + ("_equal-split" if self.maxpool == "equal-split" else "") + \
            ("_attnlrp" if self.attention == "attnlrp" else "")

    def describe(self) -> dict:
        """What is recorded with every result. The attention variant appears when it is not the default "cp", so
        that results stored before attention had variants keep their keys (docs/methods/importance.md)."""
        described = {"conv": self.conv.describe(), "dense": self.dense.describe(), "maxpool": self.maxpool,
                     "pooling": "lrp-0 proportional", "batchnorm": "folded into the preceding Conv/Linear"}
        return described if self.attention == "cp" else {**described, "attention": self.attention}

    def __repr__(self) -> str:
        return f"Composite(conv={self.conv!r}, dense={self.dense!r}, maxpool={self.maxpool!r}, " \
            f"attention={self.attention!r})"


def _as_rule(rule: Rule | str) -> Rule:
    return rule if isinstance(rule, Rule) else make_rule(rule)


def as_composite(rule: Composite | Rule | str | None) -> Composite:
    """A composite from a composite, a rule (used everywhere) or a rule name; None is LRP-0."""
    return rule if isinstance(rule, Composite) else Composite(rule)
