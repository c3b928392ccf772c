"""Neuron importance over a dataset: LRP relevance of a layer's neurons, summed, and the top-m.

Method: docs/methods/importance.md#aggregation-over-the-training-set. A neuron is a dense unit or a
conv channel (`conv_neuron="element"`: every (c, h, w)); a channel's relevance is the sum over its spatial
positions at the layer's output. `R_total[n] = Σ_x R_n(x)` over the correctly classified inputs of
the split (the training split by default), for all classes and, in per-class mode, per true class.
Relevance starts at the predicted logit, which for a correctly classified input is its class.
Sums are signed and kept in float64, batch by batch; nothing grows with the number of images.

`compute_importance` is a job (see `execution/jobs.py`): it reports progress per batch, stops on
cancellation, hands out the running totals, and stores its result as a project artifact keyed by
everything that determines it (model weights, data, layer, neuron definition, rule, sample), so an
identical request is read back instead of recomputed. A cancelled run stores nothing.

While it streams, it also keeps, per neuron, the few inputs that rank highest by relevance and by
activation (`top_inputs.TopInputs`, every input of the split, misclassified ones too), stored with
the result, so a neuron's gallery needs no second pass over the split.
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
from dataclasses import dataclass, field

import numpy as np

from workbench.core.data.dataset import step_batch
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.execution.shard_plan import range_inputs, range_plan
from workbench.core.execution.sharding import input_ranges, run_plan, sharding
from workbench.core.importance.top_inputs import COLUMNS, RANKINGS, TopInputs, array_name
from workbench.core.models.activations import NeuronDefinition, forward_values, hook_point, neuron_values
from workbench.core.models.layers import pooled_neurons
from workbench.core.project.folder import read_stored
from workbench.core.project.store import reading
from workbench.core.sampling import seeded_sample

TOP_INPUTS = 16  # inputs kept per neuron for its gallery (the view shows 9); 0 keeps none

ARTIFACT_KIND = "importance"


def rank_neurons(totals: np.ndarray) -> np.ndarray:
    """Neuron indices by descending relevance; ties go to the lower index."""
    return np.argsort(-np.asarray(totals, dtype=np.float64), kind="stable").astype(np.int64)


def top_m(totals: np.ndarray, m: int, layer: str = "") -> np.ndarray:
    """The m most relevant neurons, most relevant first, ties → lower index.

    m must be between 1 and the number of neurons; otherwise a `WorkbenchError` says how many there are.
    """
    totals = np.asarray(totals)
    n = int(totals.shape[-1])
    where = f" of layer {layer!r}" if layer else ""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise WorkbenchError(f"m must be a whole number of at least 1; got {m!r}.", "Choose m between 1 and the "
                             f"{n} neurons{where}.")
    if m > n:
        raise WorkbenchError(f"m = {m} is larger than the {n} neurons{where}.",
                             f"Choose m between 1 and {n}, or a layer with more neurons.")
    return rank_neurons(totals)[:m]


@dataclass
class ImportanceProgress:
    """What `compute_importance` hands out after each batch: the running totals so far."""

    done: int
    total: int
    totals: np.ndarray        # (neurons,) float64, over the correctly classified inputs seen so far
    counts: np.ndarray        # (classes,) correctly classified inputs seen so far, per class


@dataclass
class ImportanceResult:
    """Dataset-level relevance of one layer's neurons, with how it was made.

    `totals` (neurons,) and `ranking` (neurons,) over all correctly classified inputs; `counts`
    (classes,) how many of those each class has. In per-class mode `per_class` (classes, neurons)
    and `per_class_ranking` (classes, neurons; −1 for a class without correctly classified inputs).
    """

    layer: str
    definition: NeuronDefinition
    rule: dict
    totals: np.ndarray
    ranking: np.ndarray
    counts: np.ndarray
    inputs: int
    class_names: list[str]
    per_class: np.ndarray | None = None
    per_class_ranking: np.ndarray | None = None
    artifact: str | None = None
    reused: bool = False
    provenance: dict = field(default_factory=dict)
    top_inputs: TopInputs | None = None  # each neuron's best inputs of the split; None in older results

    @property
    def neurons(self) -> int:
        return int(self.totals.shape[0])

    @property
    def correct(self) -> int:
        """Correctly classified inputs the totals are summed over."""
        return int(self.counts.sum())

    @property
    def empty_classes(self) -> list[int]:
        """Classes with no correctly classified input (reported as empty, not as an error)."""
        return [int(c) for c in np.flatnonzero(self.counts == 0)]

    def top(self, m: int, cls: int | None = None) -> np.ndarray:
        """The top-m neurons over all classes, or of class `cls` (empty for an empty class)."""
        if cls is None:
            return top_m(self.totals, m, self.layer)
        if self.per_class is None:
            raise WorkbenchError("These importance results were computed for all classes together.",
                                 "Compute them again with per-class mode on to rank neurons per class.")
        if not 0 <= cls < len(self.counts):
            raise WorkbenchError(f"There is no class {cls}; the dataset has {len(self.counts)} classes.",
                                 f"Choose a class in 0–{len(self.counts) - 1}.")
        if self.counts[cls] == 0:
            top_m(self.totals, m, self.layer)  # still refuse an impossible m
            return np.zeros(0, dtype=np.int64)
        return top_m(self.per_class[cls], m, self.layer)


def dataset_identity(dataset, split_name: str, split) -> dict:
    """What identifies a split's data in cache keys: dataset name, split, size and a hash of the labels."""
    labels = np.ascontiguousarray(split.labels)
    return {"dataset": dataset.name, "split": split_name, "images": len(split),
            "labels_sha256": hashlib.sha256(labels.tobytes()).hexdigest()[:16]}


