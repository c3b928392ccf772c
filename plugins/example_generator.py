"""An example generator plugin: a tiny class-conditional VAE, `tiny-cvae`.

A generator kind is one `Generator` subclass (workbench/core/generation/protocol.py): its sizes in
`presets`, its networks in `build()`, decoding in `forward_decode`, one training batch in
`train_step`. Registered here, it is trained with
`workbench train-generator --generator tiny-cvae --data fashion-mnist`, listed by
`workbench generators`, and saved, loaded and measured (latent range, seed acceptance) like the
built-in kinds.

The model: a one-hot label joins the image at the encoder's input and the latent at the decoder's,
so samples can be drawn per class from the prior N(0, I); trained on pixel-summed binary cross
entropy plus the KL divergence to the prior.
"""

from __future__ import annotations

from workbench.core.generation.protocol import Generator


class TinyCVAE(Generator):
    """A tiny class-conditional VAE: dense 128-unit encoder and decoder, 8 latent dimensions (example plugin)."""

    kind = "tiny-cvae"
    title = "Tiny conditional VAE"
    conditional = True
    presets = {"default": {"h_dim": 128, "z_dim": 8}, "small": {"h_dim": 32, "z_dim": 4}}
    training_defaults = {"epochs": 5, "batch_size": 128, "lr": 1e-3}

    @property
    def latent_dim(self) -> int:
        return int(self.config["z_dim"])

    @property
    def pixels(self) -> int:
        c, h, w = self.image_shape
        return c * h * w

    def build(self):
        from torch import nn

        h, z, k = int(self.config["h_dim"]), int(self.config["z_dim"]), self.num_classes
        return nn.ModuleDict({
            "encoder": nn.Sequential(nn.Linear(self.pixels + k, h), nn.ReLU(), nn.Linear(h, 2 * z)),
            "decoder": nn.Sequential(nn.Linear(z + k, h), nn.ReLU(), nn.Linear(h, self.pixels))})

    def one_hot(self, y):
        import torch.nn.functional as F

        return F.one_hot(y, self.num_classes).float()

    def forward_decode(self, z, y):
        import torch

        logits = self.net["decoder"](torch.cat([z, self.one_hot(y)], dim=1))
        return torch.sigmoid(logits).reshape(len(z), *self.image_shape)

    def optimisers(self, lr: float) -> dict:
        import torch

        return {"adam": torch.optim.Adam(self.net.parameters(), lr=lr)}

    def train_step(self, x, y, optimisers: dict, rng) -> dict:
        import torch
        import torch.nn.functional as F

        flat, label = x.reshape(len(x), -1), self.one_hot(y)
        mu, logvar = self.net["encoder"](torch.cat([flat, label], dim=1)).chunk(2, dim=1)
        eps = torch.randn(mu.shape, generator=rng, device=mu.device)
        logits = self.net["decoder"](torch.cat([mu + eps * torch.exp(0.5 * logvar), label], dim=1))
        bce = F.binary_cross_entropy_with_logits(logits, flat, reduction="sum") / len(x)
        kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / len(x)
        loss = bce + kl
        optimisers["adam"].zero_grad(set_to_none=True)
        loss.backward()
        optimisers["adam"].step()
        return {"loss": loss.detach(), "bce": bce.detach(), "kl": kl.detach()}


def register(registry) -> None:
    registry.add_generator("tiny-cvae", TinyCVAE)
