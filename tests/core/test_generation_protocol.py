"""The generator protocol: the kinds by name, decode's checks, fit checks against datasets and
classifiers, the latent range and the mutation extents it gives, and seed acceptance of an untrained generator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.generation.assessment import (LatentRange, draw_indices, measure_latent_range, sample_grid,
                                                  seed_acceptance)
from workbench.core.execution.jobs import JobContext
from workbench.core.generation.protocol import check_fits
from workbench.core.generation.registry import create_generator, generator_kinds, get_generator_kind
from workbench.core.models.model_io import LoadedModel, ModelInfo


def test_the_built_in_kinds_are_listed_with_their_presets():
    kinds = {k.name: k for k in generator_kinds()}
    assert {"vae", "gan", "diffusion"} <= set(kinds)
    assert kinds["vae"].can_encode and not kinds["vae"].conditional
    assert kinds["gan"].conditional and kinds["diffusion"].conditional
    assert {"default", "small"} <= set(kinds["vae"].presets)
    assert kinds["vae"].training_defaults == {"epochs": 30, "batch_size": 128, "lr": 2e-4}
    with pytest.raises(WorkbenchError, match="Unknown generator kind 'nope'"):
        get_generator_kind("nope")


def test_settings_and_presets_are_checked():
    with pytest.raises(WorkbenchError, match="no preset 'huge'"):
        create_generator("vae", 10, preset="huge")
    with pytest.raises(WorkbenchError, match="no setting 'width'"):
        create_generator("vae", 10, width=3)
    small = create_generator("vae", 10, preset="small")
    assert small.config == {"h_dim": 512, "z_dim": 32} and small.latent_dim == 32
    assert 0.84e6 < small.parameter_count() < 0.86e6


def test_the_default_sizes_are_the_published_ones():
    """VAE 4.43 M parameters, cDCGAN 1.91 M + 0.15 M, each with its genome length."""
    vae = create_generator("vae", 10)
    assert vae.latent_dim == 400 and round(vae.parameter_count() / 1e4) == 443
    gan = create_generator("gan", 10)
    g = sum(p.numel() for name in ("g_embed", "generator") for p in gan.net[name].parameters())
    d = sum(p.numel() for name in ("d_embed", "discriminator") for p in gan.net[name].parameters())
    assert gan.latent_dim == 100 and round(g / 1e4) == 191 and round(d / 1e4) == 15


def test_initialisation_is_seeded_and_leaves_the_global_state_alone():
    before = torch.get_rng_state()
    a = create_generator("gan", 10, seed=3, g_channels=[16, 8], d_channels=[8, 16])
    b = create_generator("gan", 10, seed=3, g_channels=[16, 8], d_channels=[8, 16])
    c = create_generator("gan", 10, seed=4, g_channels=[16, 8], d_channels=[8, 16])
    assert torch.equal(torch.get_rng_state(), before)
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    assert not torch.equal(a.state_dict()["generator.0.weight"], c.state_dict()["generator.0.weight"])


def test_any_class_count(tiny_generators):
    gan = create_generator("gan", 3, **tiny_generators["gan"])
    images = gan.decode(gan.sample_latent(6), torch.tensor([0, 1, 2, 0, 1, 2]))
    assert images.shape == (6, 1, 28, 28) and images.dtype == torch.float32
    assert float(images.min()) >= 0.0 and float(images.max()) <= 1.0


def test_decode_refuses_what_does_not_fit(tiny_generators):
    gan = create_generator("gan", 10, **tiny_generators["gan"])
    z = gan.sample_latent(2)
    with pytest.raises(WorkbenchError, match=r"do not fit this generator: it takes \(N, 100\)"):
        gan.decode(torch.zeros(2, 99), torch.tensor([0, 1]))
    with pytest.raises(WorkbenchError, match="class-conditional"):
        gan.decode(z)
    with pytest.raises(WorkbenchError, match="0–9"):
        gan.decode(z, torch.tensor([0, 10]))
    with pytest.raises(WorkbenchError, match="one label per latent"):
        gan.decode(z, torch.tensor([0, 1, 2]))
    with pytest.raises(WorkbenchError, match="NaN"):
        gan.decode(torch.full((2, 100), float("nan")), torch.tensor([0, 1]))
    with pytest.raises(WorkbenchError, match="cannot encode"):
        gan.encode(torch.zeros(2, 1, 28, 28))


def test_a_generator_of_another_image_shape_or_class_count_is_refused(digits, fashion_tiny, tiny_generators):
    with pytest.raises(WorkbenchError, match="28×28"):
        create_generator("gan", 10, (1, 8, 8))
    with pytest.raises(WorkbenchError, match=r"side is divisible by 4.*not 3×30×30"):
        create_generator("diffusion", 10, (3, 30, 30), **tiny_generators["diffusion"])
    with pytest.raises(WorkbenchError, match=r"square images.*not 3×32×64"):
        create_generator("gan", 10, (3, 32, 64))
    vae = create_generator("vae", 10, **tiny_generators["vae"])
    with pytest.raises(WorkbenchError, match="shape 1×28×28, but digits has 1×8×8"):
        check_fits(vae, dataset=digits)
    five = create_generator("gan", 5, **tiny_generators["gan"])
    with pytest.raises(WorkbenchError, match="5 classes, but fashion-tiny has 10"):
        check_fits(five, dataset=fashion_tiny)
    grey8 = LoadedModel(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)),
                        ModelInfo("eight", "", "test", input_shape=(1, 8, 8), class_names=list("abcdefghij")))
    with pytest.raises(WorkbenchError, match="takes images of shape 1×8×8"):
        check_fits(vae, classifier=grey8)
    wide = LoadedModel(nn.Sequential(nn.Flatten(), nn.Linear(784, 5)),
                       ModelInfo("five", "", "test", input_shape=(1, 28, 28), class_names=list("abcde")))
    with pytest.raises(WorkbenchError, match="5 classes, but the cDCGAN generator has 10"):
        seed_acceptance(JobContext("cpu"), create_generator("gan", 10, **tiny_generators["gan"]), wide)


# --- the latent range --------------------------------------------------------------------------------------------

def test_latent_range_of_prior_draws_is_their_extremes_and_seeded(tiny_generators):
    gan = create_generator("gan", 10, **tiny_generators["gan"])
    r = measure_latent_range(JobContext("cpu"), gan, n=1000, seed=5)
    draws = gan.sample_latent(1000, torch.Generator().manual_seed(5))
    assert (r.low, r.high) == (float(draws.min()), float(draws.max()))
    assert r.source == "prior draws" and r.n == 1000 and r.seed == 5
    assert 8.0 < r.width < 10.0  # 100,000 standard normal values
    assert r.extent_high == pytest.approx(r.width / 1000) and r.extent_low == pytest.approx(r.width / 10000)
    assert measure_latent_range(JobContext("cpu"), gan, n=1000, seed=5) == r
    assert measure_latent_range(JobContext("cpu"), gan, n=1000, seed=6) != r
    assert LatentRange.from_dict(r.to_dict()) == r and r.to_dict()["range"] == pytest.approx(r.width)


def test_latent_range_of_the_diffusion_noise_is_about_ten(tiny_generators):
    dm = create_generator("diffusion", 10, **tiny_generators["diffusion"])
    assert dm.latent_dim == 784
    r = measure_latent_range(JobContext("cpu"), dm, n=1000, seed=0)
    assert 9.0 < r.width < 11.5


def test_latent_range_of_the_vae_is_over_encoded_test_images(fashion_tiny, tiny_generators):
    vae = create_generator("vae", 10, **tiny_generators["vae"])
    test = fashion_tiny.split("test")
    r = measure_latent_range(JobContext("cpu"), vae, test, n=150, seed=2)
    mu = vae.encode(test.tensor(draw_indices(len(test), 150, 2)))
    assert (r.low, r.high) == (float(mu.min()), float(mu.max()))
    assert r.source == "encoded test images" and r.split == "test" and r.n == 150
    assert measure_latent_range(JobContext("cpu"), vae, test, n=10_000).n == len(test)  # all of them, no repeats
    with pytest.raises(WorkbenchError, match="encoded test images"):
        measure_latent_range(JobContext("cpu"), vae)


# --- seed acceptance and the sample grid ----------------------------------------------------------------------------

def test_an_untrained_generator_says_so(lenet5_fashion, fashion_tiny, tiny_generators):
    gan = create_generator("gan", 10, **tiny_generators["gan"])
    result = seed_acceptance(JobContext("cpu"), gan, lenet5_fashion, n=100, seed=0)
    assert result.n == 100 and 0 <= result.accepted <= 100 and len(result.per_class) == 10
    assert result.samples == "class-conditional samples" and result.chance == pytest.approx(0.1)
    assert result.rate <= 0.15 and "untrained" in result.warning
    vae = create_generator("vae", 10, **tiny_generators["vae"])
    rec = seed_acceptance(JobContext("cpu"), vae, lenet5_fashion, fashion_tiny.split("test"), n=100)
    assert rec.samples == "reconstructed test images" and "untrained" in rec.warning
    assert rec.to_dict()["rate"] == rec.rate and rec.to_dict()["fingerprint"] == lenet5_fashion.fingerprint()


def test_a_classifier_that_agrees_gives_full_acceptance(tiny_generators):
    """A stand-in classifier that knows which label each image was decoded for: every sample is accepted."""
    gan = create_generator("gan", 4, **tiny_generators["gan"])
    table = {}

    class Oracle(nn.Module):  # remembers which image was decoded for which label
        def forward(self, x):
            return torch.stack([table[img.numpy().tobytes()] for img in x])

    z = gan.sample_latent(40, torch.Generator().manual_seed(1))
    y = torch.arange(40) % 4
    for img, label in zip(gan.decode(z, y), y):
        table[img.numpy().tobytes()] = nn.functional.one_hot(label, 4).float()
    oracle = LoadedModel(Oracle(), ModelInfo("oracle", "", "test", input_shape=(1, 28, 28), class_names=list("abcd")))
    result = seed_acceptance(JobContext("cpu"), gan, oracle, n=40, seed=1)
    assert result.rate == 1.0 and result.per_class == [1.0] * 4 and result.warning == ""


def test_the_sample_grid_is_one_row_per_class_and_the_same_each_time(fashion_tiny, tiny_generators):
    gan = create_generator("gan", 10, **tiny_generators["gan"])
    grid = sample_grid(JobContext("cpu"), gan, per_class=3, seed=0)
    assert grid.shape == (10, 3, 1, 28, 28) and grid.dtype == np.float32 and grid.flags.c_contiguous
    assert np.array_equal(grid, sample_grid(JobContext("cpu"), gan, per_class=3, seed=0))
    vae = create_generator("vae", 10, **tiny_generators["vae"])
    test = fashion_tiny.split("test")
    recon = sample_grid(JobContext("cpu"), vae, per_class=2, images=test)
    first_coat = int(np.flatnonzero(test.labels[draw_indices(len(test), len(test), 0)] == 4)[0])
    coat = test.tensor(draw_indices(len(test), len(test), 0)[[first_coat]])
    assert np.allclose(recon[4, 0], vae.decode(vae.encode(coat)).numpy()[0])


def test_seed_acceptance_is_judged_against_how_well_the_classifier_reads_real_images(tiny_generators, fashion_tiny,
                                                                                      lenet5_fashion):
    """Fashion-MNIST generators cannot reach MNIST's 99 %: the ceiling is the classifier's accuracy on real images."""
    from workbench.core.generation.assessment import SeedAcceptance, classify, draw_indices

    def acceptance(rate, real):
        return SeedAcceptance("c", "f", 1000, int(rate * 1000), [], "class-conditional samples", 0, 10, real)

    assert acceptance(0.726, 0.89).warning == ""  # 82 % of what the classifier reads in real images
    assert "real test images" in acceptance(0.5, 0.9).warning
    assert "99 %" in acceptance(0.5, None).warning  # without real images, the benchmark's figure
    test = fashion_tiny.split("test")
    gan = create_generator("gan", 10, **tiny_generators["gan"])
    result = seed_acceptance(JobContext("cpu"), gan, lenet5_fashion, test, n=60, seed=2)
    pick = draw_indices(len(test), 60, 2)
    read, _ = classify(JobContext("cpu"), lenet5_fashion, test.tensor(pick))
    assert result.real_accuracy == float((read.numpy() == test.labels[pick]).mean())