def cache_key(how: dict) -> str:
    """A short hash of everything that determines an importance result."""
    return hashlib.sha256(json.dumps(how, sort_keys=True, default=str).encode()).hexdigest()[:16]


def neuron_relevance(R, conv_neuron: str):
    """(B, neurons) float64: a conv channel's relevance is its spatial sum, a token sequence's feature its sum over
    the tokens, else one value per element (docs/methods/importance.md#neurons-and-their-values)."""
    import torch

    return pooled_neurons(R.to(torch.float64), conv_neuron, reduce="sum")


LRP_PASSES = 3  # what one input's relevance costs, in forward passes (a forward and the backward of relevance)


def compute_importance(ctx: JobContext, model, dataset, layer: str | NeuronDefinition, rule="lrp-0",
                       per_class: bool = False, batch_size: int = 256, project=None, *, split: str = "train",
                       max_inputs: int | None = None, seed: int = 0,
                       stored_only: bool = False, top_inputs: int = TOP_INPUTS) -> ImportanceResult | None:
    """Relevance of every neuron of `layer`, summed over the correctly classified inputs of `split`.

    `model` is a `LoadedModel`; `dataset` a `Dataset`. `layer` is a layer name or a
    `NeuronDefinition` (activation point and conv neuron; the relevance is the same at "pre" and
    "post"). `rule` is a rule name ('lrp-0', 'epsilon', 'z+', 'alpha-beta'), a `Rule`, or an
    `lrp.Composite` (which also picks the max-pool variant). `max_inputs` scans a seeded random
    sample of that many images instead of the whole split. With a `project`, an artifact made the
    same way is reused, and a new result is saved as one; `stored_only` reads that artifact and
    computes nothing (None when there is none). `top_inputs` inputs per neuron are kept by relevance
    and by activation for the neuron gallery (0: none); a stored result is reused whether or not it
    kept them.
    """

    from workbench.core.importance.lrp import LRP, as_composite

    definition = layer if isinstance(layer, NeuronDefinition) else NeuronDefinition(str(layer))
    composite = as_composite(rule)
    data = dataset.split(split)
    if len(data) == 0:
        raise WorkbenchError(f"The {split} split of {dataset.name!r} holds no images.", "Choose a split with images.")
    module = model.module
    device = ctx.device
    module.to(device)
    explainer = LRP(module, composite)  # refuses, naming the layer, models it cannot explain
    layers = [name for name in explainer.layer_names if name != "input"]
    if definition.layer not in layers:
        raise WorkbenchError(f"The model has no layer {definition.layer!r}.", f"Valid layers: {', '.join(layers)}.")
    num_classes = dataset.num_classes
    if isinstance(top_inputs, bool) or not isinstance(top_inputs, (int, np.integer)) or top_inputs < 0:
        raise WorkbenchError(f"top_inputs must be a whole number of at least 0; got {top_inputs!r}.",
                             f"Keep {TOP_INPUTS} inputs per neuron, or 0 for none.")

    indices = None
    if max_inputs is not None:
        if int(max_inputs) < 1:
            raise WorkbenchError(f"max_inputs must be at least 1; got {max_inputs}.",
                                 "Leave it empty to use every image.")
        if int(max_inputs) < len(data):
            indices = seeded_sample(len(data), int(max_inputs), seed)
    determinants = {"model_fingerprint": model.fingerprint(), **dataset_identity(dataset, split, data),
                    "layer": definition.layer, "neuron_definition": definition.to_dict(),
                    "rule": composite.describe(), "max_inputs": int(max_inputs) if indices is not None else None,
                    "sample_seed": int(seed) if indices is not None else None,
                    "aggregation": "sum over correctly classified inputs, start at the predicted logit"}
    key = cache_key(determinants)
    how = {"model": model.name, **determinants, "seed": int(seed)}

    stored = None if project is None else read_stored(project, ARTIFACT_KIND, load_importance, ctx.notice,
                                                      "computed again", cache_key=key,
                                                      **({"per_class": True} if per_class else {}))
    if stored is not None:
        ctx.progress(stored.inputs, stored.inputs, "importance (reused)")
        return stored
    if stored_only:
        return None

    total = len(data) if indices is None else len(indices)
    hooked = None
    if top_inputs:
        from workbench.core.models.layers import layer_catalogue

        hooked = hook_point(layer_catalogue(module, dataset.image_shape), definition)
    inputs = RelevanceInputs(module, composite, data, indices, definition, bool(per_class), num_classes,
                             batch_size, dataset.name, int(top_inputs), hooked, split)
    if sharding(ctx):
        sums = _sharded_sums(ctx, inputs, total)
    else:
        sums = relevance_sums(ctx, inputs, indices, explainer=explainer, partials=True)
    totals_np, counts_np, per_class_np = sums.totals, sums.counts, sums.per_class
    result = ImportanceResult(
        layer=definition.layer, definition=definition, rule=composite.describe(), totals=totals_np,
        ranking=rank_neurons(totals_np), counts=counts_np, inputs=total,
        class_names=list(dataset.class_names), per_class=per_class_np,
        per_class_ranking=_class_rankings(per_class_np, counts_np) if per_class_np is not None else None,
        provenance={**how, "cache_key": key, "per_class": bool(per_class)}, top_inputs=sums.top)
    if sums.top is not None:
        result.provenance.update(top_inputs=int(top_inputs), top_inputs_at=hooked,
                                 top_inputs_ranked="every input summed over, misclassified ones too; by R_n(x) "
                                                   "from the predicted logit and by activation; ties to the "
                                                   "lower index")
    if project is not None:
        name = f"importance-{model.name}-{definition.layer}-{composite.label}-{key[:8]}"
        arrays = {"totals": totals_np, "ranking": result.ranking, "counts": counts_np}
        if per_class_np is not None:
            arrays.update(per_class=per_class_np, per_class_ranking=result.per_class_ranking)
        if sums.top is not None:
            arrays.update(sums.top.arrays())
        project.save_artifact(ARTIFACT_KIND, name, arrays, **result.provenance, inputs=total,
                              class_names=result.class_names, correct=result.correct)
        result.artifact = name
    return result


