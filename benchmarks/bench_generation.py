"""Generator speed: a training step against its floor, decoding throughput, and DDIM's step count.

For each built-in generator at its default sizes (the VAE 784–1600–400, the cDCGAN, the diffusion
UNet 16/32/64), in one process and on the same batches:
  (a) the floor: one forward and one backward pass through every network the step trains, with a
      plain loss (no optimiser, no sampling, no second discriminator pass);
  (b) `train_step`: the real step (losses, reparameterisation or noise, optimiser update);
and the ratio b/a, with the epoch over Fashion-MNIST's 60,000 images that b implies. Then decoding
in `inference_mode`: images per second for batches of 25 (one search generation of one seed) and of
2,500 (100 seeds × 25 individuals, the batched search), the diffusion model at 10 and 20 DDIM steps.
Each timing is the best of `--rounds` rounds. Untrained networks: speed does not depend on the weights.

Run: `python benchmarks/bench_generation.py [--rounds 3] [--device auto]` (about three minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from workbench.core.execution.jobs import resolve_device  # noqa: E402
from workbench.core.generation.registry import create_generator  # noqa: E402

STEPS = 5  # training steps per timing
BATCH = {"vae": 128, "gan": 64, "diffusion": 64}
EPOCH_IMAGES = 60_000


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return min(times)


def floor_step(kind: str, generator, x: torch.Tensor, y: torch.Tensor) -> None:
    """A forward and a backward pass through every network the step trains, with a plain loss."""
    net = generator.net
    if kind == "vae":
        mu, _ = generator.posterior(x)
        net["decoder"](mu).square().mean().backward()
    elif kind == "gan":
        z = generator.sample_latent(len(x)).to(x.device)
        fake = generator.forward_decode(z, y)
        (generator.discriminate(fake, y).mean() + generator.discriminate(x, y).mean()).backward()
    else:
        t = torch.randint(0, 1000, (len(x),), device=x.device)
        generator.unet(x * 2 - 1, t, class_labels=y).sample.square().mean().backward()
    net.zero_grad(set_to_none=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = resolve_device(args.device)
    print(f"Generators at default sizes on {device} (torch threads {torch.get_num_threads()}); best of "
          f"{args.rounds} rounds.")
    print(f"{'generator':<10} {'params':>8} {'floor ms':>9} {'step ms':>8} {'ratio':>6} {'epoch (60k)':>12}   "
          f"decode images/s: batch 25, batch 2,500")
    for kind in ("vae", "gan", "diffusion"):
        torch.manual_seed(0)
        generator = create_generator(kind, 10)
        generator.to(device)
        batch = BATCH[kind]
        x = torch.rand(batch, 1, 28, 28, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        optimisers = generator.optimisers(1e-4)
        rng = torch.Generator(device=device).manual_seed(0)
        generator.net.train()
        floor = best(lambda: [floor_step(kind, generator, x, y) for _ in range(STEPS)], args.rounds) / STEPS
        step = best(lambda: [generator.train_step(x, y, optimisers, rng) for _ in range(STEPS)], args.rounds) / STEPS
        generator.net.eval()
        epoch = step * EPOCH_IMAGES / batch
        steps_list = (10, 20) if kind == "diffusion" else (None,)
        for ddim in steps_list:
            if ddim is not None:
                generator.config["steps"] = ddim
            rates = []
            for n in (25, 2500):
                if kind == "diffusion" and n == 2500:
                    n = 250  # 2,500 at 20 steps takes minutes on a CPU: timed on 250, the rate holds
                z = generator.sample_latent(n).to(device)
                labels = torch.arange(n, device=device) % 10
                rounds = args.rounds if n <= 250 else max(1, args.rounds - 1)
                seconds = best(lambda: generator.decode(z, labels if generator.conditional else None), rounds)
                rates.append(f"{n / seconds:,.0f}" + (f" (of {n})" if n not in (25, 2500) else ""))
            name = kind if ddim is None else f"{kind} {ddim}"
            print(f"{name:<10} {generator.parameter_count() / 1e6:>7.2f}M {1000 * floor:>9.1f} {1000 * step:>8.1f} "
                  f"{step / floor:>6.2f} {epoch / 60:>9.1f} min   {rates[0]}, {rates[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
