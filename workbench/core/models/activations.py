"""Streaming activation capture with forward hooks, batch by batch.

How a neuron's value is defined is part of every result (`NeuronDefinition`): for Conv/Linear
layers the value is taken before (`pre`) or after (`post`) the element-wise activation that follows
the layer; a conv neuron is a channel, its value the spatial mean (`channel-mean`) or, for
element-wise criteria, every position (`element`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterator

import numpy as np

from workbench.core.data.dataset import STEP_INPUTS
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.models.hooks import hook_layer
from workbench.core.models.layers import find_layer, layer_catalogue, neuron_layout, pooled_neurons, refuse_unreadable


@dataclass(frozen=True)
class NeuronDefinition:
    layer: str
    point: str = "post"          # "pre" or "post" the activation function
    conv_neuron: str = "channel-mean"  # or "element"

    def __post_init__(self):
        if self.point not in ("pre", "post"):
            raise WorkbenchError(f"Activation point {self.point!r} is unknown.", "Use 'pre' or 'post'.")
        if self.conv_neuron not in ("channel-mean", "element"):
            raise WorkbenchError(f"Conv neuron definition {self.conv_neuron!r} is unknown.",
                                 "Use 'channel-mean' or 'element'.")

    def to_dict(self) -> dict:
        return asdict(self)


def neuron_values(out, conv_neuron: str):
    """(B, neurons) values of a layer output: channel means of a conv output, feature means over a token
    sequence, else every element."""
    if neuron_layout(tuple(out.shape[1:]), conv_neuron) is not None:
        return pooled_neurons(out, conv_neuron)
    return out.flatten(1).clone()  # a view would be overwritten by a following in-place activation


def hook_point(catalogue, definition: NeuronDefinition) -> str:
    """The module whose output holds a definition's values: for "post", the element-wise activation
    right after the layer when there is one; otherwise the layer itself."""
    layer = find_layer(catalogue, definition.layer)
    return layer.activation if definition.point == "post" and layer.activation else definition.layer


def forward_values(module, hooked: str, x, conv_neuron: str):
    """(B, neurons) float64 values at the output of submodule `hooked` from a plain forward pass of `x`
    (no gradient), checked to be finite."""
    import torch

    grab = {}

    def capture(mod, inputs, output):
        grab["values"] = neuron_values(output.detach(), conv_neuron)

    handle = hook_layer(module, hooked, capture)
    try:
        with torch.no_grad():
            module(x)
    finally:
        handle.remove()
    values = grab["values"].to(torch.float64)
    if not bool(torch.isfinite(values).all()):
        raise WorkbenchError(f"Activations at {hooked!r} are NaN or infinite.",
                             "Check the model's weights and inputs for extreme values.")
    return values




def stream_activations(ctx: JobContext, model, split, definitions: list[NeuronDefinition],
                       input_shape, batch_size: int = 512, indices=None
                       ) -> Iterator[tuple[int, dict[NeuronDefinition, np.ndarray], np.ndarray]]:
    """Yield (start, {definition: (B, neurons) float32}, predictions) for each batch of `split`."""
    import torch

    try:
        refuse_unreadable(model)
    except WorkbenchError as refused:
        raise WorkbenchError(f"Activations of layer {', '.join(repr(d.layer) for d in definitions)} cannot be "
                             f"captured. {refused.message}", refused.hint) from None
    catalogue = layer_catalogue(model, input_shape)
    captured: dict[NeuronDefinition, torch.Tensor] = {}
    handles = []
    for d in definitions:
        hook_at = hook_point(catalogue, d)
        try:
            handles.append(hook_layer(model, hook_at, lambda mod, inp, out, d=d: captured.__setitem__(
                d, neuron_values(out.detach(), d.conv_neuron))))
        except RuntimeError as exc:  # TorchScript modules take no Python hooks
            for h in handles:
                h.remove()
            raise WorkbenchError(f"Activations of layer {d.layer!r} cannot be captured from this model: {exc}",
                                 "TorchScript models take no hooks; load the weights as a state_dict with "
                                 "their architecture (or as a torch.export .pt2) instead.") from exc
    device = ctx.device
    model.to(device)
    weight = next(model.parameters(), None)
    dtype = weight.dtype if weight is not None else torch.float32  # images come as float32; follow the model
    total = len(split) if indices is None else len(indices)
    try:
        with torch.no_grad():
            for start, x, _ in split.batches(batch_size, indices):
                values: dict[NeuronDefinition, list] = {d: [] for d in definitions}
                predictions = []
                for piece in torch.split(x, STEP_INPUTS):  # a huge batch in pieces: a cancel is seen in each
                    ctx.check()
                    captured.clear()
                    predictions.append(model(piece.to(device, dtype)).argmax(1).cpu())
                    for d in definitions:
                        values[d].append(captured[d].float().cpu())
                yield start, {d: torch.cat(v).numpy() for d, v in values.items()}, torch.cat(predictions).numpy()
                ctx.progress(min(start + batch_size, total), total, "activations")
    finally:
        for h in handles:
            h.remove()


def collect_activations(ctx: JobContext, model, split, definition: NeuronDefinition, input_shape,
                        batch_size: int = 512, indices=None) -> np.ndarray:
    """All activations of one layer for a split, stacked: (N, neurons)."""
    parts = [acts[definition] for _, acts, _ in
             stream_activations(ctx, model, split, [definition], input_shape, batch_size, indices)]
    return np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
