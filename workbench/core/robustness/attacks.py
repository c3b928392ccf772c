"""FGSM with random start and PGD, RobOT's two attacks, and the pool of successful adversarials.

Method: docs/methods/fol-and-selection.md#attacks. Both attacks start at
`clamp(x0 + U(−ε, ε), 0, 1)`; the draw is one `uniform_` over the whole batch from a
`torch.Generator` seeded with the run's seed, and an explicit `start` tensor can be injected
instead. FGSM is one step of size ε (= torchattacks `FFGSM(eps, alpha=eps)`), PGD 10 steps of size
ε/6 (= torchattacks `PGD(eps, eps/6, 10)`); every step is projected onto the ε-ball around x0 and the [0,1] box. The loss is summed over the batch
(docs/methods/fol-and-selection.md#per-sample-gradients); the sign step is the same as with
torchattacks' mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from workbench.core.data.dataset import step_batch
from workbench.core.errors import WorkbenchError
from workbench.core.robustness.scores import (
    check_eval,
    check_finite_logits,
    check_loss_mode,
    input_gradients,
    torch_module,
)

#: Default L∞ budget per dataset (docs/methods/fol-and-selection.md#attack-budgets-per-dataset).
#: Fashion-MNIST has no RobOT value; 0.1 is the workbench's.
DATASET_EPS = {"mnist": 0.3, "fashion-mnist": 0.1, "svhn": 8 / 255, "cifar10": 0.01}
#: Named presets: like-for-like with the MNIST setting, and the common CIFAR-10 budget.
EPS_PRESETS = {"robot-mnist-eps": 0.3, "cifar10-8/255": 8 / 255}

ATTACKS = ("fgsm", "pgd")
PGD_STEPS = 10


#: ε for a dataset without a preset of its own, by its images' channels: the common L∞ budgets for colour
#: (8/255, CIFAR-10's and SVHN's in the robustness literature) and grey images (0.1, Fashion-MNIST's).
COLOUR_EPS, GREY_EPS = 8 / 255, 0.1


def default_eps(dataset: str, channels: int | None = None) -> float:
    """The workbench's ε for a dataset name, e.g. `fashion-mnist` → 0.1; for another dataset, the budget
    for its images' `channels` (3: `COLOUR_EPS`, 1: `GREY_EPS`); refused when neither is known."""
    return eps_and_source(dataset, channels)[0]


def eps_and_source(dataset: str, channels: int | None = None) -> tuple[float, str]:
    """`default_eps` and where it comes from, in words: "default for fashion-mnist", or "default for
    colour images (my-data has no preset)"."""
    key = dataset.lower().replace("_", "-")
    key = {"fashion": "fashion-mnist", "fmnist": "fashion-mnist", "cifar-10": "cifar10"}.get(key, key)
    if key in DATASET_EPS:
        return DATASET_EPS[key], f"default for {key}"
    if channels in (1, 3):
        kind = "colour" if channels == 3 else "grey"
        return (COLOUR_EPS if channels == 3 else GREY_EPS), f"default for {kind} images ({dataset} has no preset)"
    raise WorkbenchError(f"No default attack budget for dataset {dataset!r}.",
                         f"Give eps explicitly; defaults exist for {', '.join(DATASET_EPS)}, and for any dataset "
                         f"of grey or colour images.")


def dataset_eps_and_source(dataset) -> tuple[float, str]:
    """`eps_and_source` of a loaded dataset: by its registered name, or a file's own name (never its path)."""
    return eps_and_source(dataset.recipe.get("name", dataset.name), dataset.image_shape[0])


def check_eps(eps: float) -> float:
    """ε must be a finite number in (0, 1]: inputs live in [0, 1], so a larger budget is meaningless."""
    try:
        eps = float(eps)
    except (TypeError, ValueError) as exc:
        raise WorkbenchError(f"The attack budget {eps!r} is not a number.", "Give eps in (0, 1].") from exc
    if not math.isfinite(eps) or not 0.0 < eps <= 1.0:
        raise WorkbenchError(f"The attack budget eps={eps} lies outside the data range (0, 1].",
                             "Inputs are images in [0, 1]; give eps in (0, 1], e.g. 0.3 for MNIST or 8/255.")
    return eps


