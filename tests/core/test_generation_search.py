"""The latent genetic search: margins against a loop, the stop rule and elitism, clamping, a search
batched across seeds identical to each seed searched alone, seeds kept only when classified as intended,
and bad settings refused in words."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.generation.objectives import margins
from workbench.core.generation.registry import create_generator
from workbench.core.generation.tig import POPULATION, draw_seeds, extent_of, search


def test_margins_equal_a_loop_and_a_tie_is_not_a_misbehaviour():
    logits = torch.tensor([[2.0, 1.0, 0.5], [0.0, 3.0, 1.0], [1.0, 1.0, 0.0]])
    labels = torch.tensor([0, 0, 1])
    expected = [row[y] - max(v for c, v in enumerate(row) if c != y) for row, y in zip(logits.tolist(), labels.tolist())]
    assert margins(logits, labels).tolist() == pytest.approx(expected)
    assert margins(logits, labels)[2] == 0  # equal scores: still classified as intended, not found


@pytest.fixture(scope="module")
def gan(tiny_generators):
    torch.manual_seed(0)
    return create_generator("gan", 10, **tiny_generators["gan"])


def test_a_search_keeps_its_best_stops_at_the_first_misbehaviour_and_clamps(gan, lenet5_fashion):
    ctx = JobContext("cpu")
    seeds = draw_seeds(ctx, gan, lenet5_fashion, 12, seed=3)
    assert seeds.genomes.shape == (12, gan.latent_dim) and seeds.kept.dtype == bool
    low, high = -2.0, 2.0
    results = search(ctx, gan, lenet5_fashion, seeds, low, high, extent=0.05, budget=30, seed=1, which=range(12))
    assert [r.seed for r in results] == list(range(12))
    for r in results:
        assert all(a >= b for a, b in zip(r.fitness, r.fitness[1:]))  # the elite survive: never worse
        assert len(r.fitness) == r.generations and r.best_margin == r.fitness[-1]
        assert r.found == (r.best_margin < 0) and (r.generations < 30 or r.generations == 30)
        if r.found:
            assert r.predicted != r.label and r.generations == next(i for i, f in enumerate(r.fitness, 1) if f < 0)
        assert low <= r.best_genome.min() and r.best_genome.max() <= high
        assert r.distance == pytest.approx(float(np.linalg.norm(r.best_genome - seeds.genomes[r.seed])), rel=1e-5)
    assert any(r.found for r in results)  # an untrained generator's images are easy to push over


def test_a_seed_searches_alike_alone_or_batched_with_others(gan, lenet5_fashion):
    ctx = JobContext("cpu")
    seeds = draw_seeds(ctx, gan, lenet5_fashion, 6, seed=5)
    together = search(ctx, gan, lenet5_fashion, seeds, -3, 3, extent=0.01, budget=12, seed=2, which=range(6))
    for r in together:
        (alone,) = search(ctx, gan, lenet5_fashion, seeds, -3, 3, extent=0.01, budget=12, seed=2, which=[r.seed])
        assert (alone.generations, alone.found, alone.predicted) == (r.generations, r.found, r.predicted)
        np.testing.assert_array_equal(alone.fitness, r.fitness)
        np.testing.assert_array_equal(alone.best_genome, r.best_genome)


def test_seeds_are_kept_only_when_classified_as_intended(tiny_generators, lenet5_fashion, fashion_tiny):
    ctx = JobContext("cpu")
    vae = create_generator("vae", 10, **tiny_generators["vae"])
    seeds = draw_seeds(ctx, vae, lenet5_fashion, 20, seed=0, images=fashion_tiny.split("test"))
    test = fashion_tiny.split("test")
    np.testing.assert_array_equal(seeds.labels, test.labels[seeds.source_index])  # a VAE seed keeps its label
    assert (seeds.kept == (seeds.predicted == seeds.labels)).all()
    assert search(ctx, vae, lenet5_fashion, seeds, -1, 1, extent=0.01, budget=3, which=[]) == []


def test_bad_settings_are_refused_in_words(gan, lenet5_fashion, tiny_generators):
    ctx = JobContext("cpu")
    seeds = draw_seeds(ctx, gan, lenet5_fashion, 2)
    for kwargs, words in (({"budget": 0}, "budget"), ({"extent": 0.0}, "extent")):
        settings = {"extent": 0.01, "budget": 5, **kwargs}
        with pytest.raises(WorkbenchError, match=words):
            search(ctx, gan, lenet5_fashion, seeds, -1, 1, **settings)
    with pytest.raises(WorkbenchError, match="at least one seed"):
        draw_seeds(ctx, gan, lenet5_fashion, 0)
    with pytest.raises(WorkbenchError, match="encoded test images"):
        draw_seeds(ctx, create_generator("vae", 10, **tiny_generators["vae"]), lenet5_fashion, 3)
    with pytest.raises(WorkbenchError, match="latent range is empty"):
        extent_of({"low": 1.0, "high": 1.0}, "high")
    assert extent_of({"low": -1.0, "high": 1.0}, "low") == pytest.approx(2e-4)
    assert POPULATION == 25
