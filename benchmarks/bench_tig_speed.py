"""The latent search against the original scripts' way of running it, on the same seeds and random streams.

For each bundled Fashion-MNIST generator and the bundled LeNet-5, in one process:

  (a) **the original's way** — one seed at a time, as the GenAI-TIG benchmark's scripts ran it: each
      generation decodes the seed's 25 individuals and classifies them with autograd recording (their
      `torch.no_grad()` was a bare statement, which does nothing), classifies them a second time (the
      cDCGAN scripts did), computes each individual's margin on its own, sorts in Python and builds
      each child in a Python loop — but with the workbench's own random draws, so that both ways must
      give the same results;
  (b) **the workbench's way** — `tig.search`: every still-searching seed's population decoded and
      classified as one batch in `inference_mode`, margins and selection vectorised;
  (c) **the floor** — decoding and classifying as many individuals as (b) evaluated, in batches of
      2,500, in inference mode: what the device can do with that many;
  (d) **the search's floor** — the same, generation by generation: each generation's individuals (25 per
      seed still searching) decoded in the generator's `decode_batch` pieces and classified. A generation
      cannot start before the one it breeds from is judged, so a search of few seeds decodes small batches
      whatever its code does: (d) is what the search cannot go below, and b/d is what its own work adds.

Printed: seconds for each, a/b (the speed-up), b/c and b/d (the search over each floor), and how
many seeds gave identical results both ways (generations, found, best genome bit for bit). The
diffusion model is timed at 10 and 20 DDIM steps on fewer seeds and a shorter budget (`--diffusion-…`),
as its decoding dominates everything else.

The colour kinds (`*-colour`) run on colour Fashion-MNIST (3×32×32, `colour_fashion.py`) against a
`cifar-convnet` trained on it; the benchmark makes the set (`--colour-train` images), the classifier and
each generator (`--colour-epochs`, batches of 32) in `benchmarks/tig-speed/` the first time and reuses them
after. They
are trained only as far as a timing needs: what is measured is the search against its own floor.
`stable-diffusion-tiny` is a tiny random Stable Diffusion pipeline (the tests' own, resolution 16, resized
to 32) added with `add-generator diffusers`: a speed row only, as its images mean nothing.

Run: `python benchmarks/bench_tig_speed.py [--seeds 100] [--budget 250] [--kinds …] [--device auto]`.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from workbench.core.data.registry import load_dataset  # noqa: E402
from workbench.core.execution.jobs import JobContext  # noqa: E402
from workbench.core.generation.assessment import decode_in_batches  # noqa: E402
from workbench.core.generation.storage import load_generator  # noqa: E402
from workbench.core.generation.tig import ELITE, POPULATION, draw_seeds, extent_of, search  # noqa: E402
from workbench.core.models.model_io import load_model  # noqa: E402


def original_search(generator, classifier, seeds, s: int, low: float, high: float, e: float, budget: int,
                    run_seed: int, device) -> tuple:
    """One seed, the original scripts' way (see the module docstring); returns (generations, found, genome)."""
    stream = torch.Generator().manual_seed(run_seed * 1_000_003 + s)
    d = seeds.genomes.shape[1]
    z0 = torch.from_numpy(seeds.genomes[s])
    y = int(seeds.labels[s])
    labels = torch.full((POPULATION,), y, dtype=torch.long, device=device)
    p0 = 2 * e
    population = (z0 + p0 * torch.randn(POPULATION, d, generator=stream)).clamp(low, high)
    prev = best = float("inf")
    sigma, best_genome = e, None
    module = classifier.module
    for g in range(1, budget + 1):
        torch.no_grad()  # the original's bare statement: it does nothing, so autograd records on
        images = generator.forward_decode(population.to(device), labels if generator.conditional else None)
        images = images.float().clamp(0.0, 1.0)
        logits = module(images)
        module(images)  # the cDCGAN scripts classified every population twice
        margins = []
        for i in range(POPULATION):  # one individual at a time
            row = logits[i]
            others = torch.cat([row[:y], row[y + 1:]])
            margins.append(float(row[y] - others.max()))
        order = sorted(range(POPULATION), key=lambda i: margins[i])
        low_m = margins[order[0]]
        if low_m < best:
            best, best_genome = low_m, population[order[0]].clone()
        if low_m < 0:
            return g, True, best_genome.numpy()
        if g == budget:
            return g, False, best_genome.numpy()
        elite = [population[i] for i in order[:ELITE]]
        sigma = 2 * sigma if low_m == prev else p0
        count = POPULATION - ELITE
        first = torch.randint(0, ELITE, (count,), generator=stream)
        other = torch.randint(1, ELITE, (count,), generator=stream)
        cuts = torch.randint(0, d, (count,), generator=stream)
        noise = torch.randn(count, d, generator=stream)
        children = []
        for c in range(count):
            a, b = elite[int(first[c])], elite[(int(first[c]) + int(other[c])) % ELITE]
            k = int(cuts[c])
            children.append(torch.cat([a[:k], b[k:]]) + sigma * noise[c])
        population = torch.stack(elite + children).clamp(low, high)
        prev = low_m
    return budget, False, best_genome.numpy()