def check_images(x) -> None:
    import torch

    if not bool(torch.isfinite(x).all()) or (x.numel() and (float(x.min()) < 0.0 or float(x.max()) > 1.0)):
        raise WorkbenchError("The images to attack are not all in [0, 1].",
                             "Scale images to [0, 1]; normalisation belongs inside the model.")


def random_start(x0, eps: float, generator=None):
    """`clamp(x0 + δ, 0, 1)` with `δ = empty_like(x0).uniform_(−ε, ε, generator=g)`, one whole-batch draw."""
    import torch

    delta = torch.empty_like(x0).uniform_(-eps, eps, generator=generator)
    return torch.clamp(x0 + delta, 0.0, 1.0)


def project(x, x0, eps: float):
    """Onto {‖x − x0‖∞ ≤ ε} ∩ [0,1]: `clamp(x0 + clamp(x − x0, −ε, ε), 0, 1)`."""
    import torch

    return torch.clamp(x0 + torch.clamp(x - x0, -eps, eps), 0.0, 1.0)


def _start(x0, eps, start, seed):
    import torch

    if start is not None:
        start = start.to(x0.device, x0.dtype)
        if start.shape != x0.shape:
            raise WorkbenchError(f"The start tensor has shape {tuple(start.shape)}, the inputs {tuple(x0.shape)}.",
                                 "Give one start point per input.")
        return start
    generator = torch.Generator(device=x0.device).manual_seed(int(seed))
    return random_start(x0, eps, generator)


def pgd(model, x0, y, eps: float, alpha: float | None = None, steps: int = PGD_STEPS, start=None,
        seed: int = 0, loss_mode: str = "logits"):
    """PGD with random start: `steps` sign steps of size `alpha` (default ε/6), each projected."""
    eps = check_eps(eps)
    alpha = eps / 6 if alpha is None else float(alpha)
    if steps < 1 or not alpha > 0:
        raise WorkbenchError(f"PGD needs at least one step and a positive step size (got {steps}, {alpha}).",
                             "Use the defaults: 10 steps of eps/6.")
    check_loss_mode(loss_mode)
    check_eval(torch_module(model))
    check_images(x0)
    x = _start(x0, eps, start, seed)
    for _ in range(steps):
        grad, _ = input_gradients(model, x, y, loss_mode)
        x = project(x + alpha * grad.sign(), x0, eps)
    return x.detach()


def fgsm(model, x0, y, eps: float, start=None, seed: int = 0, loss_mode: str = "logits"):
    """RobOT's FGSM: random start, one sign step of size ε, projection = FFGSM(ε, ε)."""
    return pgd(model, x0, y, eps, alpha=check_eps(eps), steps=1, start=start, seed=seed, loss_mode=loss_mode)


def run_attack(name: str, model, x0, y, eps: float, seed: int = 0, loss_mode: str = "logits", start=None):
    """`fgsm` or `pgd` by name, with their default settings."""
    if name == "fgsm":
        return fgsm(model, x0, y, eps, start=start, seed=seed, loss_mode=loss_mode)
    if name == "pgd":
        return pgd(model, x0, y, eps, start=start, seed=seed, loss_mode=loss_mode)
    raise WorkbenchError(f"Unknown attack {name!r}.", f"Use one of: {', '.join(ATTACKS)}.")


@dataclass
class AttackPool:
    """Adversarial candidates: images, ground truth, source index, attack name; and how they were made."""

    images: np.ndarray
    labels: np.ndarray
    source_index: np.ndarray
    attack: np.ndarray
    params: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.labels)

    def clean_images(self, split) -> np.ndarray:
        """The clean inputs x0 the candidates came from (needed for FOL∞)."""
        return split.numpy(self.source_index)


