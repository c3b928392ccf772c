"""The class-conditional DCGAN of the GenAI-TIG benchmark (after Radford, Metz and Chintala, 2016).

Generator: the latent z (100) concatenated with a learned embedding of the label (10), viewed as a
110×1×1 map; `ConvT(k7,s1)–BN–ReLU` to 7×7, `ConvT(k4,s2,p1)–BN–ReLU` to 14×14, `ConvT(k4,s2,p1)–tanh`
to 28×28, no convolution biases (1.91 M parameters with widths 256 and 128). Discriminator: a learned
784-value embedding of the label as a second 28×28 plane beside the image; `Conv(k4,s2,p1)–LeakyReLU`,
`Conv(k4,s2,p1)–BN–LeakyReLU`, `Conv(k7)` to one logit (0.15 M parameters with widths 64 and 128).

Training on images in [−1, 1] with binary cross-entropy (on the discriminator's logits, the stable
form of its sigmoid) and Adam (lr 2e-4, betas 0.5/0.999), DCGAN initialisation; per batch the
discriminator learns from real and generated images, then the generator from the discriminator's
verdict on its images (the non-saturating loss). Decoding runs with batch norm in eval mode, so it
is deterministic; tanh output is mapped to [0, 1]. See docs/methods/generation.md#the-class-conditional-dcgan.
"""

from __future__ import annotations

from workbench.core.generation.protocol import Generator


class ConditionalGAN(Generator):
    kind = "gan"
    title = "cDCGAN"
    conditional = True
    decode_batch = 500
    presets = {"default": {"z_dim": 100, "embed_dim": 10, "g_channels": [256, 128], "d_channels": [64, 128]},
               "small": {"z_dim": 100, "embed_dim": 10, "g_channels": [64, 32], "d_channels": [16, 32]}}
    training_defaults = {"epochs": 15, "batch_size": 64, "lr": 2e-4}

    @property
    def latent_dim(self) -> int:
        return int(self.config["z_dim"])

    def build(self):
        from torch import nn

        z, e = int(self.config["z_dim"]), int(self.config["embed_dim"])
        g1, g2 = (int(c) for c in self.config["g_channels"])
        d1, d2 = (int(c) for c in self.config["d_channels"])
        c = self.image_shape[0]
        generator = nn.Sequential(
            nn.ConvTranspose2d(z + e, g1, 7, 1, 0, bias=False), nn.BatchNorm2d(g1), nn.ReLU(True),
            nn.ConvTranspose2d(g1, g2, 4, 2, 1, bias=False), nn.BatchNorm2d(g2), nn.ReLU(True),
            nn.ConvTranspose2d(g2, c, 4, 2, 1, bias=False), nn.Tanh())
        discriminator = nn.Sequential(
            nn.Conv2d(c + 1, d1, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True),
            nn.Conv2d(d1, d2, 4, 2, 1, bias=False), nn.BatchNorm2d(d2), nn.LeakyReLU(0.2, True),
            nn.Conv2d(d2, 1, 7, 1, 0, bias=False))  # a logit; the loss applies the sigmoid
        net = nn.ModuleDict({"g_embed": nn.Embedding(self.num_classes, e), "generator": generator,
                             "d_embed": nn.Embedding(self.num_classes, self.image_shape[1] * self.image_shape[2]),
                             "discriminator": discriminator})
        for module in net.modules():  # DCGAN initialisation
            if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.normal_(module.weight, 0.0, 0.02)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.normal_(module.weight, 1.0, 0.02)
                nn.init.zeros_(module.bias)
        return net

    def generate(self, z, y):
        """tanh images in [−1, 1] from latents and labels (training and decoding)."""
        import torch

        code = torch.cat([z, self.net["g_embed"](y)], dim=1)
        return self.net["generator"](code[:, :, None, None])

    def discriminate(self, x, y):
        """One logit per image in [−1, 1] with its label."""
        import torch

        plane = self.net["d_embed"](y).reshape(len(y), 1, *self.image_shape[1:])
        return self.net["discriminator"](torch.cat([x, plane], dim=1)).reshape(-1)

    def forward_decode(self, z, y):
        return (self.generate(z, y) + 1.0) / 2.0

    def optimisers(self, lr: float) -> dict:
        import torch

        g = [p for name in ("g_embed", "generator") for p in self.net[name].parameters()]
        d = [p for name in ("d_embed", "discriminator") for p in self.net[name].parameters()]
        return {"generator": torch.optim.Adam(g, lr=lr, betas=(0.5, 0.999)),
                "discriminator": torch.optim.Adam(d, lr=lr, betas=(0.5, 0.999))}

    def train_step(self, x, y, optimisers: dict, rng) -> dict:
        import torch
        import torch.nn.functional as F

        n, device = len(x), x.device
        real = x * 2.0 - 1.0
        z = torch.randn(n, self.latent_dim, generator=rng, device=device)
        y_fake = torch.randint(0, self.num_classes, (n,), generator=rng, device=device)
        fake = self.generate(z, y_fake)
        ones, zeros = torch.ones(n, device=device), torch.zeros(n, device=device)

        d_opt, g_opt = optimisers["discriminator"], optimisers["generator"]
        d_real = self.discriminate(real, y)
        d_fake = self.discriminate(fake.detach(), y_fake)
        d_loss = F.binary_cross_entropy_with_logits(d_real, ones) + F.binary_cross_entropy_with_logits(d_fake, zeros)
        d_opt.zero_grad(set_to_none=True)
        d_loss.backward()
        d_opt.step()

        verdict = self.discriminate(fake, y_fake)
        g_loss = F.binary_cross_entropy_with_logits(verdict, ones)  # non-saturating: G wants D to say "real"
        g_opt.zero_grad(set_to_none=True)
        g_loss.backward()
        g_opt.step()
        return {"d_loss": d_loss.detach(), "g_loss": g_loss.detach(),
                "d_real": torch.sigmoid(d_real).mean().detach(), "d_fake": torch.sigmoid(d_fake).mean().detach()}