def floor(generator, classifier, seeds, count: int, device) -> float:
    """Decode and classify `count` individuals in batches of 2,500, in inference mode."""
    z = torch.from_numpy(np.repeat(seeds.genomes[:1], 2500, axis=0))
    y = torch.full((2500,), int(seeds.labels[0]), dtype=torch.long)
    started = time.perf_counter()
    done = 0
    with torch.inference_mode():
        while done < count:
            n = min(2500, count - done)
            images = generator.decode(z[:n], y[:n] if generator.conditional else None)
            classifier.module(images.to(device))
            done += n
    return time.perf_counter() - started


def floor_by_generation(generator, classifier, seeds, results, device) -> float:
    """Decode and classify, generation by generation, as many individuals as the search had searching in each
    (25 per seed still searching), in the generator's `decode_batch` pieces: the search's own floor, as a
    generation cannot start before the one it breeds from has been judged."""
    sizes = [POPULATION * sum(1 for r in results if r.generations >= g)
             for g in range(1, max((r.generations for r in results), default=0) + 1)]
    z = torch.from_numpy(np.repeat(seeds.genomes[:1], max(sizes, default=1), axis=0))
    y = torch.full((len(z),), int(seeds.labels[0]), dtype=torch.long)
    ctx = JobContext(str(device)).quiet()
    started = time.perf_counter()
    with torch.inference_mode():
        for n in sizes:
            images = decode_in_batches(ctx, generator, z[:n], y[:n] if generator.conditional else None)
            classifier.module(images.to(device))
    return time.perf_counter() - started


def compare(name: str, generator, classifier, images, n_seeds: int, budget: int, device, label: str = "") -> None:
    ctx = JobContext(str(device))
    card = generator.card
    e = extent_of(card.latent_range, "high")
    low, high = float(card.latent_range["low"]), float(card.latent_range["high"])
    seeds = draw_seeds(ctx, generator, classifier, n_seeds, 0, images)
    kept = [int(s) for s in np.flatnonzero(seeds.kept)]
    started = time.perf_counter()
    ours = search(ctx, generator, classifier, seeds, low, high, e, budget, seed=0, which=kept)
    ours_s = time.perf_counter() - started
    evaluated = sum(r.generations for r in ours) * POPULATION
    started = time.perf_counter()
    theirs = [original_search(generator, classifier, seeds, s, low, high, e, budget, 0, device) for s in kept]
    theirs_s = time.perf_counter() - started
    same = sum(1 for r, (g, f, genome) in zip(ours, theirs)
               if r.generations == g and r.found == f and np.array_equal(r.best_genome, genome))
    floor_s = floor(generator, classifier, seeds, evaluated, device)
    own_s = floor_by_generation(generator, classifier, seeds, ours, device)
    print(f"| {name}{label} | {len(kept)} | {budget} | {sum(r.found for r in ours)} | {evaluated:,} | "
          f"{theirs_s:.1f} | {ours_s:.2f} | {floor_s:.2f} | {own_s:.2f} | {theirs_s / ours_s:.1f}× | "
          f"{ours_s / floor_s:.2f} | {ours_s / own_s:.2f} | {same} / {len(kept)} |", flush=True)


WORK = Path(__file__).resolve().parent / "tig-speed"


