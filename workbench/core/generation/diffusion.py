"""A small class-conditional diffusion model for square images (28×28 grey, 32×32 or 64×64 colour, any side that
its levels halve evenly), built with diffusers.

A `UNet2DModel` (at 28×28 resolutions 28→14→7, block widths 16/32/64, one ResNet layer per block, no
attention: 0.62 M parameters) with a learned class embedding added to its timestep embedding,
trained as a denoising diffusion probabilistic model (Ho, Jain and Abbeel, 2020): images scaled to
[−1, 1], a cosine noise schedule of 1,000 steps, a uniformly drawn step per image, the network
predicting the added noise under a mean-squared error, AdamW. The weights a search uses are an
exponential moving average of the trained ones (`ema_decay`), as in DDPM.

Classifier-free guidance (Ho and Salimans, 2022): while training, a share `label_dropout` of the labels
is replaced by one more class, "no class"; sampling mixes the two predictions, ε = ε∅ + w·(ε_y − ε∅), with
w = `guidance`. Without it a small UNet's samples often look like another class (a tenth of an epoch's
worth of signal per class); w > 1 trades variety for class fidelity, which is what a search's seeds need, up to a
point: the bundled Fashion-MNIST model's seed acceptance peaks at w = 1.5 (61 % at 1, 82 % at 1.5, 74 % at 2,
50 % at 3: strong guidance pushes a small model's samples off the data).
`label_dropout` 0 trains no "no class" (then `guidance` must be 1): the models trained before guidance.

Sampling is deterministic DDIM (Song, Meng and Ermon, 2021) with η = 0 over `steps` steps (default
20, recorded in the config). diffusers' pipelines take no class labels, so the loop is our own:
the genome is the starting noise x_T (C·H·W values: 784 at 28×28) and the image is a function of (x_T, label,
steps, guidance) alone. See docs/methods/generation.md#the-class-conditional-diffusion-model.

Nothing is fetched from a hub: the folder's files are written with `save_pretrained` and read with
`from_pretrained(folder, local_files_only=True)`, and `HF_HUB_OFFLINE` is set before diffusers is
imported (lazily, on first use).
"""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.generation.protocol import IMAGE_SHAPE, Generator, safetensors_shapes

UNET_CONFIG = "config.json"
UNET_WEIGHTS = "diffusion_pytorch_model.safetensors"
SCHEDULER_CONFIG = "scheduler_config.json"
DIFFUSERS_INSTALL = "pip install 'diffusers>=0.27'"


