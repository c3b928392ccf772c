"""Does importance mean anything? Ablate the important neurons and compare with random ones.

The DeepImportance paper's Table 2 question, asked of our models: switch off the top-m neurons of a
layer (by LRP importance) and, for contrast, several seeded draws of m random neurons of the same
layer, and measure how much test accuracy drops and how much the next layer's activations move.
If LRP importance means something, the important neurons hurt more.

How a neuron is switched off: a forward hook on the module that holds the neuron's value — the
activation after the layer for `point="post"` (the default), the layer itself for `"pre"`, exactly
where `activations.stream_activations` reads values — replaces its output for the chosen neurons.
A conv neuron is a channel (`conv_neuron="channel-mean"`), so the whole channel is replaced; with
`"element"` each (c, h, w) is a neuron of its own. Modes: `"zero"` writes 0; `"mean"` writes the
neuron's mean value over the evaluated inputs (for a channel: its spatial mean averaged over the
inputs, the same number at every position), which keeps the layer's average input to the next one.

Random neurons are drawn uniformly without replacement from the whole layer (the important ones
included): the baseline is "m neurons picked without knowing their importance". Each draw comes
from one seeded generator, so the same seed gives the same draws.

The downstream layer is the first Conv/Linear after the ablated point (for the last hidden layer
that is the logits layer); its outputs are compared, per input, as
`‖a_ablated − a‖₂ / ‖a‖₂`, and averaged over the inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from workbench.core.data.dataset import step_batch
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.importance.neuron_importance import cache_key, dataset_identity
from workbench.core.models.activations import NeuronDefinition, hook_point, neuron_values
from workbench.core.models.hooks import hook_layer, private_copy
from workbench.core.models.layers import neuron_broadcast_shape, neuron_count
from workbench.core.project.folder import read_stored
from workbench.core.project.store import reading

ARTIFACT_KIND = "ablation"
MODES = ("zero", "mean")
_WEIGHTED = ("Linear", "Conv1d", "Conv2d", "Conv3d", "LazyLinear", "Bilinear")


CLEAR_CHANCE = 0.05  # the chance at or below which the top neurons clearly matter more
CLEAR_DRAWS = 19  # the fewest random draws that can give that chance: 1 / (19 + 1)


@dataclass
class AblationResult:
    """Accuracy and downstream change with the top-m neurons ablated versus m random ones.

    Accuracies are fractions in [0, 1] over `inputs` images of `split`. `random_neurons` holds one
    list per draw, `random_accuracies` and `random_activation_changes` one value per draw.
    """

    layer: str
    m: int
    mode: str
    draws: int
    seed: int
    split: str
    inputs: int
    baseline_accuracy: float
    important_neurons: list[int]
    important_accuracy: float
    random_neurons: list[list[int]]
    random_accuracies: list[float]
    important_activation_change: float
    random_activation_changes: list[float]
    downstream_layer: str
    definition: NeuronDefinition | None = None
    neurons: int = 0                 # how many neurons the layer has
    artifact: str | None = None
    reused: bool = False
    provenance: dict = field(default_factory=dict)

    @property
    def important_drop(self) -> float:
        """Accuracy lost when the important neurons are ablated (positive = worse)."""
        return self.baseline_accuracy - self.important_accuracy

    @property
    def random_drops(self) -> list[float]:
        return [self.baseline_accuracy - a for a in self.random_accuracies]

    @property
    def random_drop_mean(self) -> float:
        return float(np.mean(self.random_drops)) if self.random_drops else math.nan

    @property
    def random_drop_std(self) -> float:
        """Sample standard deviation over the draws (ddof = 1); 0 for a single draw."""
        return float(np.std(self.random_drops, ddof=1)) if len(self.random_drops) > 1 else 0.0

    @property
    def random_activation_change_mean(self) -> float:
        return float(np.mean(self.random_activation_changes)) if self.random_activation_changes else math.nan

    @property
    def random_overlaps(self) -> list[int]:
        """How many of the important neurons each random draw happened to include."""
        important = set(self.important_neurons)
        return [len(important.intersection(draw)) for draw in self.random_neurons]

    @property
    def important_hurts_more(self) -> bool:
        """Whether ablating the important neurons costs more accuracy than the random draws on average."""
        return self.important_drop > self.random_drop_mean

    @property
    def draws_at_least_as_bad(self) -> int:
        """How many random draws cost at least as much accuracy as the important neurons."""
        return int(sum(d >= self.important_drop for d in self.random_drops))

    @property
    def chance(self) -> float:
        """How often a set as costly as the top-m would come up by chance, were the top neurons no
        different from random ones: (1 + draws at least as costly) / (draws + 1), the rank test of a
        Monte-Carlo permutation test (its smallest value, with n draws, is 1 / (n + 1))."""
        return (1 + self.draws_at_least_as_bad) / (len(self.random_drops) + 1)

    @property
    def clearly_important(self) -> bool:
        """Whether the top neurons clearly matter more than random ones: a chance of at most
        `CLEAR_CHANCE`, which needs `CLEAR_DRAWS` draws or more, all of them less costly."""
        return self.chance <= CLEAR_CHANCE + 1e-12

    def to_dict(self) -> dict:
        return {
            "layer": self.layer, "m": self.m, "mode": self.mode, "draws": self.draws, "seed": self.seed,
            "split": self.split, "inputs": self.inputs, "neurons": self.neurons,
            "definition": self.definition.to_dict() if self.definition else None,
            "baseline_accuracy": self.baseline_accuracy,
            "important_neurons": list(self.important_neurons), "important_accuracy": self.important_accuracy,
            "important_drop": self.important_drop,
            "random_neurons": [list(d) for d in self.random_neurons], "random_accuracies": list(self.random_accuracies),
            "random_drops": self.random_drops, "random_drop_mean": self.random_drop_mean,
            "random_drop_std": self.random_drop_std, "random_overlaps": self.random_overlaps,
            "downstream_layer": self.downstream_layer,
            "important_activation_change": self.important_activation_change,
            "random_activation_changes": list(self.random_activation_changes),
            "random_activation_change_mean": self.random_activation_change_mean,
            "important_hurts_more": self.important_hurts_more,
            "draws_at_least_as_bad": self.draws_at_least_as_bad, "chance": self.chance,
            "clearly_important": self.clearly_important,
            "artifact": self.artifact, "reused": self.reused,
        }


# --- the pieces -----------------------------------------------------------------------------------

def layer_neuron_count(catalogue, definition: NeuronDefinition) -> int:
    """Neurons of a definition: channels of a conv output in channel-mean mode, else every element."""
    from workbench.core.models.layers import find_layer

    shape = find_layer(catalogue, hook_point(catalogue, definition)).output_shape
    return neuron_count(shape, definition.conv_neuron) if shape else 0


def check_neurons(neurons: Sequence[int], count: int, layer: str) -> list[int]:
    """Distinct whole numbers in 0…count−1, at least one and at most `count`; else a `WorkbenchError`."""
    try:
        chosen = [int(n) for n in neurons]
        if any(int(n) != n for n in neurons):
            raise ValueError
    except (TypeError, ValueError):
        raise WorkbenchError(f"Neurons must be whole numbers; got {list(neurons)!r}.",
                             f"Give neuron indices of layer {layer!r} between 0 and {count - 1}.") from None
    if not chosen:
        raise WorkbenchError("No neurons to ablate were given.", "Give at least one neuron index (m ≥ 1).")
    if len(chosen) > count:
        raise WorkbenchError(f"m = {len(chosen)} is larger than the {count} neurons of layer {layer!r}.",
                             f"Choose m between 1 and {count}.")
    bad = [n for n in chosen if not 0 <= n < count]
    if bad:
        raise WorkbenchError(f"Layer {layer!r} has neurons 0–{count - 1}; {bad} are out of range.",
                             "Give neuron indices within the layer.")
    if len(set(chosen)) != len(chosen):
        raise WorkbenchError(f"The neurons to ablate repeat: {chosen}.", "Give each neuron once.")
    return chosen


def random_draws(count: int, m: int, draws: int, seed: int) -> list[list[int]]:
    """`draws` sets of m distinct neurons in 0…count−1, uniform without replacement, sorted, seeded."""
    rng = np.random.default_rng(seed)
    return [sorted(int(n) for n in rng.choice(count, size=m, replace=False)) for _ in range(draws)]


def downstream_layer(catalogue, hooked: str) -> str:
    """The first Conv/Linear after module `hooked` in execution order; the last layer if none follows (a
    module's, not a block's: the blocks that end with it have its output)."""
    names = [layer.name for layer in catalogue]
    position = names.index(hooked)
    for layer in catalogue[position + 1:]:
        if layer.type in _WEIGHTED:
            return layer.name
    return [layer for layer in catalogue if not layer.block][-1].name


def _neuron_mask(shape: tuple[int, ...], neurons: list[int], conv_neuron: str):
    """A boolean tensor broadcasting against a batch of outputs of `shape`, True at the chosen neurons."""
    import torch

    mask = torch.zeros(neuron_count(shape, conv_neuron), dtype=torch.bool)
    mask[neurons] = True
    return mask.view(neuron_broadcast_shape(shape, conv_neuron))


def _as_output_shape(values, shape: tuple[int, ...], conv_neuron: str):
    """Per-neuron values (neurons,) shaped to broadcast against a batch of outputs, like `_neuron_mask`."""
    return values.view(neuron_broadcast_shape(shape, conv_neuron))


# --- the job ----------------------------------------------------------------------------------------

def ablation_check(ctx: JobContext, model, dataset, layer: str, important: Sequence[int], *, mode: str = "zero",
                   draws: int = 5, seed: int = 0, split: str = "test", batch_size: int = 1000,
                   definition: NeuronDefinition | None = None, max_inputs: int | None = None,
                   project=None) -> AblationResult:
    """Accuracy and downstream activation change with `important` neurons ablated versus random ones.

    `model` is a `LoadedModel`; `important` the neurons to ablate (m = their number), usually
    `ImportanceResult.top(m)`. `definition` sets the activation point and conv neuron (default: post,
    channel). `max_inputs` evaluates a seeded sample of the split. Each batch runs one clean forward
    pass and one per condition (important, then each draw); in mean mode a first pass collects the
    means. The hooks act on a private copy of the model, never on `model` itself. Progress is
    reported per batch and cancellation checked; with a `project` the result is stored (only once
    complete) and an identical request is read back.
    """
    import torch

    from workbench.core.importance.conservation import sample_indices
    from workbench.core.models.layers import layer_catalogue

    definition = definition or NeuronDefinition(str(layer))
    if definition.layer != layer:
        raise WorkbenchError(f"The neuron definition is for layer {definition.layer!r}, not {layer!r}.",
                             "Pass a definition of the layer being ablated.")
    if mode not in MODES:
        raise WorkbenchError(f"Unknown ablation mode {mode!r}.", "Use 'zero' or 'mean'.")
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws < 1:
        raise WorkbenchError(f"draws must be a whole number of at least 1; got {draws!r}.",
                             "Use several random draws (5 by default) for a fair comparison.")
    data = dataset.split(split)
    if len(data) == 0:
        raise WorkbenchError(f"The {split} split of {dataset.name!r} holds no images.", "Choose a split with images.")
    device = ctx.device
    # The hooks go on a private copy: a view or job using the same model meanwhile sees it unablated.
    module = private_copy(model.module).to(device).eval()
    dtype = next((p.dtype for p in module.parameters()), torch.float32)  # inputs follow the model's precision
    catalogue = layer_catalogue(module, dataset.image_shape)
    hooked = hook_point(catalogue, definition)  # refuses an unknown layer, listing the valid ones
    count = layer_neuron_count(catalogue, definition)
    chosen = check_neurons(important, count, layer)
    m = len(chosen)
    drawn = random_draws(count, m, int(draws), seed)
    downstream = downstream_layer(catalogue, hooked)
    indices = sample_indices(len(data), max_inputs, seed)
    total = len(data) if indices is None else len(indices)

    how = {"model_fingerprint": model.fingerprint(), **dataset_identity(dataset, split, data),
           "layer": layer, "neuron_definition": definition.to_dict(), "important_neurons": chosen, "mode": mode,
           "draws": int(draws), "seed": int(seed), "max_inputs": int(max_inputs) if indices is not None else None,
           "random_from": "all neurons of the layer, uniform without replacement", "downstream_layer": downstream}
    key = cache_key(how)
    stored = None if project is None else read_stored(project, ARTIFACT_KIND, load_ablation, ctx.notice,
                                                      "run again", cache_key=key)
    if stored is not None:
        ctx.progress(total, total, "ablation (reused)")
        return stored

    shape = next(l.output_shape for l in catalogue if l.name == hooked)
    passes = 2 if mode == "mean" else 1
    ctx.progress(0, passes * total, "ablation")
    ablator = _Ablator(module, hooked, downstream)
    try:
        with torch.no_grad():
            if mode == "mean":
                means = _mean_values(ctx, ablator.up_to_hooked, data, indices, batch_size, ablator.hooked,
                                     definition, device, dtype, total)
                ablator.fill = _as_output_shape(means, shape, definition.conv_neuron).to(device)
            conditions = [chosen, *drawn]
            masks = [_neuron_mask(shape, neurons, definition.conv_neuron).to(device) for neurons in conditions]
            correct = np.zeros(len(conditions), dtype=np.int64)
            changes = np.zeros(len(conditions), dtype=np.float64)
            baseline_correct, done = 0, 0
            for _, x, y in data.batches(step_batch(batch_size, len(conditions) + 1), indices):
                ctx.check()
                y = y.to(device)
                ablator.load(x.to(device, dtype))
                logits, clean = ablator.run(None)
                _check_logits(logits, dataset, model.name)
                clean_norm = clean.norm(dim=1).clamp_min(torch.finfo(torch.float64).tiny)
                baseline_correct += int((logits.argmax(1) == y).sum())
                for c, mask in enumerate(masks):
                    ablated, moved = ablator.run(mask)
                    correct[c] += int((ablated.argmax(1) == y).sum())
                    changes[c] += float(((moved - clean).norm(dim=1) / clean_norm).sum())
                done += len(y)
                ctx.progress((passes - 1) * total + done, passes * total, "ablation")
    finally:
        ablator.close()

    accuracies = correct / total
    mean_changes = changes / total
    result = AblationResult(
        layer=layer, m=m, mode=mode, draws=int(draws), seed=int(seed), split=split, inputs=total,
        baseline_accuracy=baseline_correct / total, important_neurons=chosen,
        important_accuracy=float(accuracies[0]), random_neurons=drawn,
        random_accuracies=[float(a) for a in accuracies[1:]],
        important_activation_change=float(mean_changes[0]),
        random_activation_changes=[float(c) for c in mean_changes[1:]],
        downstream_layer=downstream, definition=definition, neurons=count,
        provenance={"model": model.name, **how, "cache_key": key, "hooked_module": hooked})
    if project is not None:
        name = f"ablation-{model.name}-{layer}-{mode}-m{m}-{key[:8]}"
        arrays = {"important_neurons": np.asarray(chosen, np.int64), "random_neurons": np.asarray(drawn, np.int64),
                  "random_accuracies": np.asarray(result.random_accuracies),
                  "random_activation_changes": np.asarray(result.random_activation_changes)}
        project.save_artifact(ARTIFACT_KIND, name, arrays, **result.provenance, inputs=total, neurons=count,
                              baseline_accuracy=result.baseline_accuracy,
                              important_accuracy=result.important_accuracy,
                              important_activation_change=result.important_activation_change)
        result.artifact = name
    return result


class _Ablator:
    """Runs a model with chosen neurons of one module's output replaced (`fill`, 0 by default).

    In an `nn.Sequential` whose hooked module is a direct child, the layers up to it run once per
    batch (`load`) and only the layers after it run again per condition (`run`) — for a late layer
    several times faster. Any other model runs whole each time, the output replaced by a forward
    hook. Either way the downstream module's output is captured by a forward hook.
    """

    def __init__(self, module, hooked: str, downstream: str):
        import torch

        children = list(module.named_children()) if type(module) is torch.nn.Sequential else []
        names = [name for name, _ in children]
        self.split = hooked in names
        self.module, self.fill, self.mask = module, None, None
        self.hooked = hooked
        self.downstream_is_hooked = downstream == hooked
        self.handles = []
        if self.split:
            position = names.index(hooked)
            self.up_to_hooked, self.after_hooked = module[:position + 1], module[position + 1:]
            if not self.downstream_is_hooked:  # a Sequential's slices keep their layers' names
                self.handles.append(hook_layer(self.after_hooked, downstream, self._capture))
        else:
            self.up_to_hooked = module
            self.handles.append(hook_layer(module, hooked, self._replace))
            # after the replacing hook, so that a downstream layer that is the hooked one is seen replaced
            self.handles.append(hook_layer(module, downstream, self._capture))
        self.downstream = None

    def _replaced(self, output):
        import torch

        if self.mask is None:
            return output
        fill = self.fill if self.fill is not None else torch.zeros((), dtype=output.dtype, device=output.device)
        return torch.where(self.mask, fill, output)

    def _replace(self, mod, inputs, output):
        return None if self.mask is None else self._replaced(output)

    def _capture(self, mod, inputs, output):
        import torch

        if self.split and self.downstream_is_hooked:
            return  # its output is taken after the replacement, in `run`
        self.downstream = output.detach().flatten(1).to(torch.float64, copy=True)  # in-place ops may follow

    def load(self, x) -> None:
        """Take a batch; in the split mode, run the layers up to the hooked one now, once."""
        self.x = x
        self.hooked_output = self.up_to_hooked(x) if self.split else None

    def run(self, mask):
        """(logits, downstream activations as (B, features) float64) with `mask`'s neurons replaced (None: none)."""
        import torch

        self.mask = mask
        if not self.split:
            return self.module(self.x), self.downstream
        h = self._replaced(self.hooked_output) if mask is not None else self.hooked_output.clone()  # clone: in-place ops
        if self.downstream_is_hooked:
            self.downstream = h.detach().flatten(1).to(torch.float64, copy=True)
        return self.after_hooked(h), self.downstream

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


