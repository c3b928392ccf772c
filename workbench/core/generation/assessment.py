"""What a generator's card measures once it is trained: the latent range, seed acceptance, a sample grid.

**Latent range.** A latent-space search clamps every gene to [low, high] and mutates by an extent
proportional to high − low (high extent: range / 1000, low: range / 10 000). Both come from latents
of the kind the search starts from: for a generator with an encoder (the VAE) the posterior means µ
of `n` (default 1,000) test images drawn without replacement, for the others `n` draws from the
prior N(0, I); low and high are the minimum and maximum over all their coordinates. The draw is
seeded, so the range is measured once per trained generator and stored on its card. With 100
prior coordinates per latent the range is about 8.9, with 784 about 10.

**Seed acceptance.** The share of samples a reference classifier labels as intended: for a
class-conditional generator `n` samples with labels spread evenly over the classes, for the VAE
`n` test images encoded and decoded (their reconstructions), which keep their own labels. A search
keeps only the seeds the classifier under test accepts, so a generator far below the 99 % that the
benchmark's MNIST VAE and cDCGAN reached wastes most seeds, and one near chance (1 / classes) is
untrained or makes images the classifier cannot read; the card's warning says which.

**Sample grid.** One row per class: class-conditional samples of fixed seeded latents, or for the
VAE the reconstructions of a few test images of each class, float32 (rows, per row, C, H, W).

Every function is a job step: it decodes in batches of the generator's `decode_batch` and checks
for cancellation between them. See docs/methods/generation.md#latent-range and #seed-acceptance.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.generation.protocol import ACCEPTANCE_WARNING, Generator, check_fits

LATENT_SAMPLES = 1000
ACCEPTANCE_SAMPLES = 500
CHUNK = 2500  # images per classifier call


@dataclass
class LatentRange:
    """The clamp bounds of a latent search and the extents of its mutations."""

    low: float
    high: float
    n: int
    seed: int
    source: str  # "encoded test images" (µ) or "prior draws"
    split: str = ""

    @property
    def width(self) -> float:
        return self.high - self.low

    @property
    def extent_high(self) -> float:
        return self.width / 1000.0

    @property
    def extent_low(self) -> float:
        return self.width / 10000.0

    def to_dict(self) -> dict:
        return {**asdict(self), "range": self.width, "extent_high": self.extent_high, "extent_low": self.extent_low}

    @classmethod
    def from_dict(cls, data: dict) -> "LatentRange":
        return cls(float(data["low"]), float(data["high"]), int(data["n"]), int(data["seed"]), str(data["source"]),
                   str(data.get("split", "")))


def decode_in_batches(ctx: JobContext, generator: Generator, z, y=None, what: str = "decoding", seeds: bool = False):
    """`generator.decode(z, y, seeds)` in batches of its `decode_batch`, as one CPU tensor; cancellable between
    batches and, for kinds that decode in steps, between steps."""
    import torch

    pieces, n = [], len(z)
    step = max(1, int(generator.decode_batch))
    for start in range(0, n, step):
        ctx.progress(start, n, what)
        pieces.append(generator.decode(z[start:start + step], None if y is None else y[start:start + step],
                                       seeds=seeds, check=ctx.check).cpu())
    ctx.progress(n, n, what)
    return torch.cat(pieces) if pieces else torch.zeros(0, *generator.image_shape)


def encode_in_batches(ctx: JobContext, generator: Generator, x, what: str = "encoding"):
    import torch

    pieces, n = [], len(x)
    step = max(1, int(generator.decode_batch))
    for start in range(0, n, step):
        ctx.progress(start, n, what)
        pieces.append(generator.encode(x[start:start + step]).cpu())
    return torch.cat(pieces)


def draw_indices(count: int, n: int, seed: int) -> np.ndarray:
    """`n` of `count` indices without replacement (all of them if there are fewer), from `seed`, in draw order."""
    return np.random.default_rng(seed).permutation(count)[:min(n, count)]


def measure_latent_range(ctx: JobContext, generator: Generator, images=None, n: int = LATENT_SAMPLES,
                         seed: int = 0, split_name: str = "test") -> LatentRange:
    """The latent range of the module docstring; `images` (a split) is needed for a generator with an encoder."""
    import torch

    if n < 1:
        raise WorkbenchError(f"The latent range needs at least one latent (got n={n}).", "Use n = 1000.")
    if generator.can_encode:
        if images is None or len(images) == 0:
            raise WorkbenchError(f"The {generator.title or generator.kind} generator's latent range is measured on "
                                 "encoded test images, and none were given.", "Give the dataset's test split.")
        pick = draw_indices(len(images), n, seed)
        z = encode_in_batches(ctx, generator, images.tensor(pick), "latent range: encoding test images")
        source = "encoded test images"
    else:
        z = generator.sample_latent(n, torch.Generator().manual_seed(seed))
        source, split_name = "prior draws", ""
    if not torch.isfinite(z).all():
        raise WorkbenchError("The generator's latents hold NaN or infinite values.",
                             "Its weights are damaged or it diverged; train it again.")
    return LatentRange(float(z.min()), float(z.max()), int(len(z)), int(seed), source, split_name)


@dataclass
class SeedAcceptance:
    """How many of a generator's samples a reference classifier labels as intended."""

    classifier: str
    fingerprint: str
    n: int
    accepted: int
    per_class: list  # share accepted per class (None where a class had no sample)
    samples: str  # "class-conditional samples" or "reconstructed test images"
    seed: int
    num_classes: int
    real_accuracy: float | None = None  # the classifier's accuracy on real test images: the ceiling

    @property
    def rate(self) -> float:
        return self.accepted / self.n if self.n else 0.0

    @property
    def chance(self) -> float:
        return 1.0 / self.num_classes

    @property
    def warning(self) -> str:
        percent = f"{self.rate * 100:.1f} %"
        if self.num_classes > 1 and self.rate <= 1.5 * self.chance:
            return (f"Seed acceptance is {percent}, no better than chance ({self.chance * 100:.0f} %): the generator "
                    f"looks untrained, or its images do not fit the classifier {self.classifier!r}.")
        if self.real_accuracy is not None:
            if self.rate < ACCEPTANCE_WARNING * self.real_accuracy:
                return (f"Seed acceptance is {percent}, while the classifier labels {self.real_accuracy * 100:.1f} % "
                        "of real test images correctly: the generator's images are much harder to read than real "
                        "ones, so a search will reject many of its seeds. Train the generator longer.")
            return ""
        if self.rate < ACCEPTANCE_WARNING:
            return (f"Seed acceptance is {percent}, far below the 99 % of the benchmark's MNIST generators: a search "
                    "will reject most of its seeds. Train the generator longer.")
        return ""

    def to_dict(self) -> dict:
        return {**asdict(self), "rate": self.rate, "chance": self.chance, "warning": self.warning}


