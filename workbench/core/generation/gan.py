"""The class-conditional DCGAN of the GenAI-TIG benchmark (after Radford, Metz and Chintala, 2016), for square
images of any side divisible by 4 and any number of channels.

Generator: the latent z (100) concatenated with a learned embedding of the label (10), viewed as a
110×1×1 map; `ConvT(k s₀)–BN–ReLU` to s₀×s₀, then `ConvT(k4,s2,p1)–BN–ReLU` doublings and a last
`ConvT(k4,s2,p1)–tanh` to the image, no convolution biases. At 28×28 (s₀ = 7, two doublings, widths 256 and
128: 1.91 M parameters) this is the benchmark's MNIST design exactly; at 32×32 and 64×64 (s₀ = 4, three or four
doublings) it is its SVHN/CIFAR-10 layout, each extra stage twice as wide as the one after it.
Discriminator: a learned H·W-value embedding of the label as one more plane beside the image;
`Conv(k4,s2,p1)–LeakyReLU`, then `Conv(k4,s2,p1)–BN–LeakyReLU` halvings, and `Conv(k s₀)` to one logit
(0.15 M parameters at 28×28 with widths 64 and 128).

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

    image_shapes = None  # square, a side divisible by 4: `shape_problem`

    @classmethod
    def shape_problem(cls, shape: tuple[int, int, int]) -> str | None:
        return cls.square_side_problem(shape, smallest=16)  # s₀ ≥ 4 after two doublings

    @property
    def latent_dim(self) -> int:
        return int(self.config["z_dim"])

    def stages(self) -> tuple[int, int]:
        """(s₀, doublings): the side the first layer makes from 1×1, and how many ×2 steps reach the image —
        28 = 7·2², 32 = 4·2³, 64 = 4·2⁴ (as many doublings as keep s₀ at least 4)."""
        side, doublings = self.image_shape[1], 2
        while side % 2 ** (doublings + 1) == 0 and side // 2 ** (doublings + 1) >= 4:
            doublings += 1
        return side // 2 ** doublings, doublings

    def build(self):
        from torch import nn

        z, e = int(self.config["z_dim"]), int(self.config["embed_dim"])
        g1, g2 = (int(c) for c in self.config["g_channels"])
        d1, d2 = (int(c) for c in self.config["d_channels"])
        c = self.image_shape[0]
        start, doublings = self.stages()
        widths = [g1 * 2 ** k for k in range(doublings - 2, 0, -1)] + [g1, g2]  # [g1, g2] at two doublings
        layers = [nn.ConvTranspose2d(z + e, widths[0], start, 1, 0, bias=False), nn.BatchNorm2d(widths[0]),
                  nn.ReLU(True)]
        for wide, narrow in zip(widths, widths[1:]):
            layers += [nn.ConvTranspose2d(wide, narrow, 4, 2, 1, bias=False), nn.BatchNorm2d(narrow), nn.ReLU(True)]
        generator = nn.Sequential(*layers, nn.ConvTranspose2d(widths[-1], c, 4, 2, 1, bias=False), nn.Tanh())
        critics = [d1, d2] + [d2 * 2 ** k for k in range(1, doublings - 1)]
        layers = [nn.Conv2d(c + 1, critics[0], 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True)]
        for narrow, wide in zip(critics, critics[1:]):
            layers += [nn.Conv2d(narrow, wide, 4, 2, 1, bias=False), nn.BatchNorm2d(wide), nn.LeakyReLU(0.2, True)]
        discriminator = nn.Sequential(*layers, nn.Conv2d(critics[-1], 1, start, 1, 0, bias=False))  # a logit
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