@dataclass
class RelevanceInputs:
    """What summing relevance needs, sent once to every shard: the model, the rule, the inputs and how to sum."""

    module: object
    composite: object
    data: object  # the Split
    indices: np.ndarray | None  # the inputs summed (None: all)
    definition: NeuronDefinition
    per_class: bool
    num_classes: int
    batch_size: int
    dataset: str
    top_inputs: int = 0  # inputs kept per neuron by relevance and by activation (0: none)
    activation_at: str | None = None  # the module whose output holds the neurons' activations
    split: str = ""


@dataclass
class RelevanceSums:
    """Relevance summed over some inputs: (neurons,) totals, (classes,) correctly classified inputs, and in
    per-class mode (classes, neurons) totals; float64 sums, so shards add up to the whole within rounding.
    `top`: the inputs kept per neuron, when asked for (shards merge them exactly)."""

    totals: np.ndarray
    counts: np.ndarray
    per_class: np.ndarray | None = None
    top: TopInputs | None = None

    def __add__(self, other: "RelevanceSums") -> "RelevanceSums":
        return RelevanceSums(self.totals + other.totals, self.counts + other.counts,
                             None if self.per_class is None else self.per_class + other.per_class,
                             None if self.top is None else self.top.merge(other.top))


def relevance_sums(ctx: JobContext, inputs: RelevanceInputs, indices, explainer=None,
                   partials: bool = False) -> RelevanceSums:
    """The relevance of `inputs.definition`'s neurons summed over the correctly classified inputs `indices` of
    `inputs.data` (all when None), batch by batch, reporting progress in inputs (and, with `partials`, the
    running totals as `ImportanceProgress`)."""
    import torch

    from workbench.core.importance.lrp import LRP

    device = ctx.device
    module = inputs.module
    module.to(device)
    explainer = explainer or LRP(module, inputs.composite)
    definition, num_classes = inputs.definition, inputs.num_classes
    totals = class_totals = top = None  # sized by the first batch: neurons are channels or elements of the layer output
    hooked = inputs.activation_at if inputs.top_inputs else None
    outputs = [hooked] if hooked is not None and explainer.reads(hooked) else []  # activations from the same forward
    counts = torch.zeros(num_classes, dtype=torch.int64, device=device)
    total = len(inputs.data) if indices is None else len(indices)
    done = 0
    ctx.progress(0, total, "importance")
    for start, x, y in inputs.data.batches(step_batch(inputs.batch_size, LRP_PASSES), indices):
        ctx.check()
        y = y.to(device)
        # Kept top inputs rank misclassified inputs too, so every input starts from its predicted logit;
        # their rows are zeroed before summing below, which is what `keep` does otherwise.
        relevance = explainer.explain(x, layers=[definition.layer], to_input=False, outputs=outputs,
                                      keep=None if hooked else (lambda logits: logits.argmax(1) == y))
        if relevance.logits.shape[1] != num_classes:
            raise WorkbenchError(f"The model has {relevance.logits.shape[1]} outputs but dataset {inputs.dataset!r} "
                                 f"has {num_classes} classes.", "Choose a model trained on this dataset.")
        per_input = neuron_relevance(relevance.layers[definition.layer], definition.conv_neuron)
        if totals is None:
            totals = torch.zeros(per_input.shape[1], dtype=torch.float64, device=device)
            if inputs.per_class:
                class_totals = torch.zeros((num_classes, per_input.shape[1]), dtype=torch.float64, device=device)
        correct = relevance.logits.argmax(1) == y
        if hooked is not None:
            if top is None:
                top = TopInputs(inputs.top_inputs, per_input.shape[1], definition.layer, inputs.split)
            values = neuron_values(relevance.outputs[hooked], definition.conv_neuron) if outputs else \
                forward_values(module, hooked, x.to(device, explainer.dtype), definition.conv_neuron)
            stop = start + len(y)
            positions = np.arange(start, stop) if indices is None else np.asarray(indices[start:stop])
            top.offer(positions, per_input.cpu().numpy(), values.to(torch.float64).cpu().numpy(),
                      relevance.logits.argmax(1).cpu().numpy())
            per_input = per_input * correct[:, None]
        totals += per_input.sum(dim=0)  # rows of misclassified inputs are zero: they started from zero
        counts += torch.bincount(y[correct], minlength=num_classes)
        if class_totals is not None:
            class_totals.index_add_(0, y[correct], per_input[correct])
        done += len(y)
        ctx.progress(done, total, "importance")
        if partials:
            ctx.partial(ImportanceProgress(done, total, totals.cpu().numpy().copy(), counts.cpu().numpy().copy()))
    return RelevanceSums(totals.cpu().numpy(), counts.cpu().numpy(),
                         class_totals.cpu().numpy() if class_totals is not None else None, top)


