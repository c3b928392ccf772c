"""Layer-wise Relevance Propagation (LRP), our own, in PyTorch.

Method: docs/methods/importance.md#layer-wise-relevance-propagation. The pieces:

- **Rules** (`LRP0`, `Epsilon`, `ZPlus`, `AlphaBeta`) are small objects that only *describe* how a
  layer linear in its input redistributes relevance: which signs of inputs and weights form the
  numerator terms, which part of the bias joins each denominator, the weight of each share and the
  stabiliser. One function (`propagation.propagate_affine`) carries out any such description
  (docs/methods/importance.md#rules).
- A **composite** (`Composite`) maps layer types to rules: one rule for Conv layers, one for Linear
  layers, and the max-pool variant (winner-take-all or equal-split). Everything else follows the
  fixed per-type propagation (docs/methods/importance.md#propagation-through-other-layers).
- The **explainer** (`LRP`) turns a model into a plan of nodes once — the layers of an
  `nn.Sequential` in order, or the `torch.fx` graph of a residual model — folds BatchNorm into the
  preceding Conv/Linear, swaps in-place activations for out-of-place ones, and refuses any layer it
  has no propagation for, naming it. `LRP.explain` then runs one forward pass and one relevance pass,
  batched, on the model's device, starting from the predicted-class logit or a chosen class
  (docs/methods/importance.md#starting-relevance).

Every linear step uses the same gradient trick (docs/methods/importance.md#layer-wise-relevance-propagation):
`z = layer(a)`, `c = ∂(Σ_j z_j·R_j/s(z_j))/∂a`, `R_in = a ⊙ c`, so a pass costs about one forward and one
input-gradient backward.

The package: `rules.py` (stabiliser, rules, `make_rule`, `Composite`), `propagation.py` (layers
linear in their input, equal-split max-pool), `plan.py` (the model's graph as nodes) and
`explainer.py` (`LRP`, `Relevance`, `relevance`).
"""

from workbench.core.importance.lrp.explainer import LRP, Relevance, relevance
from workbench.core.importance.lrp.propagation import AffineOp, per_input_sum
from workbench.core.importance.lrp.rules import (LRP0, MAXPOOL_VARIANTS, RULE_NAMES, AlphaBeta, Composite, Epsilon, Rule, Share,
                                      Term, ZPlus, as_composite, default_stabiliser, make_rule, stabilise)

__all__ = ["LRP", "Relevance", "relevance", "AffineOp", "per_input_sum", "Rule", "LRP0", "Epsilon", "ZPlus",
           "AlphaBeta", "Term", "Share", "RULE_NAMES", "MAXPOOL_VARIANTS", "make_rule", "Composite", "as_composite",
           "default_stabiliser", "stabilise"]
