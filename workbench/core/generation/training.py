"""Training a generator as a long job: the loop every kind shares.

A kind gives its optimisers and one batch's step (`Generator.optimisers`, `Generator.train_step`);
the loop here does the rest. The training split is held as one tensor on the device and shuffled
each epoch from the seed, and each epoch's noise comes from a generator seeded by (seed, epoch), so
a run continued with `resume=True` gives the same weights as one that never stopped.

- **Progress** per batch ("epoch 3/10, batch 120/469"); a cancel is seen at the next batch.
- **Checkpoints**: after every finished epoch the whole generator folder is written atomically —
  weights, card (`complete` false) and the optimisers' state — so a cancel, a crash or a divergence
  keeps the last finished epoch, loadable and resumable.
- **Partial results**: an `EpochReport` per epoch (the loss-curve point and a small sample grid).
- **NaN**: a non-finite loss stops the run at once, saying which loss, epoch and batch, and that
  the last finished epoch's checkpoint is kept.
- **The card** is finished after the last epoch: the latent range, seed acceptance by a reference
  classifier (when one is given) and the sample grid (`assessment`); then `complete` is true.

See docs/methods/generation.md#training-as-a-job.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.generation.assessment import (ACCEPTANCE_SAMPLES, LATENT_SAMPLES, measure_latent_range,
                                                  sample_grid, seed_acceptance)
from workbench.core.generation.protocol import Generator, GeneratorCard, check_fits
from workbench.core.generation.registry import create_generator, get_generator_kind
from workbench.core.generation.storage import (is_generator_folder, load_generator, read_training_state,
                                               save_generator)
from workbench.core.execution.jobs import JobContext, device_description

STATE_FORMAT = "workbench-generator-training"


@dataclass
class EpochReport:
    """A partial result, handed out after each finished epoch (for a live loss curve and sample grid)."""

    kind: str
    epoch: int
    epochs: int
    losses: dict
    loss_curve: list
    grid: np.ndarray  # float32 (classes, per class, C, H, W) in [0, 1]
    seconds: float
    folder: str
    class_names: list = field(default_factory=list)


@dataclass
class TrainedGenerator:
    generator: Generator
    card: GeneratorCard
    folder: Path


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of one epoch's shuffle and noise (distinct per epoch, the same in a resumed run)."""
    return (int(seed) * 1_000_003 + int(epoch)) % (2 ** 63)


