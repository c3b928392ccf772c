"""Fine-tuning with selected tests: presets, checkpointing, augmentation.

Method: docs/methods/fuzzing-and-retraining.md#retraining.

Every run fine-tunes a *copy* of the given model on the clean training set ∪ the added tests (with
their ground-truth labels), reshuffled every epoch with a seeded generator, so runs are independent
and the original weights are never touched. A fresh Adam optimiser is started: the Keras code also
restored the saved optimiser state, which a PyTorch checkpoint of another tool need not carry.

Checkpointing keeps the epoch with the best accuracy on a checkpoint set (ties → the earlier epoch):
- `clean` (default): the held-out part of the training-set pool (`pool.holdout`);
- `paper`: `fp_test`, as the RobOT code did. That is model selection on test data, so every result
  of this mode is labelled optimistic;
- `last`: no checkpoint set, the last epoch is kept (the convergence loop's cumulative rounds).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.models.hooks import private_copy
from workbench.core.models.layers import is_scripted, scripted_model_error
from workbench.core.models.model_io import LoadedModel
from workbench.core.models.training import run_epoch

CHECKPOINT_MODES = {
    "clean": "best epoch on the held-out pool part",
    "paper": "best epoch on fp_test (the RobOT paper's mode: model selection on test data, optimistic)",
    "last": "last epoch",
}


@dataclass(frozen=True)
class RetrainPreset:
    """Optimiser and schedule of one retraining preset (docs/methods/fuzzing-and-retraining.md#presets)."""

    name: str
    epochs: int
    lr: float
    batch_size: int
    lr_drop_after: int | None = None  # 0-based epoch after which lr is multiplied by lr_drop
    lr_drop: float = 0.1
    plateau: bool = False  # ×plateau_factor when the checkpoint loss stalls for plateau_patience epochs
    plateau_factor: float = math.sqrt(0.1)
    plateau_patience: int = 5
    min_lr: float = 5e-7
    augment: bool = False  # rotation ±10°, shifts ±10 %, horizontal flip
    budgets_code: tuple = ()  # the RobOT code's absolute budgets, for reference


PRESETS = {
    "robot-mnist": RetrainPreset("robot-mnist", epochs=10, lr=1e-3, batch_size=64,
                                 budgets_code=tuple(600 * k for k in (1, 2, 3, 4, 6, 8, 10, 12, 16, 20))),
    "robot-cifar": RetrainPreset("robot-cifar", epochs=40, lr=1e-4, batch_size=64, lr_drop_after=25,
                                 plateau=True, augment=True,
                                 budgets_code=tuple(500 * k for k in (2, 4, 8, 12, 20))),
}
#: The default budget grid, % of the pool.
BUDGET_GRID = (0.5, 1, 1.5, 2, 3, 4, 5, 6, 8, 10)


def get_preset(name: str) -> RetrainPreset:
    if name not in PRESETS:
        raise WorkbenchError(f"Unknown retraining preset {name!r}.", f"Use one of: {', '.join(PRESETS)}.")
    return PRESETS[name]


@dataclass
class RetrainResult:
    """The fine-tuned model (a copy), one history row per epoch, the kept epoch and the settings."""

    model: LoadedModel
    history: list[dict] = field(default_factory=list)
    best_epoch: int = 0
    params: dict = field(default_factory=dict)


def augment_batch(x, generator):
    """Per-image random rotation (±10°), shift (±10 % of the size) and horizontal flip, zero padding."""
    import torch
    import torch.nn.functional as F

    n = x.shape[0]
    uniform = lambda lo, hi: torch.empty(n, device=x.device).uniform_(lo, hi, generator=generator)  # noqa: E731
    angle = uniform(-10.0, 10.0) * math.pi / 180.0
    flip = torch.where(uniform(0.0, 1.0) < 0.5, -1.0, 1.0)
    # affine_grid works in [-1, 1] coordinates, so a shift of 10 % of the size is 0.2 there.
    theta = torch.zeros(n, 2, 3, device=x.device, dtype=x.dtype)
    theta[:, 0, 0], theta[:, 0, 1] = torch.cos(angle) * flip, -torch.sin(angle)
    theta[:, 1, 0], theta[:, 1, 1] = torch.sin(angle) * flip, torch.cos(angle)
    theta[:, 0, 2], theta[:, 1, 2] = uniform(-0.2, 0.2), uniform(-0.2, 0.2)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, padding_mode="zeros", align_corners=False)


def _as_tensors(images, labels, device):
    import torch

    return (torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).to(device),
            torch.from_numpy(np.asarray(labels, dtype=np.int64)).to(device))


def _accuracy_and_loss(module, x, y, batch_size: int = 1000) -> tuple[float, float]:
    import torch
    import torch.nn.functional as F

    correct, loss = 0, 0.0
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            logits = module(x[start:start + batch_size])
            loss += float(F.cross_entropy(logits, y[start:start + batch_size], reduction="sum"))
            correct += int((logits.argmax(1) == y[start:start + batch_size]).sum())
    return correct / max(len(y), 1), loss / max(len(y), 1)


