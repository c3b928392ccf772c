"""The generator protocol: what a generative model offers the workbench as a test-input search space.

A generator turns a flat latent vector — the *genome* a latent-space search mutates — and, when it is
class-conditional, a class label into an image the classifier under test takes as it is: float32
`(N, C, H, W)` in [0, 1] (`(N, 1, 28, 28)` for the built-ins). Whatever range its network produces
(tanh, a diffusion model's [−1, 1]) the generator maps to [0, 1] itself. The label is fixed per
seed and never part of the genome.

Every generator offers:

- `latent_dim` and `sample_latent(n, generator)`: the genome length D and seeded prior draws (n, D);
- `decode(z, y)`: images, in inference mode with the networks in eval mode, so the same latent
  and label give the same image;
- `encode(x)` where the model has an encoder (the VAE: the posterior mean µ, what seeds use);
- `save_weights` / `load_weights` into a folder (`storage` writes the whole folder with its card);
- for training (`training`): `optimisers(lr)` and `train_step(x, y, optimisers, rng)`, one batch.

A new kind is one file with a `Generator` subclass, added by a plugin with
`registry.add_generator(name, cls)`; see plugins/example_generator.py. What each built-in kind is
and how the card's measures are taken: docs/methods/generation.md.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from workbench.core.errors import WorkbenchError
from workbench.core.generation.descriptor import is_finite, is_whole, shown

if TYPE_CHECKING:  # torch is imported lazily so the GUI starts fast
    import torch

IMAGE_SHAPE = (1, 28, 28)
WEIGHTS_FILE = "weights.safetensors"
#: Seed acceptance below this share gets a warning on the card (the benchmark's MNIST VAE and cDCGAN reached 99 %).
ACCEPTANCE_WARNING = 0.8


@dataclass
class GeneratorCard:
    """What a trained generator is and how it was made: stored in its folder's `generator.json`.

    `loss_curve` holds one row per finished epoch (its mean losses and the training seconds so
    far); `latent_range` and `seed_acceptance` are the measures `assessment` takes once training
    has finished; `sample_grid` names the folder's array of sample images (uint8,
    classes, per class, C, H, W). `complete` is False for the checkpoint of an unfinished run.
    """

    kind: str
    title: str = ""
    dataset: str = ""
    class_names: list = field(default_factory=list)
    image_shape: list = field(default_factory=lambda: list(IMAGE_SHAPE))
    preset: str = ""
    config: dict = field(default_factory=dict)
    parameters: int = 0
    epochs: int = 0  # finished epochs
    epochs_planned: int = 0
    batch_size: int = 0
    lr: float = 0.0
    seed: int = 0
    seconds: float = 0.0  # training time of the finished epochs, over resumed runs too
    device: str = ""
    final_losses: dict = field(default_factory=dict)
    loss_curve: list = field(default_factory=list)
    latent_range: dict | None = None
    seed_acceptance: dict | None = None
    sample_grid: str = ""
    complete: bool = False
    command: str = ""
    created: str = ""
    versions: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def seconds_per_epoch(self) -> float:
        return self.seconds / self.epochs if self.epochs else 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "The generator's card") -> "GeneratorCard":
        """A card from stored JSON, every field checked (`where` names the file in a refusal); fields
        this workbench does not know are left out."""
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            raise WorkbenchError(f"{where}: card is not a JSON object naming its kind.",
                                 "Give card as an object with at least \"kind\", or train the generator again.")
        known = {f.name for f in fields(cls)}
        card = cls(**{k: v for k, v in data.items() if k in known})
        problem = card.problem()
        if problem:
            raise WorkbenchError(f"{where}: {problem}.", "Correct that field, or leave it out (every card field but "
                                 "kind is optional), or train the generator again.")
        return card

    def problem(self) -> str:
        """What is wrong with a card read from JSON, naming the field ('' when nothing is). Every field
        something is drawn, formatted or searched with is checked: a string where a number belongs would
        fail later, in a view, and NaN in a latent range would make every search empty."""
        for name in ("title", "dataset", "preset", "device", "sample_grid", "command", "created"):
            if not isinstance(getattr(self, name), str):
                return f"card.{name} is {shown(getattr(self, name))}; expected text"
        for name in ("parameters", "epochs", "epochs_planned", "batch_size", "seed"):
            if not is_whole(getattr(self, name)) or getattr(self, name) < 0:
                return f"card.{name} is {shown(getattr(self, name))}; expected a whole number, 0 or more"
        for name in ("lr", "seconds"):
            if not is_finite(getattr(self, name)) or getattr(self, name) < 0:
                return f"card.{name} is {shown(getattr(self, name))}; expected a finite number, 0 or more"
        if not isinstance(self.complete, bool):
            return f"card.complete is {shown(self.complete)}; expected true or false"
        if not isinstance(self.class_names, list) or not all(isinstance(n, str) for n in self.class_names):
            return f"card.class_names is {shown(self.class_names)}; expected a list of names (text)"
        if not (isinstance(self.image_shape, list) and len(self.image_shape) == 3
                and all(is_whole(s) and s > 0 for s in self.image_shape)):
            return f"card.image_shape is {shown(self.image_shape)}; expected [channels, height, width]"
        if not isinstance(self.config, dict):
            return f"card.config is {shown(self.config)}; expected an object of settings"
        if not (isinstance(self.notes, list) and all(isinstance(n, str) for n in self.notes)):
            return f"card.notes is {shown(self.notes)}; expected a list of text"
        if not (isinstance(self.versions, dict) and all(isinstance(v, str) for v in self.versions.values())):
            return f"card.versions is {shown(self.versions)}; expected an object of version texts"
        if not (isinstance(self.final_losses, dict) and all(is_finite(v) for v in self.final_losses.values())):
            return f"card.final_losses is {shown(self.final_losses)}; expected an object of finite numbers"
        if not (isinstance(self.loss_curve, list) and all(isinstance(r, dict) and all(is_finite(v) for v in r.values())
                                                          for r in self.loss_curve)):
            return "card.loss_curve is not a list of records of finite numbers (one per epoch)"
        return self._latent_range_problem() or self._acceptance_problem()

    def _latent_range_problem(self) -> str:
        r = self.latent_range
        if r is None:
            return ""
        numbers = ("low", "high", "range", "extent_high", "extent_low")
        if not isinstance(r, dict) or any(k not in r for k in (*numbers, "n", "source")):
            missing = [k for k in (*numbers, "n", "source") if not isinstance(r, dict) or k not in r]
            return f"card.latent_range lacks {', '.join(missing)}"
        bad = next((k for k in numbers if not is_finite(r[k])), None)
        if bad:
            return f"card.latent_range.{bad} is {shown(r[bad])}; expected a finite number"
        if not r["low"] < r["high"]:
            return f"card.latent_range has low {r['low']:g} not below high {r['high']:g}; a search needs low < high"
        if not is_whole(r["n"]) or r["n"] < 0 or not isinstance(r["source"], str):
            return "card.latent_range.n must be a whole number and its source text"
        return ""

    def _acceptance_problem(self) -> str:
        a = self.seed_acceptance
        if a is None:
            return ""
        keys = ("classifier", "rate", "n", "samples")
        if not isinstance(a, dict) or any(k not in a for k in keys):
            missing = [k for k in keys if not isinstance(a, dict) or k not in a]
            return f"card.seed_acceptance lacks {', '.join(missing)}"
        for name in ("rate", "real_accuracy"):
            value = a.get(name)
            if (value is not None or name == "rate") and not (is_finite(value) and 0 <= value <= 1):
                return f"card.seed_acceptance.{name} is {shown(value)}; expected a share from 0 to 1"
        if not is_whole(a["n"]) or a["n"] < 0:
            return f"card.seed_acceptance.n is {shown(a['n'])}; expected a whole number, 0 or more"
        if not all(isinstance(a.get(k, ""), str) for k in ("classifier", "samples", "warning")):
            return "card.seed_acceptance's classifier, samples and warning must be text"
        return ""

    def summary(self) -> list[tuple[str, str]]:
        """(label, text) lines of the card's measures, for the CLI and the Generators view."""
        losses = ", ".join(f"{k} {v:.4g}" for k, v in self.final_losses.items()) or "none"
        lines = [("Final losses", losses)] if self.epochs_planned else []  # a pipeline made elsewhere has none
        if self.latent_range:
            r = self.latent_range
            lines.append(("Latent range", f"[{r['low']:.4g}, {r['high']:.4g}] ({r['range']:.4g}, from {r['n']} "
                                          f"{r['source']}); mutation extents high {r['extent_high']:.3g}, "
                                          f"low {r['extent_low']:.3g}"))
        if self.seed_acceptance:
            a = self.seed_acceptance
            real = a.get("real_accuracy")
            lines.append((f"Seed acceptance by {a['classifier']}", f"{a['rate'] * 100:.1f} % of {a['n']} "
                                                                    f"{a['samples']}" + (
                f" (it reads {real * 100:.1f} % of real test images correctly)" if real is not None else "")))
        else:
            lines.append(("Seed acceptance", "not measured (no reference classifier)" if self.epochs_planned else
                          "not measured (export-generator --measure measures it, or add-generator "
                          "--acceptance-samples N)"))
        return lines

    def warnings(self) -> list[str]:
        """What a user should know before searching with this generator."""
        out = []
        if not self.complete:
            out.append(f"Training stopped after {self.epochs} of {self.epochs_planned} epochs; this is the "
                       "checkpoint of the last finished epoch (continue with --resume).")
        if self.seed_acceptance and self.seed_acceptance.get("warning"):
            out.append(self.seed_acceptance["warning"])
        return out


