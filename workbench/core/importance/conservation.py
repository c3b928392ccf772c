"""Where the relevance went: a conservation check of LRP from the logits down to one layer.

Method: docs/methods/importance.md#conservation-check. Relevance starts as the predicted logit of
each correctly classified input (as importance sums it) and flows down to the layer. With biases in
the denominators (the default) each Conv/Linear on the way keeps a part back (`b_j/s(z_j)·R_j`, plus
the stabiliser's sliver), so the layer's total is less than the logits' total by design. The check
balances the books:

    start (Σ logits)  =  relevance at the layer  +  what the layers above kept back  +  error

The kept-back part is computed from each rule's own algebra (`LRP.explain(..., track_absorbed=True)`),
apart from the gradient pass that moves the relevance, so the error measures the propagation itself
and is near 0 (float rounding) when it is right. The check runs on a seeded sample of the split: the
identity holds input by input, so a few thousand inputs say as much as sixty thousand.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.models.activations import NeuronDefinition
from workbench.core.sampling import seeded_sample


@dataclass
class ConservationReport:
    """The relevance budget of one layer over the correctly classified inputs of a sample.

    `start_total`: Σ of the predicted logits; `layer_total`: Σ of the relevance at the layer's
    output; `absorbed`: per layer above, the relevance it kept back (biases, stabilisers);
    `max_input_error`: the worst relative imbalance of a single input.
    """

    layer: str
    rule: dict
    split: str
    inputs: int
    correct: int
    start_total: float
    layer_total: float
    absorbed: dict[str, float]
    max_input_error: float
    provenance: dict = field(default_factory=dict)

    @property
    def absorbed_total(self) -> float:
        return float(sum(self.absorbed.values()))

    @property
    def error(self) -> float:
        """|start − layer − absorbed| / |start|: 0 up to float rounding when LRP conserves as it should."""
        if self.start_total == 0:
            return 0.0 if self.layer_total == 0 and self.absorbed_total == 0 else math.inf
        return abs(self.start_total - self.layer_total - self.absorbed_total) / abs(self.start_total)

    @property
    def layer_share(self) -> float:
        """The fraction of the starting relevance that reaches the layer."""
        return self.layer_total / self.start_total if self.start_total else math.nan

    def to_dict(self) -> dict:
        return {**asdict(self), "absorbed_total": self.absorbed_total, "error": self.error,
                "layer_share": self.layer_share}


def sample_indices(size: int, max_inputs: int | None, seed: int) -> np.ndarray | None:
    """A sorted, seeded sample of `max_inputs` of `size` positions, or None for all of them.

    The same draw as `importance.compute_importance` makes for the same size, count and seed.
    """
    if max_inputs is None:
        return None
    if int(max_inputs) < 1:
        raise WorkbenchError(f"max_inputs must be at least 1; got {max_inputs}.", "Leave it empty to use every image.")
    if int(max_inputs) >= size:
        return None
    return seeded_sample(size, int(max_inputs), seed)


def conservation_check(ctx: JobContext, model, dataset, layer: str | NeuronDefinition, rule="lrp-0", *,
                       split: str = "train", max_inputs: int | None = 2000, batch_size: int = 500,
                       seed: int = 0) -> ConservationReport:
    """Balance the relevance of `layer` against the logits it started from (see the module docstring).

    `model` is a `LoadedModel`, `rule` a rule name, `Rule` or `lrp.Composite`. Only correctly
    classified inputs count, as in importance. Reports progress per batch and stops on cancellation.
    """
    import torch

    from workbench.core.importance.lrp import LRP, as_composite, per_input_sum

    name = layer.layer if isinstance(layer, NeuronDefinition) else str(layer)
    composite = as_composite(rule)
    data = dataset.split(split)
    if len(data) == 0:
        raise WorkbenchError(f"The {split} split of {dataset.name!r} holds no images.", "Choose a split with images.")
    device = ctx.device
    model.module.to(device)
    explainer = LRP(model.module, composite)
    layers = [n for n in explainer.layer_names if n != "input"]
    if name not in layers:
        raise WorkbenchError(f"The model has no layer {name!r}.", f"Valid layers: {', '.join(layers)}.")
    indices = sample_indices(len(data), max_inputs, seed)
    total = len(data) if indices is None else len(indices)
    start = layer_total = 0.0
    absorbed: dict[str, float] = {}
    worst, correct, done = 0.0, 0, 0
    ctx.progress(0, total, "conservation")
    for _, x, y in data.batches(batch_size, indices):
        ctx.check()
        y = y.to(device)
        result = explainer.explain(x, layers=[name], to_input=False, keep=lambda logits: logits.argmax(1) == y,
                                   track_absorbed=True)
        per_input_start = result.start.to(torch.float64)
        per_input_layer = per_input_sum(result.layers[name])
        kept = torch.zeros_like(per_input_start)
        for node, amount in result.absorbed.items():
            absorbed[node] = absorbed.get(node, 0.0) + float(amount.sum())
            kept += amount
        imbalance = (per_input_start - per_input_layer - kept).abs()
        scale = per_input_start.abs()
        nonzero = scale > 0  # misclassified inputs started from 0 and carry nothing
        if bool(nonzero.any()):
            worst = max(worst, float((imbalance[nonzero] / scale[nonzero]).max()))
        start += float(per_input_start.sum())
        layer_total += float(per_input_layer.sum())
        correct += int((result.logits.argmax(1) == y).sum())
        done += len(y)
        ctx.progress(done, total, "conservation")
    return ConservationReport(
        layer=name, rule=composite.describe(), split=split, inputs=total, correct=correct, start_total=start,
        layer_total=layer_total, absorbed=absorbed, max_input_error=worst,
        provenance={"model": model.name, "dataset": dataset.name, "max_inputs": max_inputs, "seed": int(seed),
                    "start": "predicted logit of each correctly classified input"})