def colour_setup(args, device):
    """(dataset, classifier, {kind: generator folder}) for the colour rows, made once in `WORK`."""
    from colour_fashion import make

    from workbench.core.generation.training import train_generator
    from workbench.core.models.training import train_and_save

    data = WORK / f"colour-fashion-mnist-{args.colour_train}.npz"
    if not data.is_file():
        make(data, train=args.colour_train, test=1000)
    dataset = load_dataset(str(data))
    model = WORK / f"cifar-convnet-colour-{args.colour_train}.pt"
    ctx = JobContext("cpu")
    if not model.is_file():
        train_and_save(ctx.quiet(), "cifar-convnet", dataset, model, "cifar-convnet-colour", epochs=3)
    folders = {}
    for kind in ("conv-vae", "gan", "diffusion"):
        out = WORK / f"{kind}-colour-{args.colour_train}-{args.colour_epochs}"
        if not (out / "generator.json").is_file():
            train_generator(JobContext(str(device)).quiet(), kind, dataset, out, epochs=args.colour_epochs,
                            batch_size=32, latent_samples=1000)
        folders[kind] = out
    return dataset, load_model(str(model)), folders


def tiny_stable_diffusion(dataset, device):
    """The tests' tiny random pipeline, added for `dataset` as a user would (`add-generator diffusers`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tiny_pipelines import tiny_pipeline

    from workbench.core.generation.pipeline_import import add_diffusers_generator

    out = WORK / "stable-diffusion-tiny"
    if not (out / "generator.json").is_file():
        pipeline = WORK / "tiny-pipeline" / "pipeline"
        if not pipeline.is_dir():
            tiny_pipeline(WORK / "tiny-pipeline")
        add_diffusers_generator(JobContext("cpu").quiet(), pipeline, out, dataset)
    return load_generator(out, device=device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--budget", type=int, default=250)
    parser.add_argument("--diffusion-seeds", type=int, default=4)
    parser.add_argument("--diffusion-budget", type=int, default=10)
    parser.add_argument("--kinds", default="vae,gan,diffusion,conv-vae-colour,gan-colour,diffusion-colour,"
                                           "stable-diffusion-tiny")
    parser.add_argument("--colour-train", type=int, default=6000, help="colour training images (default 6000)")
    parser.add_argument("--colour-epochs", type=int, default=3, help="epochs of the colour generators (default 3)")
    parser.add_argument("--sd-seeds", type=int, default=40,
                        help="seeds drawn for the tiny pipeline (default 40: its random images keep about a tenth)")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    # the original's float() of a tensor that records gradients: warned about once per margin
    warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad")
    ctx = JobContext(args.device)
    device = ctx.device
    kinds = args.kinds.split(",")
    print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} threads")
    print("| generator | seeds kept | budget | found | individuals | original's way (s) | workbench (s) | floor (s) | "
          "search's floor (s) | speed-up | workbench / floor | workbench / search's floor | identical |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    grey = [k for k in kinds if not k.endswith("-colour") and not k.startswith("stable-diffusion")]
    if grey:
        classifier = load_model("lenet5-fashion")
        classifier.module.to(device)
        images = load_dataset("fashion-mnist").split("test")
        for kind in grey:
            generator = load_generator(f"{kind}-fashion-mnist", device=device)
            if kind == "diffusion":
                for steps in (10, 20):
                    generator.config["steps"] = steps
                    compare(f"{kind}-fashion-mnist", generator, classifier, images, args.diffusion_seeds,
                            args.diffusion_budget, device, f" ({steps} DDIM steps)")
            else:
                compare(f"{kind}-fashion-mnist", generator, classifier, images, args.seeds, args.budget, device)
    colour = [k for k in kinds if k not in grey]
    if colour:
        dataset, classifier, folders = colour_setup(args, device)
        classifier.module.to(device)
        images = dataset.split("test")
        for kind in colour:
            if kind == "stable-diffusion-tiny":
                generator = tiny_stable_diffusion(dataset, device)
            else:
                generator = load_generator(folders[kind.removesuffix("-colour")], device=device)
            slow = kind.startswith(("diffusion", "stable-diffusion"))
            seeds = args.sd_seeds if kind == "stable-diffusion-tiny" else args.diffusion_seeds if slow else args.seeds
            compare(kind, generator, classifier, images, seeds, args.diffusion_budget if slow else args.budget, device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
