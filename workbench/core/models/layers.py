"""The layer catalogue of a model, read off one dry run with forward hooks.

A neuron is one output unit of a layer; for a layer with a spatial output (N, C, H, W) a neuron is a
channel, as in DeepImportance. For each Conv/Linear layer the catalogue also names the element-wise
activation applied right after it, so activations can be taken before or after that function.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from workbench.core.errors import WorkbenchError
from workbench.core.models.hooks import call_name, own_thread

WEIGHTED_TYPES = ("Conv1d", "Conv2d", "Conv3d", "Linear")
ELEMENTWISE = ("ReLU", "LeakyReLU", "ELU", "GELU", "SiLU", "Sigmoid", "Tanh", "Softplus", "ReLU6", "Hardtanh")


def scripted_model_error() -> WorkbenchError:
    """What a TorchScript model can and cannot do here, said once for every job that cannot use it.

    A scripted module takes no Python forward hooks and hides its graph from torch.fx, so nothing that
    reads a layer's activations or relevance can look inside it, and a copy of it cannot be fine-tuned;
    its outputs and input gradients are all that evaluation, attacks and the FOL and uncertainty
    scores need."""
    return WorkbenchError(
        "This is a TorchScript model: it can be run and differentiated, but not looked inside or trained "
        "here, so importance, coverage, ablation, galleries, the coverage-greedy baseline and retraining "
        "cannot use it. Evaluation, attacks, FOL, the uncertainty scores and selection by them work with it.",
        "For the others, load its weights as a state_dict with their architecture (--model weights.pt "
        "--arch NAME; a torchvision network's weights are recognised without --arch).")


def exported_model_error() -> WorkbenchError:
    """What a torch.export program can and cannot do here. Its graph holds ATen operations (conv2d,
    batch_norm, relu_) in place of the model's modules, so no layer of it has a module's name, takes a hook
    or has an LRP rule; it runs and is differentiated like any model."""
    return WorkbenchError(
        "This is a torch.export program: its graph holds ATen operations, not the model's layers, so "
        "importance, coverage, ablation, galleries and the coverage-greedy baseline cannot look inside it. "
        "Evaluation, attacks, FOL, the uncertainty scores and selection by them work with it.",
        "For the others, load its weights as a state_dict with their architecture (--model weights.pt "
        "--arch NAME; a torchvision network's weights are recognised without --arch).")


def is_scripted(module) -> bool:
    import torch

    return isinstance(module, torch.jit.ScriptModule)


def is_exported(module) -> bool:
    """Whether `module` is a torch.export program's module: a graph of ATen operator overloads."""
    graph = getattr(module, "graph", None)
    return graph is not None and hasattr(graph, "nodes") and any(
        type(node.target).__name__ == "OpOverload" for node in graph.nodes if node.op == "call_function")


def refuse_unreadable(module) -> None:
    """Refuse, saying what works instead, a model whose layers cannot be read: TorchScript, torch.export."""
    if is_scripted(module):
        raise scripted_model_error()
    if is_exported(module):
        raise exported_model_error()


@dataclass
class LayerInfo:
    name: str
    type: str
    output_shape: tuple[int, ...]  # without the batch dimension
    neurons: int
    parameters: int
    activation: str | None = None  # the module after which the block's activation has been applied
    block: bool = False  # a module of modules (`layer3`, `features.6`): its output is that of the last inside it

    def to_dict(self) -> dict:
        d = asdict(self)
        d["output_shape"] = list(self.output_shape)
        return d


def neuron_layout(shape: tuple[int, ...], conv_neuron: str = "channel-mean") -> tuple[int, tuple[int, ...]] | None:
    """Where a layer's neurons lie in a batch of its outputs of `shape` (without the batch dimension): `(axis,
    pooled axes)` when a neuron gathers positions — a conv output's channel (axis 1, pooled over 2 and 3), a token
    sequence's feature (axis 2, pooled over the tokens, 1) — or None when every element is a neuron: dense
    outputs, and `conv_neuron="element"` (docs/methods/importance.md#neurons-and-their-values)."""
    if conv_neuron != "channel-mean":
        return None
    if len(shape) == 3:
        return 1, (2, 3)
    if len(shape) == 2:
        return 2, (1,)
    return None


def neuron_count(shape: tuple[int, ...], conv_neuron: str = "channel-mean") -> int:
    """Channels of (C, H, W) outputs, features of (tokens, D) and (F,) outputs; every element with "element"."""
    layout = neuron_layout(shape, conv_neuron)
    if layout is not None:
        return int(shape[layout[0] - 1])
    n = 1
    for s in shape:
        n *= int(s)
    return n