def _nothing() -> None:
    """`Generator.between_steps` outside a decode that was given a check."""


class Generator(ABC):
    """The base of every generator kind: checks, decoding in inference mode, devices and weights.

    A subclass sets the class attributes, builds its networks in `build()` (one `nn.ModuleDict`, so
    its `state_dict` is the generator's) and implements `latent_dim`, `forward_decode`, `optimisers`
    and `train_step` (and `forward_encode` if `can_encode`). Its constructor parameters are
    `num_classes`, `image_shape` and the keys of `presets["default"]`, which hold every size the
    kind has, and of `options` (other settings, recorded only when given): `self.config` is that
    dictionary with the caller's values, stored with the weights.
    """

    kind: ClassVar[str] = ""
    title: ClassVar[str] = ""
    conditional: ClassVar[bool] = True  # decode needs a class label per latent
    trainable: ClassVar[bool] = True  # `train-generator` trains it (a pipeline made elsewhere is not)
    can_encode: ClassVar[bool] = False
    #: image shapes (C, H, W) the kind can be built for; None: any
    image_shapes: ClassVar[tuple | None] = (IMAGE_SHAPE,)
    #: at most this many images per decode call when the workbench decodes many (a cancel is seen between;
    #: iterative kinds also see it between their steps, `between_steps`)
    decode_batch: ClassVar[int] = 500
    presets: ClassVar[dict] = {"default": {}}
    #: settings beyond the sizes, with their defaults: recorded in `config` only when given
    options: ClassVar[dict] = {}
    training_defaults: ClassVar[dict] = {"epochs": 10, "batch_size": 64, "lr": 1e-3}
    #: files `save_weights` writes (a folder missing one of them is refused when loaded)
    weight_files: ClassVar[tuple] = (WEIGHTS_FILE,)

    @classmethod
    def shape_problem(cls, shape: tuple[int, int, int]) -> str | None:
        """What keeps this kind from making images of `shape` (C, H, W), said after "The … generator", or None.
        By default: a shape outside `image_shapes`."""
        if cls.image_shapes is None or shape in {tuple(s) for s in cls.image_shapes}:
            return None
        return f"makes images of shape {' or '.join('×'.join(map(str, s)) for s in cls.image_shapes)} (C×H×W)"

    @staticmethod
    def square_side_problem(shape: tuple[int, int, int], smallest: int) -> str | None:
        """`shape_problem` of a kind that halves square images: a side divisible by 4, at least `smallest`."""
        _, height, width = shape
        if height != width or height % 4 or height < smallest:
            return f"makes square images whose side is divisible by 4 and at least {smallest} (28×28, 32×32, " \
                   "64×64, …)"
        return None

    def __init__(self, num_classes: int = 10, image_shape=IMAGE_SHAPE, **config):
        import torch

        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise WorkbenchError(f"A generator needs a whole number of classes, at least 1 (got {num_classes!r}).",
                                 "Train it on a dataset with labelled classes.")
        shape = tuple(int(s) for s in image_shape)
        problem = self.shape_problem(shape)
        if problem:
            raise WorkbenchError(f"The {self.title or self.kind} generator {problem}, not "
                                 f"{'×'.join(map(str, shape))}.",
                                 "Choose a dataset whose images it can make, or a generator kind made for this "
                                 "image size.")
        defaults = dict(self.presets.get("default", {}))
        unknown = sorted(set(config) - set(defaults) - set(self.options))
        if unknown:
            raise WorkbenchError(f"The {self.title or self.kind} generator has no setting {', '.join(map(repr, unknown))}.",
                                 f"Its settings: {', '.join([*defaults, *self.options]) or 'none'}.")
        self.num_classes = num_classes
        self.image_shape = shape
        self.config = {**defaults, **config}
        self.device = torch.device("cpu")
        self.card: GeneratorCard | None = None  # set when trained or loaded
        self.folder: Path | None = None  # where it was loaded from
        self.load_warnings: list[str] = []  # what reading its folder found a user should know
        self.between_steps = _nothing  # set by `decode` for the length of one call
        self.net = self.build()
        self.net.eval()

    # --- what a kind implements ------------------------------------------------------------------

    @property
    @abstractmethod
    def latent_dim(self) -> int:
        """The genome's length D."""

    @abstractmethod
    def build(self) -> "torch.nn.Module":
        """The networks, as one module (an `nn.ModuleDict`)."""

    @abstractmethod
    def forward_decode(self, z: "torch.Tensor", y: "torch.Tensor | None") -> "torch.Tensor":
        """Images in [0, 1], `(N, *image_shape)`, from latents `(N, D)` and labels `(N,)` on the device."""

    def forward_seed_decode(self, z: "torch.Tensor", y: "torch.Tensor | None") -> "torch.Tensor":
        """Images for a search's seeds; the same as `forward_decode` unless a kind makes its seeds with other
        settings than it searches with (Stable Diffusion: stronger guidance)."""
        return self.forward_decode(z, y)

    def forward_encode(self, x: "torch.Tensor") -> "torch.Tensor":
        """Latents `(N, D)` of images `(N, *image_shape)` in [0, 1] on the device."""
        raise WorkbenchError(f"The {self.title or self.kind} generator cannot encode images.",
                             "Only generators with an encoder (the VAE) can; use sample_latent for the others.")

    @abstractmethod
    def optimisers(self, lr: float) -> dict:
        """The optimisers of one training run, by name (their state is kept in checkpoints): anything with
        `state_dict` and `load_state_dict`, such as a weight average."""

    @abstractmethod
    def train_step(self, x: "torch.Tensor", y: "torch.Tensor", optimisers: dict, rng) -> dict:
        """One optimisation step on a batch (images in [0, 1] and labels, on the device); returns the
        step's losses by name as 0-d tensors. `rng` is the run's seeded `torch.Generator` on the device."""

    def versions(self) -> dict:
        """Versions of libraries the kind depends on beyond PyTorch (recorded on the card)."""
        return {}

    # --- the search space ----------------------------------------------------------------------

    def sample_latent(self, n: int, generator=None) -> "torch.Tensor":
        """`n` draws from the prior N(0, I), `(n, latent_dim)` float32 on the CPU, from `generator` if given."""
        import torch

        return torch.randn(int(n), self.latent_dim, generator=generator, dtype=torch.float32)

    def check_labels(self, y, n: int) -> "torch.Tensor | None":
        """`y` as a long tensor of `n` labels on the device, checked against the class count."""
        import torch

        if y is None:
            if self.conditional:
                raise WorkbenchError(f"The {self.title or self.kind} generator is class-conditional: decode needs a "
                                     "class label for every latent.", "Pass y, one label per latent.")
            return None
        y = torch.as_tensor(y).reshape(-1)
        if y.dtype.is_floating_point or y.dtype == torch.bool:
            raise WorkbenchError(f"Class labels must be whole numbers, not {y.dtype}.", "Pass integer labels.")
        if len(y) == 1 and n > 1:
            y = y.expand(n)
        if len(y) != n:
            raise WorkbenchError(f"{n} latents were given with {len(y)} labels.", "Give one label per latent.")
        if len(y) and (int(y.min()) < 0 or int(y.max()) >= self.num_classes):
            raise WorkbenchError(f"Class labels must lie in 0–{self.num_classes - 1} for this generator, "
                                 f"not {int(y.min())}–{int(y.max())}.", "Pass labels of the generator's classes.")
        return y.to(self.device, torch.long)

    def decode(self, z, y=None, seeds: bool = False, check=None) -> "torch.Tensor":
        """Images float32 `(N, *image_shape)` in [0, 1] on the generator's device, for latents `z`
        `(N, latent_dim)` and (class-conditional kinds) labels `y` `(N,)`; with `seeds`, as a search's seeds.

        `check` (no arguments; a job's cancel check) is what `self.between_steps` calls during this decode:
        a kind that decodes in many steps (the diffusion models) calls it after each, so that a stop is seen
        within one step however many images a call holds; whatever it raises ends the decode."""
        import torch

        z = torch.as_tensor(z)
        if z.dim() != 2 or z.shape[1] != self.latent_dim:
            raise WorkbenchError(f"Latents of shape {tuple(z.shape)} do not fit this generator: it takes "
                                 f"(N, {self.latent_dim}).", f"Give N latent vectors of length {self.latent_dim}.")
        if not z.dtype.is_floating_point:
            raise WorkbenchError(f"Latents must be real numbers, not {z.dtype}.", "Pass a float tensor.")
        if not torch.isfinite(z).all():
            raise WorkbenchError("A latent vector holds NaN or infinite values.", "Clamp or redraw the latents.")
        labels = self.check_labels(y, len(z))
        self.net.eval()
        self.between_steps = check or _nothing
        try:
            with torch.inference_mode():
                images = (self.forward_seed_decode if seeds else self.forward_decode)(
                    z.to(self.device, torch.float32), labels)
        finally:
            self.between_steps = _nothing
        expected = (len(z), *self.image_shape)
        if tuple(images.shape) != expected:
            raise WorkbenchError(f"The {self.title or self.kind} generator made images of shape "
                                 f"{tuple(images.shape)}, not {expected}.", "Fix the generator's decoder.")
        return images.float().clamp(0.0, 1.0)

    def encode(self, x) -> "torch.Tensor":
        """Latents `(N, latent_dim)` on the device of images `(N, *image_shape)` in [0, 1] (kinds with an encoder)."""
        import torch

        if not self.can_encode:
            return self.forward_encode(x)  # says it cannot
        x = torch.as_tensor(x)
        if tuple(x.shape[1:]) != self.image_shape or x.dim() != 4:
            raise WorkbenchError(f"Images of shape {tuple(x.shape)} do not fit this generator: it takes "
                                 f"(N, {', '.join(map(str, self.image_shape))}).", "Give images of its shape.")
        self.net.eval()
        with torch.inference_mode():
            return self.forward_encode(x.to(self.device, torch.float32)).float()

    # --- devices and weights ---------------------------------------------------------------------

    def to(self, device) -> "Generator":
        import torch

        self.device = torch.device(device)
        self.net.to(self.device)
        return self

    def state_dict(self) -> dict:
        return self.net.state_dict()

    def weights_sha256(self) -> str:
        """The SHA-256 recorded in, and checked against, the folder's generator.json."""
        from workbench.core.models.model_io import weights_digest

        return weights_digest(self.state_dict())

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.net.parameters())

    def save_weights(self, folder: Path, half: bool = False) -> None:
        """Write the weights into `folder` (the files `weight_files` names); with `half`, floating-point
        weights as float16 (they are read back into float32 networks: `round_to_half` first, so what
        is stored is exactly what is used)."""
        import torch
        from safetensors.torch import save_file

        def stored(v):
            v = v.detach().cpu().contiguous()
            return v.half() if half and v.dtype == torch.float32 else v

        save_file({k: stored(v) for k, v in self.state_dict().items()}, str(Path(folder) / WEIGHTS_FILE))

    def round_to_half(self) -> None:
        """Round every float32 weight to the nearest float16 value, in place (kept as float32)."""
        import torch

        with torch.no_grad():
            for tensor in self.state_dict().values():
                if tensor.dtype == torch.float32:
                    tensor.copy_(tensor.half().float())

    def stored_shapes(self, folder: Path) -> dict | None:
        """The shapes of the weights `save_weights` wrote into `folder`, by `state_dict` name, read from
        the files' headers without reading the weights (None: this kind cannot tell)."""
        return safetensors_shapes(Path(folder) / WEIGHTS_FILE)

    def load_weights(self, folder: Path) -> None:
        """Read the weights `save_weights` wrote; weights of another shape are refused, saying which."""
        from safetensors.torch import load_file

        path = Path(folder) / WEIGHTS_FILE
        try:
            state = load_file(str(path))
        except Exception as exc:
            raise WorkbenchError(f"{path} is not a readable safetensors file.",
                                 "The folder is damaged; copy it again or train the generator again.",
                                 details=repr(exc)) from exc
        load_state(self.net, state, path)

    def describe(self) -> str:
        return (f"{self.title or self.kind}: latent dimension {self.latent_dim}, {self.num_classes} classes, "
                f"{self.parameter_count() / 1e6:.2f} M parameters")


