"""The benchmark's loop, traced exactly: the search against a plain per-individual transcription of the
loop (the same random draws, in the same order), and small cases worked by hand (a stall doubles the
step from p₀ = 2e, a first generation that misbehaves stops at generation 1)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.execution.jobs import JobContext
from workbench.core.generation.protocol import Generator
from workbench.core.generation.tig import ELITE, POPULATION, Seeds, search

D = 4


class Identity(Generator):
    """A 'generator' whose image is its genome: (1, 1, D) pixels, so every margin can be worked out."""

    kind, title, conditional, image_shapes = "identity", "identity", False, None

    @property
    def latent_dim(self) -> int:
        return D

    def build(self):
        return nn.ModuleDict()

    def forward_decode(self, z, y):
        return z.reshape(len(z), 1, 1, D)

    def optimisers(self, lr):
        return {}

    def train_step(self, x, y, optimisers, rng):
        return {}


def linear_classifier(weights, bias) -> SimpleNamespace:
    """Two classes: logits (w·x + b, 0), so the margin for class 0 is w·x + b."""
    layer = nn.Linear(D, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([list(weights), [0.0] * D]))
        layer.bias.copy_(torch.tensor([bias, 0.0]))
    return SimpleNamespace(module=nn.Sequential(nn.Flatten(), layer), name="linear")


def one_seed(genome) -> Seeds:
    g = np.asarray([genome], dtype=np.float32)
    return Seeds(g, np.array([0]), g.reshape(1, 1, 1, D), np.array([0]), np.array([-1]))


def reference_loop(genome, weights, bias, low, high, e, budget, stream):
    """The benchmark's loop as its pseudo-code reads, one individual at a time."""
    w = torch.tensor(weights, dtype=torch.float32)
    z0 = torch.tensor(genome, dtype=torch.float32)
    p0 = 2 * e

    def fitness(z):  # the margin of class 0 against class 1 (whose logit is 0)
        return float((w * z).sum() + bias)

    noise = torch.randn(POPULATION, D, generator=stream)
    population = [(z0 + p0 * noise[i]).clamp(low, high) for i in range(POPULATION)]
    prev = best = float("inf")
    sigma, trace, steps = e, [], []
    for g in range(1, budget + 1):
        m = [fitness(z) for z in population]
        low_m = min(m)
        if low_m < best:
            best = low_m
        trace.append(best)
        order = sorted(range(POPULATION), key=lambda i: m[i])  # stable, as argsort(stable=True)
        elite = [population[i] for i in order[:ELITE]]
        if low_m < 0:
            return trace, steps, True, g
        if g == budget:
            return trace, steps, False, g
        sigma = 2 * sigma if low_m == prev else p0
        steps.append(sigma)
        count = POPULATION - ELITE
        first = torch.randint(0, ELITE, (count,), generator=stream)
        other = torch.randint(1, ELITE, (count,), generator=stream)
        cuts = torch.randint(0, D, (count,), generator=stream)
        mutation = torch.randn(count, D, generator=stream)
        children = []
        for c in range(count):
            a, b = elite[int(first[c])], elite[(int(first[c]) + int(other[c])) % ELITE]
            k = int(cuts[c])
            child = torch.cat([a[:k], b[k:]]) + sigma * mutation[c]
            children.append(child)
        population = [z.clamp(low, high) for z in elite + children]
        prev = low_m


@pytest.mark.parametrize("weights,bias,genome", [
    ((1.0, -0.5, 0.25, 0.0), -0.2, (0.5, 0.4, 0.3, 0.2)),  # crosses 0 after a few dozen generations
    ((0.3, 0.3, 0.3, 0.3), 0.05, (0.1, 0.1, 0.1, 0.1)),  # pushed to the clamp bound, never found
])
def test_the_search_follows_the_loop_of_the_benchmark_exactly(weights, bias, genome):
    e, budget, run_seed = 0.02, 60, 7
    results = search(JobContext("cpu"), Identity(num_classes=2, image_shape=(1, 1, D)), linear_classifier(weights, bias),
                     one_seed(genome), 0.0, 1.0, e, budget, seed=run_seed, which=[0])
    stream = torch.Generator().manual_seed(run_seed * 1_000_003 + 0)  # the seed's own stream
    trace, steps, found, generations = reference_loop(genome, weights, bias, 0.0, 1.0, e, budget, stream)
    (r,) = results
    assert (r.found, r.generations) == (found, generations)
    assert r.fitness == pytest.approx(trace, abs=1e-6) and r.steps == pytest.approx(steps)
    assert r.best_margin == pytest.approx(trace[-1], abs=1e-6)


