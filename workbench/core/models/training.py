"""Training and evaluating classifiers as jobs.

Training holds the split in memory as one tensor and shuffles indices with a seeded generator: on
two CPU cores a LeNet-5 epoch over 60k Fashion-MNIST images takes seconds, where a per-image Python
loader would take ten times longer. Both jobs report progress per batch and can be cancelled; a
cancelled training run writes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from workbench.core.data.class_order import class_order_check
from workbench.core.data.dataset import Dataset
from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.models.activations import STEP_INPUTS
from workbench.core.models.architectures import get_architecture
from workbench.core.models.model_io import LoadedModel, ModelInfo


def compatibility_problem(info, dataset: Dataset, name: str = "") -> str | None:
    """Why a model (its `ModelInfo`, called `name`) cannot run on `dataset`, from its declared input
    shape and class count alone — cheap enough for a UI thread; `check_compatible` also runs the model."""
    name = name or info.name
    if info.input_shape and tuple(info.input_shape) != tuple(dataset.image_shape):
        return (f"{name} takes images of shape {'×'.join(map(str, info.input_shape))}, but {dataset.name} has "
                f"{'×'.join(map(str, dataset.image_shape))}.")
    if info.class_names and len(info.class_names) != dataset.num_classes:
        return f"{name} has {len(info.class_names)} classes, but {dataset.name} has {dataset.num_classes}."
    return None


def check_compatible(model: LoadedModel, dataset: Dataset) -> None:
    """Refuse a model whose input shape or class count does not fit the dataset, saying which."""
    import torch

    shape = tuple(dataset.image_shape)
    if model.info.input_shape and tuple(model.info.input_shape) != shape:
        raise WorkbenchError(
            f"Model {model.name!r} expects images of shape {tuple(model.info.input_shape)} (C,H,W), "
            f"but dataset {dataset.name!r} has {shape}.", "Choose a dataset the model was made for.")
    split = next(s for s in dataset.splits.values() if len(s))
    # Two batches of different sizes: a model that returns one row whatever the batch shows here.
    for count in (1, 2):
        x = split.tensor(np.arange(count) % len(split))
        try:
            with torch.no_grad():
                out = model.module(x.to(next(model.module.parameters(), torch.zeros(0)).device))
        except Exception as exc:
            hint = "Choose a dataset the model was made for."
            if model.info.format == "torch.export":  # a program exported with a fixed batch size fails here too
                hint += " An exported program must be exported with a dynamic batch dimension (torch.export.Dim)."
            raise WorkbenchError(f"Model {model.name!r} fails on {dataset.name!r} images of shape {shape}: {exc}",
                                 hint, details=repr(exc)) from exc
        check_scores(model, out, count)
        if out.shape[1] != dataset.num_classes:
            raise WorkbenchError(
                f"Model {model.name!r} outputs {tuple(out.shape[1:])} scores per image, but dataset "
                f"{dataset.name!r} has {dataset.num_classes} classes.", "Choose a dataset with the model's classes.")


def check_scores(model: LoadedModel, out, count: int) -> None:
    """Refuse a model output that is not one row of real-valued class scores per input."""
    import torch

    fix = "The workbench needs a classifier that returns a tensor of class scores (logits), one row per image."
    if not isinstance(out, torch.Tensor):
        raise WorkbenchError(f"Model {model.name!r} returns a {type(out).__name__}, not a tensor of class scores.",
                             fix + " Wrap the model so forward() returns the logits alone.")
    if out.dim() != 2 or out.shape[0] != count:
        raise WorkbenchError(f"Model {model.name!r} returns scores of shape {tuple(out.shape)} for {count} images.",
                             fix)
    if not out.dtype.is_floating_point:
        raise WorkbenchError(f"Model {model.name!r} returns {out.dtype} scores, not real numbers.", fix)


@dataclass
class TrainResult:
    model: LoadedModel
    history: list[dict] = field(default_factory=list)
    seconds_per_epoch: float = 0.0


def train(ctx: JobContext, arch: str, dataset: Dataset, epochs: int = 8, batch_size: int = 128,
          lr: float = 1e-3, seed: int = 0, split: str = "train", eval_split: str | None = "test") -> TrainResult:
    """Train a zoo architecture from scratch with Adam; partial results are one dict per epoch."""
    import torch

    if epochs < 1:
        raise WorkbenchError(f"epochs must be at least 1 (got {epochs}).", "Pass --epochs 1 or more.")
    architecture = get_architecture(arch)
    if architecture.input_shape is not None and tuple(architecture.input_shape) != tuple(dataset.image_shape):
        raise WorkbenchError(
            f"Architecture {arch!r} takes images of shape {architecture.input_shape}, but {dataset.name!r} "
            f"has {dataset.image_shape}.", "Choose an architecture made for this dataset's image size.")
    torch.manual_seed(seed)
    device = ctx.device
    module = architecture.build(dataset.num_classes).to(device)
    train_split = dataset.split(split)
    x_all = train_split.tensor().to(device)
    y_all = torch.from_numpy(train_split.labels).to(device)
    n = len(y_all)
    optimiser = torch.optim.Adam(module.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    history, start_time = [], time.monotonic()
    loaded = LoadedModel(module, ModelInfo(name=f"{arch}-{dataset.name}", source="", format="checkpoint",
                                           arch=arch, input_shape=tuple(dataset.image_shape),
                                           class_names=list(dataset.class_names)))
    for epoch in range(epochs):
        order = torch.randperm(n, generator=generator).to(device)
        total_loss, correct = run_epoch(ctx, module, optimiser, x_all, y_all, order, batch_size, epoch, epochs,
                                        diverged_hint="Lower the learning rate (--lr).")
        row = {"epoch": epoch + 1, "train_loss": total_loss / n, "train_accuracy": correct / n,
               "seconds": time.monotonic() - start_time}
        if eval_split and eval_split in dataset.splits:
            row["test_accuracy"] = evaluate(ctx.quiet(), loaded, dataset, eval_split)["accuracy"]
        history.append(row)
        ctx.partial(row)
    module.eval()
    return TrainResult(loaded, history, (time.monotonic() - start_time) / epochs)


def run_epoch(ctx: JobContext, module, optimiser, x, y, order, batch_size: int, epoch: int, epochs: int,
              transform=None, diverged_hint: str = "Lower the learning rate.", what: str = "epoch") -> tuple[float, int]:
    """One epoch of cross-entropy steps over `x[order]` in batches; (summed loss, correct predictions).

    `transform` (e.g. augmentation) is applied to each batch; a non-finite loss stops the job with
    `diverged_hint`. Progress counts steps over all `epochs`; the module is left in eval mode.
    """
    import torch
    import torch.nn.functional as F

    module.train()
    steps = (len(order) + batch_size - 1) // batch_size
    total_loss, correct = 0.0, 0
    for step in range(steps):
        idx = order[step * batch_size:(step + 1) * batch_size]
        xb = x[idx] if transform is None else transform(x[idx])
        logits = module(xb)
        loss = F.cross_entropy(logits, y[idx])
        if not torch.isfinite(loss):
            module.eval()
            raise WorkbenchError(f"Training diverged: the loss became {loss.item()} in epoch {epoch + 1}.",
                                 diverged_hint)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        total_loss += loss.item() * len(idx)
        correct += int((logits.argmax(1) == y[idx]).sum())
        ctx.progress(epoch * steps + step + 1, epochs * steps, f"{what} {epoch + 1}/{epochs}")
    module.eval()
    return total_loss, correct


def predict(ctx: JobContext, model: LoadedModel, data, batch_size: int = 1000, what: str = "") -> np.ndarray:
    """The model's predicted class for every input of `data` (a split or test set), batch by batch.

    Refuses NaN or infinite scores, naming the first input that gave them.
    """
    import torch

    what = what or getattr(data, "name", "the inputs")
    device = ctx.device
    model.module.to(device).eval()
    predictions = np.empty(len(data), dtype=np.int64)
    with torch.no_grad():
        for start, x, _ in data.batches(batch_size):
            try:
                pieces = []
                for piece in torch.split(x, STEP_INPUTS):  # a huge batch in pieces: a cancel is seen in each
                    ctx.check()
                    pieces.append(model.module(piece.to(device)))
                logits = torch.cat(pieces)
            except Cancelled:
                raise
            except Exception as exc:  # it passed the two-image probe: a fault of the model, not of the data
                raise WorkbenchError(f"Model {model.name!r} failed on a batch of {len(x)} images ({what} images "
                                     f"{start}–{start + len(x) - 1}): {exc}", "Check the model with a batch of "
                                     "that size; --batch-size runs smaller ones.", details=repr(exc)) from exc
            check_scores(model, logits, len(x))
            bad = ~torch.isfinite(logits).all(dim=1)
            if bad.any():
                first = start + int(bad.nonzero()[0])
                unclean = ~torch.isfinite(x.flatten(1)).all(dim=1)
                if unclean[first - start]:  # the input is at fault, not the model
                    raise WorkbenchError(f"{what} image {first} has NaN or infinite pixels.",
                                         "Clean or re-export the test set; images must lie in [0, 1].")
                raise WorkbenchError(f"Model {model.name!r} returned NaN or infinite scores (first at "
                                     f"{what} image {first}).", "The model's weights are damaged or "
                                     "it expects other input scaling; check how it was trained.")
            predictions[start:start + len(x)] = logits.argmax(1).cpu().numpy()
            ctx.progress(min(start + batch_size, len(data)), len(data), f"evaluating on {what}")
    return predictions


def evaluate(ctx: JobContext, model: LoadedModel, dataset: Dataset, split="test",
             batch_size: int = 1000) -> dict:
    """Accuracy, per-class accuracy, the confusion matrix (rows = true class) and every prediction.

    `split` is a split name of `dataset`, or a test set of its kind of images (a `TestSet`)."""
    check_compatible(model, dataset)
    data = dataset.split(split) if isinstance(split, str) else split
    split = split if isinstance(split, str) else getattr(split, "name", "test set")
    if len(data) == 0:
        raise WorkbenchError(f"The {split} split of {dataset.name!r} holds no images.",
                             f"Evaluate on another split: {', '.join(k for k, v in dataset.splits.items() if len(v))}.")
    k = dataset.num_classes
    predictions = predict(ctx, model, data, batch_size, what=split)
    labels = data.labels
    confusion = np.zeros((k, k), dtype=np.int64)
    np.add.at(confusion, (labels, predictions), 1)
    per_class_total = confusion.sum(axis=1)
    per_class = np.divide(np.diag(confusion), per_class_total, out=np.full(k, np.nan), where=per_class_total > 0)
    return {"model": model.name, "dataset": dataset.name, "split": split, "n": int(len(data)),
            "accuracy": float((predictions == labels).mean()) if len(data) else float("nan"),
            "per_class_accuracy": {name: (None if np.isnan(a) else float(a))
                                   for name, a in zip(dataset.class_names, per_class)},
            "confusion": confusion, "predictions": predictions,
            "class_order_warning": class_order_check(confusion, dataset.class_names)}


def train_and_save(ctx: JobContext, arch: str, dataset: Dataset, out, name: str, epochs: int = 8,
                   batch_size: int = 128, lr: float = 1e-3, seed: int = 0, source: str = "",
                   command: str = "") -> tuple[LoadedModel, dict]:
    """Train, evaluate on the test split, and save a checkpoint with its model card beside it.

    The card records the data, epochs, seed, accuracy and the command that made the model. Both
    files are written only after training and evaluation finished, each atomically, so a
    cancelled run leaves nothing behind.
    """
    from pathlib import Path

    from workbench.core.models.model_io import save_checkpoint, weights_digest
    from workbench.core.project.store import write_json

    out = Path(out)
    result = train(ctx, arch, dataset, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
    final = evaluate(ctx.quiet(), result.model, dataset, "test") if "test" in dataset.splits else None
    card = {
        "name": name, "title": f"{arch} trained on {dataset.card.title}", "arch": arch,
        "dataset": dataset.recipe.get("name", dataset.name), "epochs": epochs, "batch_size": batch_size,
        "lr": lr, "optimiser": "Adam", "seed": seed,
        "test_accuracy": final["accuracy"] if final else None,
        "per_class_accuracy": final["per_class_accuracy"] if final else None,
        "seconds_per_epoch": round(result.seconds_per_epoch, 2), "history": result.history,
        "input_shape": list(dataset.image_shape), "class_names": list(dataset.class_names),
        "command": command, "source": source, "licence": "MIT",
        "weights_sha256": weights_digest(result.model.module.state_dict()),
    }
    ctx.check()  # the last moment to cancel before anything is written
    save_checkpoint(out, result.model.module, arch, card)
    write_json(out.with_suffix(".json"), card, backup=False)
    info = result.model.info
    info.name, info.source, info.card = name, str(out), card
    return result.model, card