def relevance_shard(ctx: JobContext, inputs: RelevanceInputs, piece: tuple[int, int]) -> RelevanceSums:
    """One shard of the sum: the inputs at positions piece[0]..piece[1] of the ones summed."""
    return relevance_sums(ctx, inputs, range_inputs(inputs.indices, piece))


def _sharded_sums(ctx: JobContext, inputs: RelevanceInputs, total: int) -> RelevanceSums:
    """`relevance_sums` over every input as shards (`core.execution.sharding`), added up: within float rounding of one
    pass, since the sums are added in another order."""
    step = step_batch(inputs.batch_size, LRP_PASSES)
    ranges = input_ranges(ctx, total, step)

    def partial(parts: dict) -> list[ImportanceProgress]:
        sums = functools.reduce(operator.add, parts.values())
        return [ImportanceProgress(sum(ranges[i][1] - ranges[i][0] for i in parts), total, sums.totals, sums.counts)]

    return run_plan(ctx, range_plan("importance", inputs, ranges, relevance_shard,
                                    lambda parts: functools.reduce(operator.add, parts), partial=partial))


def _class_rankings(per_class: np.ndarray, counts: np.ndarray) -> np.ndarray:
    ranks = np.stack([rank_neurons(row) for row in per_class]) if len(per_class) else \
        np.zeros((0, per_class.shape[1]), np.int64)
    ranks[counts == 0] = -1
    return ranks


