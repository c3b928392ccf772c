"""A small class-conditional diffusion model for square images (28×28 grey, 32×32 or 64×64 colour, any side that
its levels halve evenly), built with diffusers.

A `UNet2DModel` (at 28×28 resolutions 28→14→7, block widths 16/32/64, one ResNet layer per block, no
attention: 0.62 M parameters) with a learned class embedding added to its timestep embedding,
trained as a denoising diffusion probabilistic model (Ho, Jain and Abbeel, 2020): images scaled to
[−1, 1], a cosine noise schedule of 1,000 steps, a uniformly drawn step per image, the network
predicting the added noise under a mean-squared error, AdamW.

Sampling is deterministic DDIM (Song, Meng and Ermon, 2021) with η = 0 over `steps` steps (default
20, recorded in the config). diffusers' pipelines take no class labels, so the loop is our own:
the genome is the starting noise x_T (C·H·W values: 784 at 28×28) and the image is a function of (x_T, label,
steps) alone. See docs/methods/generation.md#the-class-conditional-diffusion-model.

Nothing is fetched from a hub: the folder's files are written with `save_pretrained` and read with
`from_pretrained(folder, local_files_only=True)`, and `HF_HUB_OFFLINE` is set before diffusers is
imported (lazily, on first use).
"""

from __future__ import annotations

import functools
import json
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
    decode_batch = 10  # a batch of 10 over 20 DDIM steps takes about half a second on two CPU cores
    presets = {
        "default": {"block_out_channels": [16, 32, 64], "norm_num_groups": 8, "layers_per_block": 1,
                    "attention": False, "num_train_timesteps": 1000, "beta_schedule": "squaredcos_cap_v2",
                    "steps": 20},
        "small": {"block_out_channels": [8, 16, 16], "norm_num_groups": 4, "layers_per_block": 1,
                  "attention": False, "num_train_timesteps": 1000, "beta_schedule": "squaredcos_cap_v2",
                  "steps": 20},
        # attention at 7×7 (the last down block, the first up block and the mid-block): 1.6 M parameters
        "attention": {"block_out_channels": [32, 64, 64], "norm_num_groups": 8, "layers_per_block": 1,
                      "attention": True, "num_train_timesteps": 1000, "beta_schedule": "squaredcos_cap_v2",
                      "steps": 20},
    }
    training_defaults = {"epochs": 10, "batch_size": 64, "lr": 1e-3}
    weight_files = (UNET_CONFIG, UNET_WEIGHTS, SCHEDULER_CONFIG)
    image_shapes = None  # square, a side its levels halve evenly: `shape_problem` and `build`

    @classmethod
    def shape_problem(cls, shape: tuple[int, int, int]) -> str | None:
        return cls.square_side_problem(shape, smallest=8)  # `build` checks the halvings of deeper UNets

    def __init__(self, num_classes: int = 10, image_shape=IMAGE_SHAPE, **config):
        self.scheduler = None
        super().__init__(num_classes, image_shape, **config)
        steps = self.config["steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= self.config["num_train_timesteps"]:
            raise WorkbenchError(f"The diffusion generator's DDIM steps must be a whole number from 1 to "
                                 f"{self.config['num_train_timesteps']}, not {steps!r}.", "Use 10 to 50 steps.")

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
                "num_class_embeds": self.num_classes}

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
        """Deterministic DDIM (η = 0) from the noise `z` with labels `y`; `(x + 1) / 2`, clamped."""
        _, _, ddim_class = diffusers_modules()
        ddim = ddim_class.from_config(self.scheduler.config)  # a fresh one per call: decoding keeps no state
        ddim.set_timesteps(int(self.config["steps"]))
        x = z.reshape(len(z), *self.image_shape)
        for t in ddim.timesteps:
            noise = self.unet(x, t.to(x.device), class_labels=y).sample
            x = ddim.step(noise, t, x, eta=0.0).prev_sample
        return (x.clamp(-1.0, 1.0) + 1.0) / 2.0

    def optimisers(self, lr: float) -> dict:
        import torch

        return {"adamw": torch.optim.AdamW(self.net.parameters(), lr=lr)}

    def train_step(self, x, y, optimisers: dict, rng) -> dict:
        import torch
        import torch.nn.functional as F

        x0 = x * 2.0 - 1.0
        noise = torch.randn(x0.shape, generator=rng, device=x0.device, dtype=x0.dtype)
        t = torch.randint(0, int(self.config["num_train_timesteps"]), (len(x0),), generator=rng, device=x0.device)
        noisy = self.scheduler.add_noise(x0, noise, t)
        loss = F.mse_loss(self.unet(noisy, t, class_labels=y).sample, noise)
        optimiser = optimisers["adamw"]
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
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
        if embeds != self.num_classes or getattr(unet, "class_embedding", None) is None:
            raise WorkbenchError(f"The diffusion model in {folder} has class embeddings for {embeds} classes, but its "
                                 f"generator.json names {self.num_classes}.",
                                 "The folder mixes two models; train the generator again.")
        expected = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.unet_config().items()}
        found = {k: (list(v) if isinstance(v, tuple) else v) for k, v in unet.config.items() if k in expected}
        if found != expected:
            differ = ", ".join(f"{k}: {found.get(k)!r} vs {v!r}" for k, v in expected.items() if found.get(k) != v)
            raise WorkbenchError(f"The UNet in {folder} is not the one its generator.json describes ({differ}).",
                                 "The folder mixes two models; train the generator again.")
        self.net = self.net.__class__({"unet": unet.to(self.device).eval()})
        self.scheduler = scheduler

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
        if differ:
            raise WorkbenchError(f"The UNet in {folder} is not the one its generator.json describes "
                                 f"({'; '.join(differ[:4])}).", "The folder mixes two models; train the generator "
                                 "again, or correct generator.json's num_classes, image_shape or config.")