def pooled_neurons(batch, conv_neuron: str, reduce: str = "mean"):
    """(B, neurons) from a batch of layer outputs (torch or numpy): each neuron's positions averaged (values) or
    summed (relevance) where a neuron gathers several, else the outputs flattened."""
    layout = neuron_layout(tuple(batch.shape[1:]), conv_neuron)
    if layout is None:
        return batch.reshape(len(batch), -1)
    axes = layout[1]
    if hasattr(batch, "dim"):  # torch
        return batch.mean(dim=axes) if reduce == "mean" else batch.sum(dim=axes)
    import numpy as np

    return batch.mean(axis=axes, dtype=np.float64) if reduce == "mean" else batch.sum(axis=axes, dtype=np.float64)


def neuron_broadcast_shape(shape: tuple[int, ...], conv_neuron: str) -> tuple[int, ...]:
    """The shape that per-neuron values (neurons,) take to broadcast against a batch of outputs of `shape`:
    (1, C, 1, 1), (1, 1, D), or (1, *shape) when every element is a neuron."""
    layout = neuron_layout(shape, conv_neuron)
    if layout is None:
        return (1, *shape)
    broadcast = [1] * (len(shape) + 1)
    broadcast[layout[0]] = int(shape[layout[0] - 1])
    return tuple(broadcast)


def layer_catalogue(module, input_shape: tuple[int, int, int]) -> list[LayerInfo]:
    """Every layer in execution order with its output shape and neuron count: each module's output, a block's
    (`layer3`, `features.6`) after the layers inside it; a module the forward pass calls k times is k layers,
    named by its path and then `#2`, `#3`, … (`models/hooks.layer_call`)."""
    import torch

    refuse_unreadable(module)
    leaves = [(n, m) for n, m in module.named_modules() if n]  # blocks too: their output is a layer users pick
    seen: list[tuple[str, object, tuple]] = []
    calls: dict[str, int] = {}
    handles = []

    def record(mod, out, name: str) -> None:
        calls[name] = calls.get(name, 0) + 1  # a module a pass calls twice is two layers: name, name#2
        if isinstance(out, torch.Tensor):
            seen.append((call_name(name, calls[name]), mod, tuple(out.shape[1:])))

    try:
        for name, m in leaves:
            handles.append(m.register_forward_hook(own_thread(
                lambda mod, inp, out, name=name: record(mod, out, name))))
    except RuntimeError as exc:  # a module that takes no Python hooks
        for h in handles:
            h.remove()
        raise WorkbenchError(f"The model's layers cannot be read: {exc}",
                             "Load its weights as a state_dict with their architecture instead.") from exc
    try:
        with torch.no_grad():
            weight = next(module.parameters(), None)  # dry-run on the model's own device and dtype
            kind = {"device": weight.device, "dtype": weight.dtype} if weight is not None else {}
            module(torch.zeros((1, *input_shape), **kind))
    except Exception as exc:
        raise WorkbenchError(f"The model does not accept inputs of shape {tuple(input_shape)}: {exc}",
                             "Check the model's input shape against the dataset's image shape.") from exc
    finally:
        for h in handles:
            h.remove()
    catalogue = []
    for i, (name, mod, shape) in enumerate(seen):
        info = LayerInfo(name, type(mod).__name__, shape, neuron_count(shape),
                         sum(p.numel() for p in mod.parameters(recurse=False)), block=bool(list(mod.children())))
        if info.type not in ELEMENTWISE:
            info.activation = _block_output(seen, i)
        catalogue.append(info)
    return catalogue


def _block_output(seen: list, i: int) -> str | None:
    """The module whose output is layer i's "post" value: the last of the BatchNorm and element-wise
    modules that follow it at the same shape, when one of them is an activation (the block output
    after any BN and activation, docs/methods/importance.md#neurons-and-their-values); None when no
    activation follows."""
    shape, last, activated = seen[i][2], None, False
    for name, mod, out_shape in seen[i + 1:]:
        kind = type(mod).__name__
        if out_shape != shape or not (kind in ELEMENTWISE or kind.startswith("BatchNorm")):
            break
        last, activated = name, activated or kind in ELEMENTWISE
    return last if activated else None


def find_layer(catalogue: list[LayerInfo], name: str) -> LayerInfo:
    for layer in catalogue:
        if layer.name == name:
            return layer
    raise WorkbenchError(f"The model has no layer {name!r}.",
                         f"Valid layers: {', '.join(l.name for l in catalogue)}.")


def default_layer(catalogue: list[LayerInfo]) -> str | None:
    """The layer importance and IDC study when none is named: the last Conv/Linear layer before the
    output layer (LeNet-5 fc2, LeNet-1 conv2); None when the model has no such layer
    (docs/methods/idc.md#subject-layer)."""
    weighted = [layer.name for layer in catalogue if layer.type in WEIGHTED_TYPES]
    return weighted[-2] if len(weighted) >= 2 else None
