"""The dense variational autoencoder of SINVAD (Kang, Feldt and Yoo, 2020) and the GenAI-TIG benchmark.

Encoder `Linear(784→h)–ReLU–Linear(h→2z)`, split into the posterior mean µ and log-variance
log σ²; decoder `Linear(z→h)–ReLU–Linear(h→784)–sigmoid`. Trained on pixel-summed binary cross
entropy plus the KL divergence to N(0, I) with Adam. With h = 1600 and z = 400 (the default, on
which the benchmark's mutation extents were calibrated) it has 4.43 M parameters; the `small`
preset (h 512, z 32) has 0.85 M. It is not class-conditional: a seed is a real test image,
encoded to its µ, and keeps that image's label. See docs/methods/generation.md#the-vae.

The `validator` preset (h 400, z 200) is the dense VAE of the validity proxies (Riccio and Tonella,
2023). With `decoder="gaussian"` the decoder gives each pixel a mean µ̂ (a sigmoid) and a log-variance
log σ̂², bounded to [LOGVAR_LOW, LOGVAR_HIGH] so that the likelihood of the constant background
pixels cannot grow without bound; it is trained on the Gaussian negative log-likelihood plus the KL
term, decodes to µ̂, and is what the DAIV-style reconstruction probability reads
(docs/methods/validity.md).
"""

from __future__ import annotations

import math

from workbench.core.errors import WorkbenchError
from workbench.core.generation.protocol import Generator

DECODERS = ("bernoulli", "gaussian")
#: bounds of the Gaussian decoder's per-pixel log-variance (σ̂ from about 0.01 to 1)
LOGVAR_LOW, LOGVAR_HIGH = -9.0, 0.0
LOG_2PI = math.log(2 * math.pi)


class VAE(Generator):
    kind = "vae"
    title = "VAE"
    conditional = False
    can_encode = True
    image_shapes = None  # dense: any image size
    decode_batch = 1000
    presets = {"default": {"h_dim": 1600, "z_dim": 400}, "small": {"h_dim": 512, "z_dim": 32},
               "validator": {"h_dim": 400, "z_dim": 200}}
    options = {"decoder": "bernoulli"}
    training_defaults = {"epochs": 30, "batch_size": 128, "lr": 2e-4}

    @property
    def pixels(self) -> int:
        c, h, w = self.image_shape
        return c * h * w

    @property
    def latent_dim(self) -> int:
        return int(self.config["z_dim"])

    @property
    def gaussian(self) -> bool:
        return self.config.get("decoder", "bernoulli") == "gaussian"

    def build(self):
        from collections import OrderedDict

        from torch import nn

        if self.config.get("decoder", "bernoulli") not in DECODERS:
            raise WorkbenchError(f"The VAE's decoder must be one of {', '.join(DECODERS)}, not "
                                 f"{self.config.get('decoder')!r}.", "Use bernoulli (the default) or gaussian.")
        h, z = int(self.config["h_dim"]), int(self.config["z_dim"])
        encoder = nn.Sequential(OrderedDict([("fc1", nn.Linear(self.pixels, h)), ("relu1", nn.ReLU()),
                                             ("fc2", nn.Linear(h, 2 * z))]))
        # the decoder ends in logits: decode applies the sigmoid, training the numerically stable BCE on logits
        decoder = nn.Sequential(OrderedDict([("fc3", nn.Linear(z, h)), ("relu3", nn.ReLU()),
                                             ("fc4", nn.Linear(h, self.pixels * (2 if self.gaussian else 1)))]))
        return nn.ModuleDict({"encoder": encoder, "decoder": decoder})

    def posterior(self, x):
        """(µ, log σ²) of images `x`."""
        mu, logvar = self.net["encoder"](x.reshape(len(x), -1)).chunk(2, dim=1)
        return mu, logvar

    def forward_encode(self, x):
        return self.posterior(x)[0]

    def likelihood(self, z):
        """The decoder's per-pixel parameters for latents `z`: Bernoulli logits `(N, pixels)`, or for the
        Gaussian decoder the means µ̂ and bounded log-variances log σ̂², each `(N, pixels)`."""
        import torch

        out = self.net["decoder"](z)
        if not self.gaussian:
            return out
        raw_mean, raw_logvar = out.chunk(2, dim=1)
        return torch.sigmoid(raw_mean), LOGVAR_LOW + (LOGVAR_HIGH - LOGVAR_LOW) * torch.sigmoid(raw_logvar)

    def forward_decode(self, z, y):
        import torch

        params = self.likelihood(z)
        mean = params[0] if self.gaussian else torch.sigmoid(params)
        return mean.reshape(len(z), *self.image_shape)

    def optimisers(self, lr: float) -> dict:
        import torch

        return {"adam": torch.optim.Adam(self.net.parameters(), lr=lr)}

    def train_step(self, x, y, optimisers: dict, rng) -> dict:
        import torch
        import torch.nn.functional as F

        flat = x.reshape(len(x), -1)
        mu, logvar = self.posterior(flat)
        eps = torch.randn(mu.shape, generator=rng, device=mu.device, dtype=mu.dtype)
        params = self.likelihood(mu + eps * torch.exp(0.5 * logvar))
        if self.gaussian:
            mean, pixel_logvar = params
            reconstruction = 0.5 * torch.sum(LOG_2PI + pixel_logvar + (flat - mean).pow(2) / pixel_logvar.exp()) / len(x)
            name = "nll"
        else:
            reconstruction = F.binary_cross_entropy_with_logits(params, flat, reduction="sum") / len(x)
            name = "bce"
        kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / len(x)
        loss = reconstruction + kl
        optimiser = optimisers["adam"]
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        return {"loss": loss.detach(), name: reconstruction.detach(), "kl": kl.detach()}