def fine_tune(ctx, model: LoadedModel, train, added_images=None, added_labels=None, preset: str = "robot-mnist",
              seed: int = 0, checkpoint_set=None, checkpoint_mode: str = "clean", epochs: int | None = None,
              lr: float | None = None) -> RetrainResult:
    """Fine-tune a copy of `model` on `train` (a `Split`) ∪ the added tests, per `preset`.

    `checkpoint_set` is (images, labels) for `clean` and `paper` mode; `last` needs none. Partial
    results are the history rows, one per epoch.
    """
    import torch

    if is_scripted(model.module):  # its parameters are not leaves an optimiser can update
        raise scripted_model_error()
    settings = get_preset(preset)
    epochs = settings.epochs if epochs is None else int(epochs)
    lr = settings.lr if lr is None else float(lr)
    if epochs < 1:
        raise WorkbenchError(f"epochs must be at least 1 (got {epochs}).", "Fine-tune for one epoch or more.")
    if checkpoint_mode not in CHECKPOINT_MODES:
        raise WorkbenchError(f"Unknown checkpoint mode {checkpoint_mode!r}.",
                             f"Use one of: {', '.join(CHECKPOINT_MODES)}.")
    if (checkpoint_mode == "last") != (checkpoint_set is None):
        raise WorkbenchError(f"Checkpoint mode {checkpoint_mode!r} " +
                             ("keeps the last epoch and takes no checkpoint set." if checkpoint_mode == "last"
                              else "needs a checkpoint set."), "Pass a checkpoint set only with clean or paper mode.")
    if added_images is not None and len(added_images) != len(added_labels):
        raise WorkbenchError(f"There are {len(added_images)} added tests but {len(added_labels)} labels.",
                             "Every added test needs its ground-truth label.")
    device = ctx.device
    module = private_copy(model.module).to(device)
    for p in module.parameters():
        p.requires_grad_(True)
    x, y = _as_tensors(train.numpy(), train.labels, device)
    added = 0 if added_images is None else len(added_images)
    if added:
        xa, ya = _as_tensors(added_images, added_labels, device)
        x, y = torch.cat([x, xa]), torch.cat([y, ya])
    check = _as_tensors(*checkpoint_set, device) if checkpoint_set is not None else None
    torch.manual_seed(seed)
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    aug_generator = torch.Generator(device=device).manual_seed(int(seed) + 1)
    optimiser = torch.optim.Adam(module.parameters(), lr=lr)
    n, batch = len(y), settings.batch_size
    plateau_scale, stall, best_loss = 1.0, 0, math.inf
    best_state, best_acc, best_epoch, history = None, -1.0, 0, []
    started = time.monotonic()
    for epoch in range(epochs):
        current_lr = lr * (settings.lr_drop if settings.lr_drop_after is not None and epoch > settings.lr_drop_after
                           else 1.0)
        current_lr = max(current_lr * plateau_scale, settings.min_lr if settings.plateau else 0.0)
        for group in optimiser.param_groups:
            group["lr"] = current_lr
        order = torch.randperm(n, generator=generator).to(device)
        transform = (lambda xb: augment_batch(xb, aug_generator)) if settings.augment else None
        total_loss, correct = run_epoch(ctx, module, optimiser, x, y, order, batch, epoch, epochs, transform,
                                        diverged_hint="Lower the learning rate, or check the added tests for NaN "
                                                      "values.", what="fine-tuning epoch")
        row = {"epoch": epoch + 1, "train_loss": total_loss / n, "train_accuracy": correct / n, "lr": current_lr,
               "seconds": time.monotonic() - started}
        if check is not None:
            acc, check_loss = _accuracy_and_loss(module, *check)
            row.update(checkpoint_accuracy=acc, checkpoint_loss=check_loss)
            if acc > best_acc:
                best_acc, best_epoch = acc, epoch + 1
                best_state = copy.deepcopy(module.state_dict())
            if settings.plateau:
                stall = 0 if check_loss < best_loss else stall + 1
                best_loss = min(best_loss, check_loss)
                if stall >= settings.plateau_patience:
                    plateau_scale, stall = plateau_scale * settings.plateau_factor, 0
        history.append(row)
        ctx.partial(row)
    if best_state is not None:
        module.load_state_dict(best_state)
    else:
        best_epoch = epochs
    module.eval()
    info = copy.copy(model.info)
    info.name = f"{model.name}-retrained"
    info.card = {**model.info.card, "fine_tuned_from": model.name}
    params = {"preset": asdict(settings), "epochs": epochs, "lr": lr, "seed": int(seed),
              "checkpoint_mode": checkpoint_mode, "checkpoint_meaning": CHECKPOINT_MODES[checkpoint_mode],
              "optimistic": checkpoint_mode == "paper", "train_inputs": len(train), "added_tests": added,
              "best_epoch": best_epoch, "optimiser": "Adam (fresh state)", "device": str(device)}
    return RetrainResult(LoadedModel(module, info), history, best_epoch, params)
