"""Neuron gallery: the inputs a neuron matters most for, with where in each image it draws from.

For a chosen neuron n of a layer:

- **Relevance of an input x to n** is `R_n(x)`, the LRP relevance that reaches n when propagation
  starts at x's predicted logit — the quantity importance sums over a dataset
  (docs/methods/importance.md#neuron-gallery). A conv neuron is a channel, its relevance summed
  over the channel's positions.
- **Its input heatmap for n**: the relevance at the layer is masked to n alone (every other neuron
  of the layer set to 0) and propagated from there down to the input with the same rules; the
  result is summed over colour channels to (H, W). So the heatmap shows how `R_n(x)` spreads over
  the pixels: it sums to `R_n(x)` less what the biases of the layers below keep back (exactly
  `R_n(x)` on a bias-free net). Values are signed; show them on a diverging map centred at 0.
- **By activation**, for contrast: the inputs with the largest value of n (post-activation channel
  mean by default, as `activations.NeuronDefinition` says), with the same heatmaps.

`neuron_gallery` reads the top-k from what importance kept while it summed the relevance
(`top_inputs.NeuronTop`), or, for a result stored without them, streams over the split keeping
only the running top-k; either way it then explains just those few inputs. `explain_input`
explains one image for the input inspector (one forward and one relevance pass); `save_gallery_png`
writes the gallery as PNG images (the CLI's `--gallery`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from workbench.core.data.dataset import step_batch
from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.importance.neuron_importance import LRP_PASSES, neuron_relevance
from workbench.core.importance.top_inputs import NeuronTop
from workbench.core.models.activations import NeuronDefinition, forward_values, hook_point, neuron_values
from workbench.core.models.layers import neuron_broadcast_shape, neuron_count
from workbench.core.project.store import atomic_path, write_json


@dataclass
class GalleryItem:
    """One input of a gallery. `score` is what the list is ranked by (relevance or activation);
    `relevance` and `activation` give both for every item."""

    index: int
    label: int
    prediction: int
    score: float
    heatmap: np.ndarray | None                # (H, W) float32 input relevance for this neuron, signed
    relevance: float = math.nan
    activation: float = math.nan

    def to_dict(self) -> dict:
        return {"index": self.index, "label": self.label, "prediction": self.prediction, "score": self.score,
                "relevance": self.relevance, "activation": self.activation}


@dataclass
class NeuronGallery:
    """The top-k inputs of `split` for one neuron, by relevance and by activation."""

    layer: str
    neuron: int
    split: str
    rule: dict
    by_relevance: list[GalleryItem]
    by_activation: list[GalleryItem]
    definition: NeuronDefinition | None = None
    inputs: int = 0                           # how many inputs were scanned
    provenance: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"layer": self.layer, "neuron": self.neuron, "split": self.split, "rule": self.rule,
                "inputs": self.inputs, "definition": self.definition.to_dict() if self.definition else None,
                "by_relevance": [item.to_dict() for item in self.by_relevance],
                "by_activation": [item.to_dict() for item in self.by_activation]}


@dataclass
class GalleryProgress:
    """What `neuron_gallery` hands out after each batch: the running top-k (indices and scores)."""

    done: int
    total: int
    relevance_indices: np.ndarray
    relevance_scores: np.ndarray
    activation_indices: np.ndarray
    activation_scores: np.ndarray


@dataclass
class InputExplanation:
    """One input explained at a layer: its heatmap and its relevance and activation per neuron."""

    index: int
    label: int
    prediction: int
    heatmap: np.ndarray                       # (H, W) input relevance from the predicted logit (or of one neuron)
    layer_relevance: np.ndarray               # (neurons,) this input's relevance per neuron at the layer
    layer_activation: np.ndarray              # (neurons,) its activation per neuron
    neuron: int | None = None


# --- shared pieces ------------------------------------------------------------------------------------

class _LayerReader:
    """An LRP explainer plus an activation hook for one layer of one model: relevance and values per batch."""

    def __init__(self, model, image_shape, definition: NeuronDefinition, rule, device):
        from workbench.core.importance.lrp import LRP, as_composite
        from workbench.core.models.layers import layer_catalogue

        self.module = model.module
        self.module.to(device).eval()
        self.device = device
        self.definition = definition
        self.composite = as_composite(rule)
        self.explainer = LRP(self.module, self.composite)  # refuses, naming the layer, what it cannot explain
        layers = [name for name in self.explainer.layer_names if name != "input"]
        if definition.layer not in layers:
            raise WorkbenchError(f"The model has no layer {definition.layer!r}.", f"Valid layers: {', '.join(layers)}.")
        catalogue = layer_catalogue(self.module, image_shape)
        self.hooked = hook_point(catalogue, definition)
        # The activations come from the relevance pass's own forward where the plan has the module.
        self.outputs = [self.hooked] if self.explainer.reads(self.hooked) else []
        shape = next(layer.output_shape for layer in catalogue if layer.name == definition.layer)
        self.shape = tuple(shape)
        self.neurons = neuron_count(self.shape, definition.conv_neuron)

    def check_neuron(self, neuron) -> int:
        if isinstance(neuron, bool) or not isinstance(neuron, (int, np.integer)) or not 0 <= neuron < self.neurons:
            raise WorkbenchError(f"Layer {self.definition.layer!r} has neurons 0–{self.neurons - 1}; "
                                 f"there is no neuron {neuron!r}.", "Choose a neuron of the layer.")
        return int(neuron)

    def mask(self, neuron: int):
        """A one-hot mask over the layer output that keeps neuron `neuron` (a whole channel for a conv neuron)."""
        import torch

        mask = torch.zeros(self.neurons)
        mask[neuron] = 1
        return mask.view(neuron_broadcast_shape(self.shape, self.definition.conv_neuron)[1:])

    def neuron_relevance(self, R):
        """(B, neurons) float64: a conv channel's relevance summed over its positions, else per element."""
        return neuron_relevance(R, self.definition.conv_neuron)  # exactly as importance sums it

    def explain(self, x, **options):
        """The relevance at the layer (and what `options` ask for), with the forward output holding the
        activations."""
        return self.explainer.explain(x, layers=[self.definition.layer], outputs=self.outputs, **options)

    def activations(self, result, x):
        """(B, neurons) float64 values at the definition's activation point: from `result`'s forward pass,
        or a plain forward pass of `x` where the relevance plan does not run that module on its own."""
        import torch

        if not self.outputs:
            try:
                return forward_values(self.module, self.hooked, x.to(self.device, self.explainer.dtype),
                                      self.definition.conv_neuron)
            except WorkbenchError:
                raise WorkbenchError(f"Activations of layer {self.definition.layer!r} are NaN or infinite.",
                                     "Check the model's weights and inputs for extreme values.") from None
        values = neuron_values(result.outputs[self.hooked], self.definition.conv_neuron).to(torch.float64)
        if not bool(torch.isfinite(values).all()):
            raise WorkbenchError(f"Activations of layer {self.definition.layer!r} are NaN or infinite.",
                                 "Check the model's weights and inputs for extreme values.")
        return values

    def heatmaps(self, x, neuron: int | None):
        """(relevance result, (B, H, W) float32 input heatmaps) from the predicted logits, masked to `neuron`."""
        masks = {self.definition.layer: self.mask(neuron)} if neuron is not None else None
        result = self.explain(x, to_input=True, masks=masks)
        return result, result.input.sum(dim=1).float().cpu().numpy()


