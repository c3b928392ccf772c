"""The convolutional variational autoencoder for colour images (the GenAI-TIG benchmark uses one for SVHN and
CIFAR-10, where a dense VAE blurs everything; its sizes: a hidden layer of 4,000 and a latent of 1,024).

Encoder: three `Conv(k4,s2,p1)–ReLU` halvings (widths 32, 64, 128 by default) to an H/8 × W/8 map, then
`Linear(→h)–ReLU–Linear(h→2z)`, split into the posterior mean µ and log-variance log σ². Decoder: the mirror,
`Linear(z→h)–ReLU–Linear(h→map)–ReLU`, three `ConvT(k4,s2,p1)` doublings with ReLUs between them, ending in
per-pixel logits. Trained like the dense VAE (`vae.py`): pixel-summed binary cross-entropy plus the KL
divergence to N(0, I), Adam. The benchmark also anneals the KL weight from 0 over its 2,650 epochs; here the
weight is 1 from the first epoch, as the dense VAE's, so that a card's losses mean the same for both kinds and a
resumed run continues the same objective. It is not class-conditional: a seed is a real test image, encoded to
its µ, and keeps that image's label. See docs/methods/generation.md#the-convolutional-vae.
"""

from __future__ import annotations

from workbench.core.errors import WorkbenchError
from workbench.core.generation.vae import VAE


class ConvVAE(VAE):
    kind = "conv-vae"
    title = "Conv VAE"
    image_shapes = None  # sides divisible by 8: `shape_problem`
    presets = {"default": {"h_dim": 4000, "z_dim": 1024, "channels": [32, 64, 128]},
               "small": {"h_dim": 256, "z_dim": 32, "channels": [16, 32, 64]}}
    options = {}  # the Bernoulli decoder only
    training_defaults = {"epochs": 30, "batch_size": 128, "lr": 2e-4}

    @classmethod
    def shape_problem(cls, shape: tuple[int, int, int]) -> str | None:
        _, height, width = shape
        if height % 8 or width % 8:
            return "halves its images three times, so it makes images whose sides are divisible by 8 (32×32, " \
                   "64×64, …)"
        return None

    def build(self):
        from torch import nn

        c, height, width = self.image_shape
        h, z = int(self.config["h_dim"]), int(self.config["z_dim"])
        widths = list(self.config["channels"])
        if len(widths) != 3 or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths):
            raise WorkbenchError(f"The Conv VAE's channels must be three positive whole numbers, one per halving, "
                                 f"not {widths!r}.", "Use e.g. [32, 64, 128] (the default).")
        grid = (widths[-1], height // 8, width // 8)
        flat = grid[0] * grid[1] * grid[2]
        encoder, before = [], c
        for wide in widths:
            encoder += [nn.Conv2d(before, wide, 4, 2, 1), nn.ReLU()]
            before = wide
        encoder = nn.Sequential(*encoder, nn.Flatten(), nn.Linear(flat, h), nn.ReLU(), nn.Linear(h, 2 * z))
        decoder = [nn.Linear(z, h), nn.ReLU(), nn.Linear(h, flat), nn.ReLU(), nn.Unflatten(1, grid)]
        for wide, narrow in zip(widths[::-1], widths[::-1][1:]):
            decoder += [nn.ConvTranspose2d(wide, narrow, 4, 2, 1), nn.ReLU()]
        # logits, flattened: decoding applies the sigmoid, training the stable BCE on logits (as the dense VAE)
        decoder = nn.Sequential(*decoder, nn.ConvTranspose2d(widths[0], c, 4, 2, 1), nn.Flatten())
        return nn.ModuleDict({"encoder": encoder, "decoder": decoder})

    def posterior(self, x):
        """(µ, log σ²) of images `x` (flat or shaped)."""
        mu, logvar = self.net["encoder"](x.reshape(len(x), *self.image_shape)).chunk(2, dim=1)
        return mu, logvar