@functools.lru_cache(maxsize=1)
def diffusers_modules():
    """(UNet2DModel, DDPMScheduler, DDIMScheduler), imported offline; a diffusers whose UNet2DModel has
    no class embeddings is refused (and asked again next time, a failure is not cached)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from diffusers import DDIMScheduler, DDPMScheduler, UNet2DModel
    except Exception as exc:  # not installed, or broken
        raise WorkbenchError(f"The diffusion generator needs diffusers, which could not be imported ({exc}).",
                             f"Install it: {DIFFUSERS_INSTALL}.") from exc
    check_class_embeddings(UNet2DModel)
    return UNet2DModel, DDPMScheduler, DDIMScheduler


def check_class_embeddings(unet_class) -> None:
    """Refuse a diffusers whose `UNet2DModel` cannot be built with class embeddings or called with labels."""
    import inspect

    import diffusers

    takes = inspect.signature(unet_class.__init__).parameters
    calls = inspect.signature(unet_class.forward).parameters
    if "num_class_embeds" not in takes or "class_labels" not in calls:
        raise WorkbenchError(f"diffusers {getattr(diffusers, '__version__', '?')} has no class embeddings for "
                             "UNet2DModel, which the class-conditional diffusion generator needs.",
                             f"Install a newer diffusers: {DIFFUSERS_INSTALL}.")


class ConditionalDiffusion(Generator):
    kind = "diffusion"
    title = "Diffusion (DDIM)"
    conditional = True
    _sampling = {"num_train_timesteps": 1000, "beta_schedule": "squaredcos_cap_v2", "steps": 20,
                 "label_dropout": 0.1, "guidance": 1.5, "ema_decay": 0.999}
    presets = {
        "default": {"block_out_channels": [16, 32, 64], "norm_num_groups": 8, "layers_per_block": 1,
                    "attention": False, **_sampling},
        "small": {"block_out_channels": [8, 16, 16], "norm_num_groups": 4, "layers_per_block": 1,
                  "attention": False, **_sampling},
        # attention at 7×7 (the last down block, the first up block and the mid-block): 1.6 M parameters
        "attention": {"block_out_channels": [32, 64, 64], "norm_num_groups": 8, "layers_per_block": 1,
                      "attention": True, **_sampling},
    }
    training_defaults = {"epochs": 10, "batch_size": 64, "lr": 1e-3}
    weight_files = (UNET_CONFIG, UNET_WEIGHTS, SCHEDULER_CONFIG)
    image_shapes = None  # square, a side its levels halve evenly: `shape_problem` and `build`

    @classmethod
    def shape_problem(cls, shape: tuple[int, int, int]) -> str | None:
        return cls.square_side_problem(shape, smallest=8)  # `build` checks the halvings of deeper UNets

    def __init__(self, num_classes: int = 10, image_shape=IMAGE_SHAPE, **config):
        self.scheduler = self._ddim = None
        super().__init__(num_classes, image_shape, **config)
        steps = self.config["steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= self.config["num_train_timesteps"]:
            raise WorkbenchError(f"The diffusion generator's DDIM steps must be a whole number from 1 to "
                                 f"{self.config['num_train_timesteps']}, not {steps!r}.", "Use 10 to 50 steps.")
        dropout, guidance, decay = (float(self.config[k]) for k in ("label_dropout", "guidance", "ema_decay"))
        if not 0.0 <= dropout < 1.0:
            raise WorkbenchError(f"The diffusion generator's label_dropout must be from 0 to below 1, not {dropout}.",
                                 "Use 0.1 (a tenth of the labels trains the \"no class\" prediction).")
        if not (math.isfinite(guidance) and guidance >= 0.0) or (dropout == 0.0 and guidance != 1.0):
            raise WorkbenchError(f"The diffusion generator's guidance {guidance} needs " + (
                "a finite number, 0 or more." if dropout else "a \"no class\" prediction, which label_dropout 0 "
                "does not train."), "Use guidance 1 (none) with label_dropout 0, or a label_dropout above 0.")
        if not 0.0 <= decay < 1.0:
            raise WorkbenchError(f"The diffusion generator's ema_decay must be from 0 to below 1, not {decay}.",
                                 "Use 0.999, or 0 to search with the trained weights themselves.")

    @property
    def decode_batch(self) -> int:
        """250 images at 28×28, fewer for larger ones: one guided DDIM step of the default UNet on 500 rows takes
        about 0.8 s on two CPU cores, and a stop is seen after each step (`between_steps`)."""
        _, height, width = self.image_shape
        return max(1, 250 * 28 * 28 // (height * width))

    def ddim(self):
        """The DDIM sampler for the configured steps (`ddim_sampler`)."""
        _, _, ddim_class = diffusers_modules()
        self._ddim = ddim_sampler(self._ddim, ddim_class, self.scheduler.config, int(self.config["steps"]))
        return self._ddim

    @property
    def unconditional(self) -> bool:
        """Whether the UNet has the "no class" embedding (index `num_classes`) that guidance needs."""
        return float(self.config["label_dropout"]) > 0.0

    @property
    def latent_dim(self) -> int:
        c, h, w = self.image_shape
        return c * h * w

    def unet_config(self) -> dict:
        levels = len(self.config["block_out_channels"])
        attention = bool(self.config["attention"])
        down = ["DownBlock2D"] * levels
        up = ["UpBlock2D"] * levels
        if attention:
            down[-1], up[0] = "AttnDownBlock2D", "AttnUpBlock2D"
        return {"sample_size": self.image_shape[1], "in_channels": self.image_shape[0],
                "out_channels": self.image_shape[0], "layers_per_block": int(self.config["layers_per_block"]),
                "block_out_channels": tuple(int(c) for c in self.config["block_out_channels"]),
                "norm_num_groups": int(self.config["norm_num_groups"]),
                "down_block_types": tuple(down), "up_block_types": tuple(up), "add_attention": attention,
                "num_class_embeds": self.num_classes + int(self.unconditional)}

    def build(self):
        from torch import nn

        unet_class, ddpm_class, _ = diffusers_modules()
        halvings = len(self.config["block_out_channels"]) - 1
        if self.image_shape[1] % 2 ** halvings:
            raise WorkbenchError(f"A UNet of {halvings + 1} levels halves the image {halvings} times, which a side of "
                                 f"{self.image_shape[1]} does not allow.", "Choose fewer block widths, or another "
                                 "image size.")
        try:
            unet = unet_class(**self.unet_config())
        except (ValueError, TypeError) as exc:  # e.g. widths that the group norm's groups do not divide
            raise WorkbenchError(f"diffusers cannot build this UNet: {exc}",
                                 "Choose block widths divisible by norm_num_groups.") from exc
        self.scheduler = ddpm_class(num_train_timesteps=int(self.config["num_train_timesteps"]),
                                    beta_schedule=str(self.config["beta_schedule"]))
        return nn.ModuleDict({"unet": unet})

    @property
    def unet(self):
        return self.net["unet"]

    def forward_decode(self, z, y):
        """Deterministic DDIM (η = 0) from the noise `z` with labels `y`, guided; `(x + 1) / 2`, clamped."""
        import torch

        ddim = self.ddim()
        x = z.reshape(len(z), *self.image_shape)
        guidance = float(self.config["guidance"])
        guided = guidance != 1.0
        if guided:  # one batch holds both predictions: the labelled and the "no class" one
            labels = torch.cat([y, torch.full_like(y, self.num_classes)])
        for t in ddim.timesteps:
            if guided:
                labelled, free = self.unet(torch.cat([x, x]), t.to(x.device), class_labels=labels).sample.chunk(2)
                noise = free + guidance * (labelled - free)
            else:
                noise = self.unet(x, t.to(x.device), class_labels=y).sample
            x = ddim.step(noise, t, x, eta=0.0).prev_sample
            self.between_steps()
        return (x.clamp(-1.0, 1.0) + 1.0) / 2.0

    def optimisers(self, lr: float) -> dict:
        """AdamW over the trained UNet and, with `ema_decay`, the average that `self.unet` (what is saved and
        searched) holds: the trained UNet starts as a copy of it and travels in the training state."""
        import torch

        decay = float(self.config["ema_decay"])
        if not decay:
            return {"adamw": torch.optim.AdamW(self.net.parameters(), lr=lr)}
        average = WeightAverage(self.unet, decay)
        return {"adamw": torch.optim.AdamW(average.trained.parameters(), lr=lr), "average": average}

    def train_step(self, x, y, optimisers: dict, rng) -> dict:
        import torch
        import torch.nn.functional as F

        average = optimisers.get("average")
        unet = average.trained if average is not None else self.unet
        x0 = x * 2.0 - 1.0
        noise = torch.randn(x0.shape, generator=rng, device=x0.device, dtype=x0.dtype)
        t = torch.randint(0, int(self.config["num_train_timesteps"]), (len(x0),), generator=rng, device=x0.device)
        if self.unconditional:  # a share of the labels becomes "no class"
            dropped = torch.rand(len(y), generator=rng, device=y.device) < float(self.config["label_dropout"])
            y = torch.where(dropped, torch.full_like(y, self.num_classes), y)
        noisy = self.scheduler.add_noise(x0, noise, t)
        loss = F.mse_loss(unet(noisy, t, class_labels=y).sample, noise)
        optimiser = optimisers["adamw"]
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        if average is not None:
            average.update()
        return {"mse": loss.detach()}

    def versions(self) -> dict:
        import diffusers

        return {"diffusers": diffusers.__version__}

    # diffusers' own files: config.json, diffusion_pytorch_model.safetensors, scheduler_config.json
    def save_weights(self, folder: Path, half: bool = False) -> None:
        if half:  # a copy: the model in use stays float32
            import copy

            import torch

            copy.deepcopy(self.unet).to(torch.float16).save_pretrained(str(folder), safe_serialization=True)
        else:
            self.unet.save_pretrained(str(folder), safe_serialization=True)
        self.scheduler.save_pretrained(str(folder))

    def stored_shapes(self, folder: Path) -> dict:
        return safetensors_shapes(Path(folder) / UNET_WEIGHTS, prefix="unet.")

    def load_weights(self, folder: Path) -> None:
        unet_class, ddpm_class, _ = diffusers_modules()
        folder = Path(folder)
        self._check_unet_file(folder)
        try:
            unet = unet_class.from_pretrained(str(folder), local_files_only=True, low_cpu_mem_usage=False)
            scheduler = ddpm_class.from_pretrained(str(folder), local_files_only=True)
        except Exception as exc:
            raise WorkbenchError(f"diffusers could not read the diffusion model in {folder}: {exc}",
                                 "The folder is damaged; copy it again or train the generator again.",
                                 details=repr(exc)) from exc
        embeds = unet.config.get("num_class_embeds")
        if embeds != self.num_classes + int(self.unconditional) or getattr(unet, "class_embedding", None) is None:
            raise WorkbenchError(f"The diffusion model in {folder} has class embeddings for {embeds} classes, but its "
                                 f"generator.json names {self.num_classes}" + (" and a \"no class\"" if
                                                                              self.unconditional else "") + ".",
                                 "The folder mixes two models; train the generator again.")
        expected = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.unet_config().items()}
        found = {k: (list(v) if isinstance(v, tuple) else v) for k, v in unet.config.items() if k in expected}
        if found != expected:
            differ = ", ".join(f"{k}: {found.get(k)!r} vs {v!r}" for k, v in expected.items() if found.get(k) != v)
            raise WorkbenchError(f"The UNet in {folder} is not the one its generator.json describes ({differ}).",
                                 "The folder mixes two models; train the generator again.")
        self.net = self.net.__class__({"unet": unet.to(self.device).eval()})
        self.scheduler, self._ddim = scheduler, None

    def _check_unet_file(self, folder: Path) -> None:
        """Refuse diffusers' config.json when the sizes it gives differ from generator.json's, before
        diffusers builds a network of those sizes (its own file sizes what `from_pretrained` allocates)."""
        path = folder / UNET_CONFIG
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise WorkbenchError(f"{path} is damaged: it is not readable JSON.",
                                 "The folder is damaged; copy it again or train the generator again.",
                                 details=str(exc)) from exc
        if not isinstance(stored, dict):
            raise WorkbenchError(f"{path} is damaged: it is not a JSON object.",
                                 "The folder is damaged; copy it again or train the generator again.")
        expected = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.unet_config().items()}
        differ = [f"{k}: {stored[k]!r} vs {v!r}" for k, v in expected.items() if k in stored and stored[k] != v]
        if differ == [f"num_class_embeds: {self.num_classes!r} vs {self.num_classes + 1!r}"]:
            raise WorkbenchError(f"The UNet in {folder} has no \"no class\" embedding: it was trained without "
                                 "classifier-free guidance, but its generator.json does not say so.",
                                 'Add "label_dropout": 0.0, "guidance": 1.0 to the config in its generator.json.')
        if differ:
            raise WorkbenchError(f"The UNet in {folder} is not the one its generator.json describes "
                                 f"({'; '.join(differ[:4])}).", "The folder mixes two models; train the generator "
                                 "again, or correct generator.json's num_classes, image_shape or config.")


def ddim_sampler(current, ddim_class, config, steps: int):
    """`current` if it is a DDIM sampler over `steps` steps, else a new one of `ddim_class` from `config`: a
    sampler is made once per step count, since its `step` keeps no state and making one costs about 50 ms, more
    than a small batch's whole decode. The caller makes `current` None when its schedule changes."""
    if current is None or current.num_inference_steps != steps:
        current = ddim_class.from_config(config)
        current.set_timesteps(steps)
    return current


class WeightAverage:
    """An exponential moving average of a trained copy of `unet`, kept in `unet` itself (what is saved and
    sampled). Its state (the trained weights and the update count) goes into the training state with the
    optimisers', so a resumed run goes on from the trained weights, not from their average. The decay
    warms up as min(decay, (1 + n) / (10 + n)) so that the first updates are not dominated by the start."""

    def __init__(self, unet, decay: float):
        import copy

        self.average, self.decay, self.updates = unet, float(decay), 0
        self.trained = copy.deepcopy(unet).train()
        self.average.requires_grad_(False)

    def update(self) -> None:
        import torch

        self.updates += 1
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        with torch.no_grad():
            for mean, value in zip(self.average.parameters(), self.trained.parameters(), strict=True):
                mean.lerp_(value, 1.0 - decay)

    def state_dict(self) -> dict:
        return {"updates": self.updates, "trained": self.trained.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.trained.load_state_dict(state["trained"])
        self.updates = int(state["updates"])