def _as_definition(layer) -> NeuronDefinition:
    return layer if isinstance(layer, NeuronDefinition) else NeuronDefinition(str(layer))


def _top_k(scores: np.ndarray, indices: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest scores, largest first; ties go to the lower input index."""
    order = np.lexsort((indices, -scores))
    return order[:k]


class _RunningTop:
    """The k best (score, input) pairs seen so far, with what else each item needs later."""

    def __init__(self, k: int):
        self.k = k
        self.scores = np.zeros(0)
        self.columns = {name: np.zeros(0, dtype) for name, dtype in
                        (("index", np.int64), ("label", np.int64), ("prediction", np.int64),
                         ("relevance", np.float64), ("activation", np.float64))}

    def offer(self, scores: np.ndarray, **columns: np.ndarray) -> None:
        scores = np.concatenate([self.scores, scores])
        merged = {name: np.concatenate([self.columns[name], columns[name]]) for name in self.columns}
        keep = _top_k(scores, merged["index"], self.k)
        self.scores = scores[keep]
        self.columns = {name: values[keep] for name, values in merged.items()}


# --- the gallery job ------------------------------------------------------------------------------------

def neuron_gallery(ctx: JobContext, model, dataset, layer: str | NeuronDefinition, neuron: int, *, k: int = 9,
                   split: str = "train", rule="lrp-0", batch_size: int = 500, max_inputs: int | None = None,
                   seed: int = 0, correct_only: bool = False, kept: NeuronTop | None = None) -> NeuronGallery:
    """The top-k inputs of `split` by relevance to `neuron` and by its activation, each with the
    input heatmap of that neuron (see the module docstring for what the numbers mean).

    `model` is a `LoadedModel`; `layer` a name or `NeuronDefinition`; `rule` a rule name, `Rule` or
    `lrp.Composite`. With `kept` — this neuron's inputs kept by the importance result of the same
    model, layer, rule and split (`ImportanceResult.top_inputs.neuron(n)`) holding at least k — the
    lists are read from it and only their inputs are explained: no pass over the split. Otherwise it
    streams the split (or a seeded sample of `max_inputs`) batch by batch keeping only the running
    top-k, then explains those inputs. `correct_only` ranks only correctly classified inputs, as
    importance sums them (kept inputs rank all, so it streams). Ties go to the lower input index.
    Progress per batch, partial results (`GalleryProgress`), cancellation checked.
    """
    from workbench.core.importance.conservation import sample_indices

    definition = _as_definition(layer)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise WorkbenchError(f"k must be a whole number of at least 1; got {k!r}.", "Show 9 inputs, for instance.")
    data = dataset.split(split)
    if len(data) == 0:
        raise WorkbenchError(f"The {split} split of {dataset.name!r} holds no images.", "Choose a split with images.")
    reader = _LayerReader(model, dataset.image_shape, definition, rule, ctx.device)
    neuron = reader.check_neuron(neuron)
    if kept is not None and not correct_only and kept.kept >= min(int(k), kept.inputs):
        return _gallery_from_kept(ctx, model, dataset, data, reader, neuron, int(k), split, kept)
    indices = sample_indices(len(data), max_inputs, seed)
    total = len(data) if indices is None else len(indices)
    positions = np.arange(len(data)) if indices is None else indices
    by_relevance, by_activation = _RunningTop(int(k)), _RunningTop(int(k))
    done = 0
    ctx.progress(0, total, "gallery")
    for start, x, y in data.batches(step_batch(batch_size, LRP_PASSES), indices):
        ctx.check()
        result = reader.explain(x, to_input=False)
        if result.logits.shape[1] != dataset.num_classes:
            raise WorkbenchError(f"The model has {result.logits.shape[1]} outputs but dataset {dataset.name!r} has "
                                 f"{dataset.num_classes} classes.", "Choose a model trained on this dataset.")
        relevance = reader.neuron_relevance(result.layers[definition.layer])[:, neuron].cpu().numpy()
        activation = reader.activations(result, x)[:, neuron].cpu().numpy()
        prediction = result.logits.argmax(1).cpu().numpy()
        labels = y.numpy()
        columns = {"index": positions[start:start + len(y)], "label": labels, "prediction": prediction,
                   "relevance": relevance, "activation": activation}
        if correct_only:
            right = prediction == labels
            columns = {name: values[right] for name, values in columns.items()}
        by_relevance.offer(columns["relevance"], **columns)
        by_activation.offer(columns["activation"], **columns)
        done += len(y)
        ctx.progress(done, total, "gallery")
        ctx.partial(GalleryProgress(done, total, by_relevance.columns["index"].copy(), by_relevance.scores.copy(),
                                    by_activation.columns["index"].copy(), by_activation.scores.copy()))

    wanted = np.unique(np.concatenate([by_relevance.columns["index"], by_activation.columns["index"]]))
    heatmaps = {}
    for begin in range(0, len(wanted), batch_size):
        ctx.check()
        chunk = wanted[begin:begin + batch_size]
        _, maps = reader.heatmaps(data.tensor(chunk), neuron)
        heatmaps.update(zip(chunk.tolist(), maps))

    def items(top: _RunningTop) -> list[GalleryItem]:
        c = top.columns
        return [GalleryItem(int(c["index"][i]), int(c["label"][i]), int(c["prediction"][i]), float(top.scores[i]),
                            np.ascontiguousarray(heatmaps[int(c["index"][i])], dtype=np.float32),
                            float(c["relevance"][i]), float(c["activation"][i])) for i in range(len(top.scores))]

    return NeuronGallery(
        layer=definition.layer, neuron=neuron, split=split, rule=reader.composite.describe(),
        by_relevance=items(by_relevance), by_activation=items(by_activation), definition=definition, inputs=total,
        provenance={"model": model.name, "model_fingerprint": model.fingerprint(), "dataset": dataset.name,
                    "k": int(k), "max_inputs": max_inputs, "seed": int(seed), "correct_only": bool(correct_only),
                    "relevance": "R_n(x) from the predicted logit",
                    "heatmap": "relevance of neuron n alone propagated to the input, summed over channels"})


def kept_items(kept: NeuronTop, labels, k: int) -> tuple[list[GalleryItem], list[GalleryItem]]:
    """The first k kept inputs of a neuron by relevance and by activation, as gallery items without
    heatmaps: a lookup, so a view can show them at once while the heatmaps are computed."""
    labels = np.asarray(labels)

    def items(ranking: str) -> list[GalleryItem]:
        c = kept.columns[ranking]
        return [GalleryItem(int(c["index"][i]), int(labels[c["index"][i]]), int(c["prediction"][i]),
                            float(c[ranking][i]), None, float(c["relevance"][i]), float(c["activation"][i]))
                for i in range(min(k, kept.kept))]

    return items("relevance"), items("activation")


def _gallery_from_kept(ctx: JobContext, model, dataset, data, reader: _LayerReader, neuron: int, k: int,
                       split: str, kept: NeuronTop) -> NeuronGallery:
    """The gallery read from the inputs importance kept for `neuron`: only those k inputs are explained."""
    definition = reader.definition
    if (kept.layer, kept.neuron, kept.split) != (definition.layer, neuron, split):
        raise WorkbenchError(f"The kept inputs are those of neuron {kept.neuron} of {kept.layer!r} on the {kept.split} "
                             f"split, not of neuron {neuron} of {definition.layer!r} on the {split} split.",
                             "Pass the kept inputs of the neuron shown.")
    ctx.progress(0, 1, "gallery from the inputs kept with the relevance")
    wanted = np.unique(np.concatenate([columns["index"][:k] for columns in kept.columns.values()]))
    if len(wanted) and wanted[-1] >= len(data):
        raise WorkbenchError(f"The stored relevance result names {split} image #{int(wanted[-1]):,}, but the split "
                             f"has {len(data):,} images.", "Compute the relevance again (Compute again).")
    by_relevance, by_activation = kept_items(kept, data.labels, k)
    ctx.check()
    _, maps = reader.heatmaps(data.tensor(wanted), neuron)  # one batch of at most 2k inputs
    heatmaps = dict(zip(wanted.tolist(), maps))
    for item in by_relevance + by_activation:
        item.heatmap = np.ascontiguousarray(heatmaps[item.index], dtype=np.float32)
    ctx.progress(1, 1, "gallery")
    return NeuronGallery(
        layer=definition.layer, neuron=neuron, split=split, rule=reader.composite.describe(),
        by_relevance=by_relevance, by_activation=by_activation, definition=definition, inputs=kept.inputs,
        provenance={"model": model.name, "model_fingerprint": model.fingerprint(), "dataset": dataset.name,
                    "k": k, "max_inputs": None, "seed": None, "correct_only": False,
                    "ranked": "kept by the importance result while it summed the relevance over the split",
                    "relevance": "R_n(x) from the predicted logit",
                    "heatmap": "relevance of neuron n alone propagated to the input, summed over channels"})


def explain_input(model, dataset, split, index: int, layer: str | NeuronDefinition, *, rule="lrp-0",
                  neuron: int | None = None, device="cpu") -> InputExplanation:
    """Explain one image at `layer`: the heatmap from its predicted logit (or of `neuron` alone, as
    in the gallery), and its relevance and activation per neuron of the layer. Fast: one image.

    `split` is a split name of `dataset` or any test set of its kind of images."""
    from workbench.core.execution.jobs import resolve_device

    definition = _as_definition(layer)
    data = dataset.split(split) if isinstance(split, str) else split
    where = f"the {split} split" if isinstance(split, str) else getattr(split, "name", "the test set")
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(data):
        raise WorkbenchError(f"There is no image {index!r} in {where} ({len(data)} images).",
                             f"Choose an index in 0–{len(data) - 1}.")
    reader = _LayerReader(model, dataset.image_shape, definition, rule,
                          resolve_device(device) if isinstance(device, str) else device)
    if neuron is not None:
        neuron = reader.check_neuron(neuron)
    x = data.tensor(slice(int(index), int(index) + 1))
    result, maps = reader.heatmaps(x, neuron)
    return InputExplanation(
        index=int(index), label=int(data.labels[index]), prediction=int(result.logits.argmax(1)[0]),
        heatmap=np.ascontiguousarray(maps[0], dtype=np.float32),
        layer_relevance=reader.neuron_relevance(result.layers[definition.layer])[0].cpu().numpy().astype(np.float32),
        layer_activation=reader.activations(result, x)[0].cpu().numpy().astype(np.float32), neuron=neuron)


def explain(ctx, model, dataset, split, index: int, layer: str, neuron: int | None = None) -> InputExplanation:
    """`explain_input` as a job, on the job's device."""
    name = split if isinstance(split, str) else getattr(split, "name", "test set")
    ctx.progress(0, 1, f"explaining {name} image #{index}")
    explanation = explain_input(model, dataset, split, index, layer, neuron=neuron, device=ctx.device)
    ctx.progress(1, 1, "explained")
    return explanation


# --- PNG export ------------------------------------------------------------------------------------------

_NEGATIVE = np.array([59, 76, 192], np.float32)   # blue end of the diverging map
_POSITIVE = np.array([180, 4, 38], np.float32)    # red end
_WHITE = np.array([255, 255, 255], np.float32)
_CELL = 112                                        # pixels of the longer image side in the PNGs


def diverging_rgb(values: np.ndarray, level: float) -> np.ndarray:
    """Signed values → uint8 RGB on a blue–white–red map centred at 0, saturating at ±level."""
    t = np.clip(np.asarray(values, np.float32) / (level if level > 0 else 1.0), -1.0, 1.0)[..., None]
    end = np.where(t < 0, _NEGATIVE, _POSITIVE)
    return np.rint(_WHITE + (end - _WHITE) * np.abs(t)).astype(np.uint8)


def overlay_rgb(image: np.ndarray, values: np.ndarray, level: float) -> np.ndarray:
    """The heatmap blended over the image (H, W, C uint8), more opaque where |relevance| is larger."""
    grey = image.astype(np.float32)
    grey = np.repeat(grey, 3, axis=2) if grey.shape[2] == 1 else grey
    t = np.clip(np.abs(np.asarray(values, np.float32)) / (level if level > 0 else 1.0), 0, 1)[..., None]
    colour = np.where(np.asarray(values)[..., None] < 0, _NEGATIVE, _POSITIVE)
    return np.rint(grey * (1 - 0.8 * t) + colour * 0.8 * t).astype(np.uint8)


def colour_level(heatmaps: list[np.ndarray]) -> float:
    """A shared symmetric level: the 99.5th percentile of |relevance| over all the heatmaps' pixels.

    The maximum would let a few extreme pixels wash the rest out to white; beyond the level the map
    saturates. Falls back to the maximum (or 1) when the percentile is 0.
    """
    magnitudes = np.abs(np.concatenate([np.ravel(h) for h in heatmaps])) if heatmaps else np.zeros(1)
    level = float(np.percentile(magnitudes, 99.5))
    return level if level > 0 else (float(magnitudes.max()) or 1.0)


def _upscale(rgb: np.ndarray) -> np.ndarray:
    factor = max(1, _CELL // max(rgb.shape[:2]))
    return np.repeat(np.repeat(rgb, factor, axis=0), factor, axis=1)  # nearest neighbour: no blur


def _save_png(path: Path, rgb: np.ndarray) -> Path:
    from PIL import Image

    with atomic_path(path) as tmp:
        Image.fromarray(np.ascontiguousarray(rgb)).save(tmp, format="PNG")
    return path


def _panel(image: np.ndarray, heatmap: np.ndarray, level: float) -> np.ndarray:
    """Image | heatmap | overlay side by side, upscaled, with 4-pixel white gaps."""
    rgb = np.repeat(image, 3, axis=2) if image.shape[2] == 1 else image
    parts = [_upscale(p) for p in (rgb, diverging_rgb(heatmap, level), overlay_rgb(image, heatmap, level))]
    gap = np.full((parts[0].shape[0], 4, 3), 255, np.uint8)
    return np.concatenate([parts[0], gap, parts[1], gap, parts[2]], axis=1)


def _sheet(panels: list[np.ndarray], captions: list[tuple[str, bool]], title: str) -> np.ndarray:
    """Panels in a grid of up to 3 columns, each with a caption line (red when flagged), under a title."""
    from PIL import Image, ImageDraw

    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    h, w = panels[0].shape[:2]
    line, pad = 14, 8
    cell_h, cell_w = h + line + pad, w + pad
    sheet = Image.new("RGB", (columns * cell_w + pad, rows * cell_h + line + 2 * pad), "white")
    draw = ImageDraw.Draw(sheet)
    draw.text((pad, pad // 2), title, fill="black")
    for i, (panel, (caption, flagged)) in enumerate(zip(panels, captions)):
        x, y = pad + (i % columns) * cell_w, line + pad + (i // columns) * cell_h
        sheet.paste(Image.fromarray(panel), (x, y))
        draw.text((x, y + h + 1), caption, fill=(200, 0, 0) if flagged else "black")
    return np.asarray(sheet)


def save_gallery_png(gallery: NeuronGallery, dataset, out_dir) -> list[Path]:
    """Write the gallery as PNGs into `out_dir` and return their paths.

    For each list (by relevance, by activation): one sheet with every item as image | heatmap |
    overlay, and one PNG per item. All heatmaps of a list share one symmetric colour level (see
    `colour_level`), so their strengths compare. A `gallery.json` beside them records the items,
    the levels and the colour map.
    """
    out = Path(out_dir)
    data = dataset.split(gallery.split)
    names = list(dataset.class_names)
    written: list[Path] = []
    levels = {}
    stem = f"{gallery.layer}-neuron{gallery.neuron}".replace("/", "_")
    for which, items in (("relevance", gallery.by_relevance), ("activation", gallery.by_activation)):
        if not items:
            continue
        level = colour_level([item.heatmap for item in items])
        levels[which] = level
        images = data.thumbnails(np.asarray([item.index for item in items]))
        panels, captions, singles = [], [], []
        for rank, (item, image) in enumerate(zip(items, images), start=1):
            panel = _panel(image, item.heatmap, level)
            panels.append(panel)
            wrong = item.label != item.prediction  # red caption, as the GUI frames such thumbnails in red
            guessed = f" -> {names[item.prediction][:10]}" if wrong else ""
            captions.append((f"#{item.index} {names[item.label][:10]}{guessed} "
                             f"{'R' if which == 'relevance' else 'a'}={item.score:.3g}", wrong))
            singles.append(_save_png(out / f"{stem}-by-{which}-{rank:02d}-input{item.index}.png", panel))
        title = (f"{gallery.layer} neuron {gallery.neuron}: top {len(items)} {gallery.split} inputs by {which} "
                 f"(image | relevance heatmap | overlay; colour level +-{level:.3g})")
        written += [_save_png(out / f"{stem}-by-{which}.png", _sheet(panels, captions, title)), *singles]
    record = {**gallery.to_dict(), "levels": levels, "class_names": names,
              "colour_map": "blue-white-red, centred at 0; one symmetric level per list: the 99.5th percentile "
                            "of |relevance| over its heatmaps, saturating beyond",
              "files": [p.name for p in written], "provenance": gallery.provenance}
    write_json(out / "gallery.json", record, backup=False)
    return written