def classifier_logits(ctx: JobContext, classifier, images, on_batch=None):
    """The classifier's logits of `images` on the job's device, checked finite, in pieces of CHUNK;
    `on_batch()` runs after each piece's forward pass (where a forward hook has captured its layer)."""
    import torch

    from workbench.core.models.training import check_scores

    module = classifier.module.to(ctx.device).eval()
    out = []
    for start in range(0, len(images), CHUNK):
        ctx.check()
        batch = images[start:start + CHUNK]
        logits = module(batch.to(ctx.device))
        check_scores(classifier, logits, len(batch))
        if not torch.isfinite(logits).all():
            raise WorkbenchError(f"The classifier {classifier.name!r} returned NaN or infinite scores on generated "
                                 "images.", "Check the classifier and the generator's latent range.")
        out.append(logits.float())
        if on_batch is not None:
            on_batch()
    return torch.cat(out)


def classify(ctx: JobContext, classifier, x, what: str = "classifying"):
    """Predicted classes (numpy) of images `x` (a CPU tensor), batch by batch on the job's device, and the
    number of class scores the classifier gives."""
    import torch

    if not len(x):
        raise WorkbenchError("There are no images to classify.", "Decode at least one sample.")
    with torch.no_grad():
        logits = classifier_logits(ctx, classifier, x)
    return logits.argmax(1).cpu(), int(logits.shape[1])