def _mean_values(ctx, module, data, indices, batch_size, hooked: str, definition, device, dtype, total):
    """Each neuron's mean value over the evaluated inputs, (neurons,) in the model's dtype; `module`
    needs to run only as far as the hooked layer."""
    import torch

    sums, seen = None, 0
    grab = {}
    handle = hook_layer(module, hooked, lambda mod, inputs, output: grab.__setitem__(
        "values", neuron_values(output, definition.conv_neuron)))
    try:
        for _, x, _ in data.batches(step_batch(batch_size), indices):
            ctx.check()
            module(x.to(device, dtype))
            values = grab["values"].to(torch.float64)
            sums = values.sum(0) if sums is None else sums + values.sum(0)
            seen += len(x)
            ctx.progress(seen, 2 * total, "ablation: mean activations")
    finally:
        handle.remove()
    return (sums / seen).to(dtype)


def _check_logits(logits, dataset, model_name: str) -> None:
    import torch

    if logits.dim() != 2 or logits.shape[1] != dataset.num_classes:
        raise WorkbenchError(f"Model {model_name!r} outputs {tuple(logits.shape[1:])} scores per image, but dataset "
                             f"{dataset.name!r} has {dataset.num_classes} classes.",
                             "Choose a dataset with the model's classes.")
    if not bool(torch.isfinite(logits).all()):
        raise WorkbenchError(f"Model {model_name!r} returned NaN or infinite scores.",
                             "The model's weights are damaged or it expects other input scaling.")