def _stored_top(artifact, how: dict, neurons: int) -> TopInputs | None:
    """The inputs kept per neuron, or None for a result stored before they were kept."""
    if array_name("relevance", "index") not in artifact.names:
        return None
    arrays = {array_name(ranking, column): artifact.numbers(array_name(ranking, column), ndim=2, length=neurons)
              for ranking in RANKINGS for column in COLUMNS}
    return TopInputs.from_arrays(arrays, int(how["top_inputs"]), int(how["inputs"]), str(how["layer"]),
                                 str(how.get("split", "")))


def load_importance(project, name: str) -> ImportanceResult:
    """Read an importance artifact back from a project."""
    artifact = project.load_artifact(name, ARTIFACT_KIND)
    how = artifact.provenance
    per_class = "per_class" in artifact.names
    with reading(artifact):
        totals = artifact.numbers("totals", ndim=1)
        counts = artifact.numbers("counts", ndim=1)
        ranking = artifact.numbers("ranking", ndim=1, length=len(totals))
        if len(ranking) and not np.array_equal(np.sort(ranking), np.arange(len(totals))):
            raise artifact.wrong_contents("its ranking is not an order of the layer's neurons")
        result = ImportanceResult(
            layer=str(how["layer"]), definition=NeuronDefinition(**how["neuron_definition"]), rule=how["rule"],
            totals=totals, ranking=ranking, counts=counts, inputs=int(how["inputs"]),
            class_names=[str(c) for c in how.get("class_names", [])],
            per_class=artifact.numbers("per_class", ndim=2, length=len(counts)) if per_class else None,
            per_class_ranking=artifact.numbers("per_class_ranking", ndim=2, length=len(counts)) if per_class else None,
            artifact=name, reused=True, provenance=how, top_inputs=_stored_top(artifact, how, len(totals)))
    return result