def test_a_stall_doubles_the_step_from_p0_and_the_search_uses_its_whole_budget():
    e = 0.01
    # logits (0·x + 1, 0): every individual has margin 1, so every generation after the first stalls
    (r,) = search(JobContext("cpu"), Identity(num_classes=2, image_shape=(1, 1, D)),
                  linear_classifier((0.0,) * D, 1.0), one_seed((0.5,) * D), 0.0, 1.0, e, budget=6, seed=0, which=[0])
    assert r.fitness == [1.0] * 6 and not r.found and r.generations == 6
    # generation 1: prev = +inf, so σ = p₀ = 2e; then each stall doubles it; the last generation makes no children
    assert r.steps == pytest.approx([0.02, 0.04, 0.08, 0.16, 0.32])


def test_a_first_generation_that_misbehaves_stops_at_generation_1():
    # margin = x₀ − 0.5 at a seed x₀ = 0.5 + 1e-4: the first perturbation (p₀ = 0.2) pushes some individual below
    (r,) = search(JobContext("cpu"), Identity(num_classes=2, image_shape=(1, 1, D)),
                  linear_classifier((1.0, 0.0, 0.0, 0.0), -0.5), one_seed((0.5001, 0.5, 0.5, 0.5)), 0.0, 1.0, 0.1,
                  budget=250, seed=0, which=[0])
    assert r.found and r.generations == 1 and r.steps == [] and len(r.fitness) == 1
    assert r.best_margin < 0 and r.predicted == 1
    assert r.best_genome[0] == pytest.approx(r.best_margin + 0.5, abs=1e-6)  # the image is its genome


class Constant(nn.Module):
    """A classifier of 10 classes that always gives the same scores."""

    def __init__(self, scores):
        super().__init__()
        self.register_buffer("scores", torch.tensor(scores, dtype=torch.float32))

    def forward(self, x):
        return self.scores.expand(len(x), -1).clone()


def constant_classifier(scores) -> SimpleNamespace:
    return SimpleNamespace(module=Constant(scores), name="constant", info=SimpleNamespace(input_shape=None,
                                                                                          class_names=None),
                           fingerprint=lambda: "constant")


@pytest.fixture
def tiny_vae(tiny_generators):
    from workbench.core.generation.protocol import GeneratorCard
    from workbench.core.generation.registry import create_generator

    vae = create_generator("vae", 10, **tiny_generators["vae"])
    vae.card = GeneratorCard(kind="vae", latent_range={"low": -3.0, "high": 3.0, "range": 6.0, "n": 10,
                                                       "source": "test", "extent_high": 0.006, "extent_low": 0.0006})
    return vae


def test_a_classifier_that_never_accepts_a_seed_is_reported_after_the_seeds_not_looped(tiny_vae, fashion_tiny):
    from workbench.core.generation.tig import generate

    notices = []
    ctx = JobContext("cpu", on_notice=notices.append)
    never = [0.0] * 9 + [1.0]  # always class 9: the seeds of the other classes are all rejected
    test = fashion_tiny.split("test")
    not_nine = test.subset(np.flatnonzero(np.asarray(test.labels) != 9)[:30])
    run = generate(ctx, tiny_vae, constant_classifier(never), 12, "high", budget=250, images=not_nine, name="vae")
    assert run.results == [] and not run.seeds.kept.any() and run.summary()["kept"] == 0
    assert any("labels none of the 12 seed images" in n for n in notices)


def test_nan_scores_stop_the_search_with_a_message(tiny_vae, fashion_tiny):
    from workbench.core.errors import WorkbenchError
    from workbench.core.generation.tig import generate

    with pytest.raises(WorkbenchError, match="NaN or infinite scores"):
        generate(JobContext("cpu"), tiny_vae, constant_classifier([float("nan")] * 10), 3, images=fashion_tiny.split(
            "test"), budget=5)