def check_settings(epochs: int, batch_size: int, lr: float) -> None:
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise WorkbenchError(f"epochs must be a whole number, at least 1 (got {epochs!r}).", "Pass --epochs 1 or more.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise WorkbenchError(f"The batch size must be at least 1 (got {batch_size!r}).", "Pass --batch-size 1 or more.")
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise WorkbenchError(f"The learning rate must be a positive number (got {lr!r}).", "Pass --lr, e.g. 2e-4.")


def training_state(generator: Generator, optimisers: dict, epoch: int, settings: dict) -> dict:
    return {"format": STATE_FORMAT, "kind": generator.kind, "epoch": int(epoch), "settings": dict(settings),
            "optimisers": {name: opt.state_dict() for name, opt in optimisers.items()}}


def _resumed(ctx: JobContext, kind: str, dataset, out: Path, dataset_key: str, asked: dict):
    """(generator, card, state, settings) of the run in `out`, checked to be the one asked for."""
    if not is_generator_folder(out):
        raise WorkbenchError(f"There is no training run to resume in {out}: it holds no generator.",
                             "Leave out --resume to train a new generator there.")
    generator = load_generator(out)
    state = read_training_state(out)
    card = generator.card
    if generator.kind != kind:
        raise WorkbenchError(f"{out} holds a {generator.kind} generator, not a {kind} one.",
                             f"Resume it with --generator {generator.kind}, or choose another --out.")
    if card.dataset != dataset_key:
        raise WorkbenchError(f"The generator in {out} was trained on {card.dataset!r}, not on {dataset_key!r}.",
                             f"Resume it with --data {card.dataset}, or choose another --out.")
    check_fits(generator, dataset=dataset)
    settings = dict(state.get("settings") or {})
    for key, value in asked.items():
        if value is not None and settings.get(key) != value:
            ctx.notice(f"Resuming with {key.replace('_', ' ')} {value} (the run so far used {settings.get(key)}).")
            settings[key] = value
    return generator, card, state, settings


def train_generator(ctx: JobContext, kind: str, dataset, out, *, epochs: int | None = None,
                    batch_size: int | None = None, lr: float | None = None, preset: str = "default",
                    config: dict | None = None, seed: int = 0, resume: bool = False, classifier=None,
                    acceptance_samples: int = ACCEPTANCE_SAMPLES, latent_samples: int = LATENT_SAMPLES,
                    split: str = "train", eval_split: str = "test", preview_per_class: int = 4,
                    grid_per_class: int = 8, command: str = "") -> TrainedGenerator:
    """Train a generator of `kind` on `dataset`'s `split` into the folder `out` (a new one, or with
    `resume=True` the folder of an unfinished or shorter run, continued to `epochs`).

    `epochs`, `batch_size` and `lr` default to the kind's training defaults (or, when resuming, to
    the run's own). `classifier` (a `LoadedModel` for the dataset) measures seed acceptance for the
    card. `eval_split` gives the VAE's test images (latent range, reconstructions).
    """
    import torch

    out = Path(out)
    entry = get_generator_kind(kind)
    if not entry.trainable:
        raise WorkbenchError(f"The {entry.title} generator is not trained by the workbench.",
                             "Make one from a diffusers pipeline folder: workbench add-generator diffusers DIR "
                             "--data NAME.")
    dataset_key = dataset.spec
    train_split = dataset.split(split)
    if len(train_split) == 0:
        raise WorkbenchError(f"The {split} split of {dataset.name!r} holds no images.", "Train on a split with images.")
    held_out = dataset.splits.get(eval_split)
    images = held_out if held_out is not None and len(held_out) else train_split
    asked = {"batch_size": batch_size, "lr": lr, "seed": None}
    if resume:
        generator, card, state, settings = _resumed(ctx, kind, dataset, out, dataset_key, asked)
        done = int(state["epoch"])
        epochs = epochs if epochs is not None else card.epochs_planned
        check_settings(epochs, settings["batch_size"], settings["lr"])
        if done >= epochs and card.complete or done > epochs:
            raise WorkbenchError(f"The generator in {out} is trained for {done} epochs already.",
                                 f"Pass --epochs more than {done} to train it further.")
        seed = int(settings["seed"])
        if done < epochs:  # the measures of a finished run no longer describe the weights
            card.latent_range = card.seed_acceptance = None
        card.notes.append(f"resumed after epoch {done}" + (f": {command}" if command else ""))
    else:
        if out.exists() and is_generator_folder(out):
            raise WorkbenchError(f"{out} holds a generator already; it is left as it is.",
                                 "Continue its training with --resume, or choose another --out.")
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise WorkbenchError(f"{out} exists and is not an empty folder; it is left as it is.",
                                 "Choose a new folder for the generator (--out DIR).")
        defaults = entry.training_defaults
        settings = {"batch_size": batch_size if batch_size is not None else defaults.get("batch_size", 64),
                    "lr": lr if lr is not None else defaults.get("lr", 1e-3), "seed": int(seed), "split": split}
        epochs = epochs if epochs is not None else defaults.get("epochs", 10)
        check_settings(epochs, settings["batch_size"], settings["lr"])
        generator = create_generator(kind, dataset.num_classes, dataset.image_shape, preset, seed, **(config or {}))
        check_fits(generator, dataset=dataset)
        card = GeneratorCard(kind=kind, title=f"{generator.title or kind} trained on {dataset.card.title}",
                             dataset=dataset_key, class_names=list(dataset.class_names),
                             image_shape=list(generator.image_shape), preset=preset, config=dict(generator.config),
                             parameters=generator.parameter_count(), seed=int(seed), command=command)
        state, done = None, 0
    if classifier is not None:
        check_fits(generator, classifier=classifier)
    card.epochs_planned, card.batch_size, card.lr = int(epochs), int(settings["batch_size"]), float(settings["lr"])
    device = ctx.device
    card.device = device_description(device)
    from workbench.core.project.store import library_versions

    card.versions = {**library_versions(), **generator.versions()}
    card.complete = False

    generator.to(device)
    optimisers = generator.optimisers(float(settings["lr"]))
    if state is not None:
        try:
            for name, opt in optimisers.items():
                opt.load_state_dict(state["optimisers"][name])
                for group in getattr(opt, "param_groups", ()):  # a resumed run may go on with another lr
                    group["lr"] = float(settings["lr"])
        except (KeyError, ValueError) as exc:
            raise WorkbenchError(f"The training state in {out} does not fit its generator's optimisers.",
                                 "Train the generator again.", details=repr(exc)) from exc
    x_all = train_split.tensor().to(device)
    y_all = torch.from_numpy(np.asarray(train_split.labels, dtype=np.int64)).to(device)
    n, batch = len(y_all), int(settings["batch_size"])
    steps = (n + batch - 1) // batch
    preview = None
    epoch, measuring = done, False
    try:
        for epoch in range(done, epochs):
            seconds = run_epoch(ctx, generator, optimisers, x_all, y_all, batch, epoch, epochs, settings["seed"],
                                card, out)
            card.epochs, card.seconds = epoch + 1, card.seconds + seconds
            card.loss_curve[-1]["seconds"] = card.seconds
            # the samples of this epoch's weights, saved with them: a crash never pairs them with others
            preview = sample_grid(ctx.quiet(), generator, preview_per_class, settings["seed"], images)
            save_generator(generator, out, card, grid=preview,
                           training_state=training_state(generator, optimisers, epoch + 1, settings))
            ctx.partial(EpochReport(kind, epoch + 1, epochs, dict(card.final_losses), [dict(r) for r in card.loss_curve],
                                    preview, card.seconds, str(out), list(card.class_names)))
        finish, measuring = ctx.quiet(), True
        ctx.progress(steps * epochs, steps * epochs, "measuring the latent range")
        card.latent_range = measure_latent_range(finish, generator, images, latent_samples, settings["seed"],
                                                 eval_split if images is held_out else split).to_dict()
        if classifier is not None:
            ctx.progress(steps * epochs, steps * epochs, f"measuring seed acceptance by {classifier.name}")
            card.seed_acceptance = seed_acceptance(finish, generator, classifier, images, acceptance_samples,
                                                   settings["seed"]).to_dict()
        else:
            card.seed_acceptance = None
        ctx.progress(steps * epochs, steps * epochs, "drawing the sample grid")
        grid = sample_grid(finish, generator, grid_per_class, settings["seed"], images)
        ctx.check()  # the last moment to cancel before the finished card replaces the last checkpoint
    except Cancelled:
        finished = card.epochs if is_generator_folder(out) else 0
        where = "while the card's measures were taken" if measuring else f"in epoch {epoch + 1}"
        ctx.notice(f"Training cancelled {where}; " + (
            f"the checkpoint of epoch {finished} in {out} is kept (continue it with --resume)." if finished
            else "no epoch had finished, so nothing was saved."))
        raise
    card.complete = True
    save_generator(generator, out, card, grid=grid,
                   training_state=training_state(generator, optimisers, epochs, settings))
    return TrainedGenerator(generator, card, out)


def run_epoch(ctx: JobContext, generator: Generator, optimisers: dict, x, y, batch: int, epoch: int, epochs: int,
              seed: int, card: GeneratorCard, out: Path) -> float:
    """One epoch of `train_step`s over a seeded shuffle; appends its mean losses to the card's loss curve
    and returns its seconds. A non-finite loss stops the run, saying what is kept."""
    import torch

    start = time.monotonic()
    device = x.device
    n = len(y)
    steps = (n + batch - 1) // batch
    order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch_seed(seed, epoch))).to(device)
    rng = torch.Generator(device=device).manual_seed(epoch_seed(seed, epoch))
    sums: dict[str, float] = {}
    generator.net.train()
    try:
        for step in range(steps):
            idx = order[step * batch:(step + 1) * batch]
            losses = generator.train_step(x[idx], y[idx], optimisers, rng)
            values = {name: float(value) for name, value in losses.items()}
            bad = {name: value for name, value in values.items() if not math.isfinite(value)}
            if bad:
                raise diverged(bad, epoch, step, steps, card, out)
            for name, value in values.items():
                sums[name] = sums.get(name, 0.0) + value * len(idx)
            ctx.progress(epoch * steps + step + 1, epochs * steps, f"epoch {epoch + 1}/{epochs}, batch {step + 1}/{steps}")
    finally:
        generator.net.eval()
    means = {name: total / n for name, total in sums.items()}
    card.final_losses = means
    card.loss_curve.append({"epoch": epoch + 1, **means})
    return time.monotonic() - start


def diverged(bad: dict, epoch: int, step: int, steps: int, card: GeneratorCard, out: Path) -> WorkbenchError:
    name, value = next(iter(bad.items()))
    kept = (f"The checkpoint of epoch {card.epochs} in {out} is kept; lower the learning rate and continue it "
            "with --resume --lr …" if card.epochs else
            "No epoch had finished, so nothing was saved; train again with a lower learning rate (--lr).")
    return WorkbenchError(f"Training diverged: the {name} loss became {value} in epoch {epoch + 1}, batch "
                          f"{step + 1} of {steps}.", kept)


def train_with_reference(ctx: JobContext, kind: str, dataset, out, **settings) -> TrainedGenerator:
    """`train_generator` with the bundled classifier of `dataset` (if there is one) as the reference
    that measures seed acceptance: the Generators view's job."""
    from workbench.core.models.model_io import bundled_classifier, load_model

    name = bundled_classifier(dataset.spec)
    classifier = load_model(name) if name else None
    if classifier is None:
        ctx.notice(f"No bundled classifier knows {dataset.name}: seed acceptance is not measured.")
    return train_generator(ctx, kind, dataset, out, classifier=classifier, **settings)