def seed_acceptance(ctx: JobContext, generator: Generator, classifier, images=None, n: int = ACCEPTANCE_SAMPLES,
                    seed: int = 0) -> SeedAcceptance:
    """The seed acceptance of the module docstring; `images` (a split) is needed for a generator that is not
    class-conditional (its samples are reconstructions)."""
    import torch

    check_fits(generator, classifier=classifier)
    if n < 1:
        raise WorkbenchError(f"Seed acceptance needs at least one sample (got n={n}).", "Use n = 500.")
    k = generator.num_classes
    if generator.conditional:
        y = torch.arange(n) % k
        z = generator.sample_latent(n, torch.Generator().manual_seed(seed))
        samples = "class-conditional samples"
    elif generator.can_encode:
        if images is None or len(images) == 0:
            raise WorkbenchError("Seed acceptance of a generator that is not class-conditional is measured on "
                                 "reconstructed test images, and none were given.", "Give the dataset's test split.")
        pick = draw_indices(len(images), n, seed)
        z = encode_in_batches(ctx, generator, images.tensor(pick), "seed acceptance: encoding test images")
        y = torch.from_numpy(np.asarray(images.labels[pick], dtype=np.int64))
        samples = "reconstructed test images"
    else:
        raise WorkbenchError(f"The {generator.title or generator.kind} generator is neither class-conditional nor "
                             "has an encoder, so its samples have no intended class.",
                             "Seed acceptance applies to class-conditional generators and to the VAE.")
    x = decode_in_batches(ctx, generator, z, y if generator.conditional else None, "seed acceptance: decoding",
                          seeds=True)
    predicted, outputs = classify(ctx, classifier, x)
    if outputs != k:
        raise WorkbenchError(f"The classifier {classifier.name!r} outputs {outputs} class scores, but the generator "
                             f"has {k} classes.", "Choose a classifier trained on the generator's dataset.")
    hit = (predicted == y).numpy()
    labels = y.numpy()
    per_class = [float(hit[labels == c].mean()) if (labels == c).any() else None for c in range(k)]
    real = None
    if images is not None and len(images):  # the ceiling: how well the classifier reads real test images
        pick = draw_indices(len(images), n, seed)
        read, _ = classify(ctx, classifier, images.tensor(pick), "seed acceptance: real test images")
        real = float((read.numpy() == np.asarray(images.labels[pick])).mean())
    return SeedAcceptance(classifier.name, classifier.fingerprint(), int(len(hit)), int(hit.sum()), per_class,
                          samples, int(seed), k, real)


def sample_grid(ctx: JobContext, generator: Generator, per_class: int = 8, seed: int = 0,
                images=None) -> np.ndarray:
    """float32 (classes, per_class, C, H, W) in [0, 1]: the same seeded latents every call, so a grid shown
    after each epoch shows the same samples changing."""
    import torch

    k, c, h, w = generator.num_classes, *generator.image_shape
    if not generator.conditional and generator.can_encode and images is not None and len(images):
        order = draw_indices(len(images), len(images), seed)
        labels = np.asarray(images.labels)[order]
        grid = np.zeros((k, per_class, c, h, w), dtype=np.float32)
        for row in range(k):
            pick = order[labels == row][:per_class]
            if len(pick):
                z = generator.encode(images.tensor(pick))
                grid[row, :len(pick)] = generator.decode(z).cpu().numpy()
            ctx.check()
        return grid
    z = generator.sample_latent(k * per_class, torch.Generator().manual_seed(seed))
    y = torch.arange(k).repeat_interleave(per_class) if generator.conditional else None
    x = decode_in_batches(ctx, generator, z, y, "sample grid", seeds=True)
    return np.ascontiguousarray(x.numpy().reshape(k, per_class, c, h, w), dtype=np.float32)


def latent_walk(ctx: JobContext, generator: Generator, dimension: int, values, label: int | None = None,
                seed: int = 0, images=None) -> np.ndarray:
    """float32 (len(values), C, H, W): one latent with its `dimension`-th coordinate set to each of
    `values`, decoded (with `label` for a class-conditional generator). The latent is a seeded prior
    draw, or for a generator with an encoder the encoding of a seeded image of class `label` from
    `images`, so a walk starts from a real input as the search's seeds do."""
    import torch

    if generator.conditional and label is None:
        raise WorkbenchError(f"The {generator.title or generator.kind} generator is class-conditional: a walk "
                             "needs the class to decode.", "Choose a class.")
    if isinstance(dimension, bool) or not 0 <= int(dimension) < generator.latent_dim:
        raise WorkbenchError(f"Latent dimension {dimension!r} does not exist: the generator has "
                             f"{generator.latent_dim} (0 to {generator.latent_dim - 1}).", "Choose one of them.")
    if generator.can_encode and images is not None and len(images):
        order = draw_indices(len(images), len(images), seed)
        pick = order[np.asarray(images.labels)[order] == label][:1] if label is not None else order[:1]
        base = generator.encode(images.tensor(pick if len(pick) else order[:1]))[:1].cpu()
    else:
        base = generator.sample_latent(1, torch.Generator().manual_seed(int(seed)))
    z = base.repeat(len(values), 1)
    z[:, int(dimension)] = torch.as_tensor(np.asarray(values, dtype=np.float32))
    y = torch.full((len(values),), int(label)) if generator.conditional else None
    return decode_in_batches(ctx, generator, z, y, "latent walk").numpy()