def load_ablation(project, name: str) -> AblationResult:
    """Read an ablation artifact back from a project."""
    artifact = project.load_artifact(name, ARTIFACT_KIND)
    how = artifact.provenance
    with reading(artifact):
        draws = artifact.numbers("random_accuracies", ndim=1)
        artifact.numbers("random_neurons", ndim=2, length=len(draws))
        artifact.numbers("random_activation_changes", ndim=1, length=len(draws))
        artifact.numbers("important_neurons", ndim=1)
        return _ablation_from(artifact, name, how)


def _ablation_from(artifact, name: str, how: dict) -> AblationResult:
    return AblationResult(
        layer=how["layer"], m=len(how["important_neurons"]), mode=how["mode"], draws=int(how["draws"]),
        seed=int(how["seed"]), split=how["split"], inputs=int(how["inputs"]),
        baseline_accuracy=float(how["baseline_accuracy"]),
        important_neurons=[int(n) for n in artifact["important_neurons"]],
        important_accuracy=float(how["important_accuracy"]),
        random_neurons=[[int(n) for n in row] for row in artifact["random_neurons"]],
        random_accuracies=[float(a) for a in artifact["random_accuracies"]],
        important_activation_change=float(how["important_activation_change"]),
        random_activation_changes=[float(c) for c in artifact["random_activation_changes"]],
        downstream_layer=how["downstream_layer"], definition=NeuronDefinition(**how["neuron_definition"]),
        neurons=int(how["neurons"]), artifact=name, reused=True, provenance=how)