def safetensors_shapes(path: Path, prefix: str = "") -> dict:
    """{prefix + name: shape} of a safetensors file, from its header alone."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return {prefix + k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as exc:  # safetensors raises its own error types for a damaged header
        raise WorkbenchError(f"{path} is not a readable safetensors file: its header is damaged or the file is "
                             "cut short.", "The folder is damaged; copy it again or train the generator again.",
                             details=str(exc)) from exc


def load_state(module, state: dict, path: Path) -> None:
    """`module.load_state_dict(state)`, with a mismatch said in words (which names and shapes differ)."""
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    extra = [k for k in state if k not in own]
    shapes = [f"{k}: file {tuple(state[k].shape)} vs generator {tuple(own[k].shape)}"
              for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or extra or shapes:
        detail = "; ".join(filter(None, [
            "missing: " + ", ".join(missing[:6]) if missing else "",
            "unexpected: " + ", ".join(extra[:6]) if extra else "", "; ".join(shapes[:6])]))
        raise WorkbenchError(f"The weights in {path.name} do not fit the generator its folder describes.",
                             "The folder is damaged or mixes two generators; train the generator again.",
                             details=detail)
    module.load_state_dict(state, strict=True)


def check_fits(generator: Generator, dataset=None, classifier=None) -> None:
    """Refuse a generator whose images or classes do not fit a dataset or a classifier, saying which."""
    name = generator.title or generator.kind
    shape = "×".join(map(str, generator.image_shape))
    if dataset is not None:
        if tuple(dataset.image_shape) != tuple(generator.image_shape):
            raise WorkbenchError(f"The {name} generator makes images of shape {shape}, but {dataset.name} has "
                                 f"{'×'.join(map(str, dataset.image_shape))}.",
                                 "Choose a generator trained on this dataset.")
        if dataset.num_classes != generator.num_classes:
            raise WorkbenchError(f"The {name} generator has {generator.num_classes} classes, but {dataset.name} has "
                                 f"{dataset.num_classes}.", "Choose a generator trained on this dataset.")
    if classifier is not None:
        info = classifier.info
        if info.input_shape and tuple(info.input_shape) != tuple(generator.image_shape):
            raise WorkbenchError(f"The classifier {classifier.name!r} takes images of shape "
                                 f"{'×'.join(map(str, info.input_shape))}, but the {name} generator makes {shape}.",
                                 "Choose a classifier made for the generator's images.")
        if info.class_names and len(info.class_names) != generator.num_classes:
            raise WorkbenchError(f"The classifier {classifier.name!r} has {len(info.class_names)} classes, but the "
                                 f"{name} generator has {generator.num_classes}.",
                                 "Choose a classifier trained on the generator's dataset.")