def attack_batch(batch_size: int) -> int:
    """The batch `attack_split` attacks at a time for a given batch size (the cancel is checked before each
    attack of a batch, so a batch is bounded by what it costs)."""
    return step_batch(batch_size, PGD_STEPS + 2)


def attack_split(ctx, model, split, eps: float, attacks=ATTACKS, seed: int = 0, batch_size: int = 256,
                 indices=None, loss_mode: str = "logits", successful_only: bool = True,
                 after_batches: int = 0) -> AttackPool:
    """Attack a split batch by batch on `ctx.device`, keeping the successful adversarials
    (docs/methods/fol-and-selection.md#candidate-pool).

    Success is `argmax f(x') ≠ y` with the ground truth y, evaluated in eval mode after the attack.
    Each attack draws its random starts from its own generator seeded with `seed + k` (k = its
    position in `attacks`), one draw per batch in batch order; all of it is recorded in `params`.
    `after_batches` says these inputs follow that many whole batches of a larger run (a shard of it):
    their draws are skipped, so each input gets the start it gets in the whole run.
    """
    import torch

    eps = check_eps(eps)
    check_loss_mode(loss_mode)
    for name in attacks:
        if name not in ATTACKS:
            raise WorkbenchError(f"Unknown attack {name!r}.", f"Use one of: {', '.join(ATTACKS)}.")
    module = torch_module(model)
    check_eval(module)
    device = ctx.device
    module.to(device)
    generators = [torch.Generator(device=device).manual_seed(int(seed) + k) for k in range(len(attacks))]
    n = len(split) if indices is None else len(indices)
    base = np.arange(len(split)) if indices is None else np.asarray(indices, dtype=np.int64)
    kept = {"images": [], "labels": [], "source_index": [], "attack": []}
    attempted = {name: 0 for name in attacks}
    succeeded = {name: 0 for name in attacks}
    ctx.progress(0, n, "attacks")
    batch_size = attack_batch(batch_size)
    if after_batches:  # replay the earlier batches' draws, in their order
        skipped = torch.empty((batch_size,) + tuple(split.image_shape), dtype=torch.float32, device=device)
        for _ in range(int(after_batches)):
            for generator in generators:
                skipped.uniform_(-eps, eps, generator=generator)
    for start, xb, yb in split.batches(batch_size, indices):
        xb, yb = xb.to(device), yb.to(device)
        for k, name in enumerate(attacks):
            ctx.check()
            x_start = random_start(xb, eps, generators[k])
            adv = run_attack(name, module, xb, yb, eps, loss_mode=loss_mode, start=x_start)
            with torch.no_grad():
                logits = module(adv)
            check_finite_logits(logits)
            ok = (logits.argmax(1) != yb) if successful_only else torch.ones_like(yb, dtype=torch.bool)
            ok_np = ok.cpu().numpy()
            attempted[name] += len(yb)
            succeeded[name] += int((logits.argmax(1) != yb).sum())
            kept["images"].append(adv.cpu().numpy()[ok_np])
            kept["labels"].append(yb.cpu().numpy()[ok_np])
            kept["source_index"].append(base[start:start + len(yb)][ok_np])
            kept["attack"].append(np.full(int(ok_np.sum()), name))
        ctx.progress(min(start + batch_size, n), n, "attacks")
    shape = (0,) + tuple(split.image_shape)
    arrays = {k: np.concatenate(v) if v else np.zeros(shape if k == "images" else (0,)) for k, v in kept.items()}
    params = {"eps": eps, "attacks": list(attacks), "seed": int(seed), "batch_size": batch_size,
              "loss_mode": loss_mode, "successful_only": successful_only, "pgd_steps": PGD_STEPS,
              "pgd_alpha": eps / 6, "device": str(device), "attempted": attempted, "succeeded": succeeded}
    return AttackPool(arrays["images"].astype(np.float32), arrays["labels"].astype(np.int64),
                      arrays["source_index"].astype(np.int64), arrays["attack"].astype(str), params)
