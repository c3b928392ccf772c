"""The class-conditional DCGAN: train → save → load → decode on tiny data, deterministic decoding with
batch norm in eval mode, samples that depend on the label, and a resumed run with two optimisers."""

from __future__ import annotations

import pytest
import torch

from workbench.core.execution.jobs import JobContext
from workbench.core.generation.gan import ConditionalGAN
from workbench.core.generation.storage import load_generator, read_training_state
from workbench.core.generation.training import train_generator


@pytest.fixture(scope="module")
def trained(tmp_path_factory, fashion_tiny, tiny_generators):
    out = tmp_path_factory.mktemp("gan") / "gan"
    return train_generator(JobContext("cpu"), "gan", fashion_tiny, out, epochs=2, batch_size=64,
                           config=tiny_generators["gan"], latent_samples=200)


def test_train_save_load_decode_round_trip(trained):
    loaded = load_generator(trained.folder)
    assert isinstance(loaded, ConditionalGAN) and loaded.config["g_channels"] == [16, 8]
    z = loaded.sample_latent(10, torch.Generator().manual_seed(0))
    y = torch.arange(10)
    images = loaded.decode(z, y)
    assert images.shape == (10, 1, 28, 28) and float(images.min()) >= 0 and float(images.max()) <= 1
    assert torch.equal(images, trained.generator.decode(z, y).cpu())
    card = loaded.card
    assert card.complete and card.epochs == 2 and set(card.final_losses) == {"d_loss", "g_loss", "d_real", "d_fake"}
    assert card.latent_range["source"] == "prior draws" and card.seed_acceptance is None
    assert set(read_training_state(trained.folder)["optimisers"]) == {"generator", "discriminator"}


def test_decoding_is_deterministic_and_conditional(trained):
    gan = load_generator(trained.folder)
    z = gan.sample_latent(4, torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 2, 3])
    assert torch.equal(gan.decode(z, y), gan.decode(z, y))  # batch norm in eval mode
    assert torch.equal(gan.decode(z[:1], y[:1]), gan.decode(z[:1], y[:1]))
    assert not torch.equal(gan.decode(z, y), gan.decode(z, torch.tensor([5, 6, 7, 8])))
    assert not gan.net.training


def test_a_resumed_gan_matches_an_unbroken_run(tmp_path, fashion_tiny, tiny_generators, trained):
    out = tmp_path / "gan"
    train_generator(JobContext("cpu"), "gan", fashion_tiny, out, epochs=1, batch_size=64,
                    config=tiny_generators["gan"], latent_samples=50)
    resumed = train_generator(JobContext("cpu"), "gan", fashion_tiny, out, epochs=2, resume=True, latent_samples=50)
    unbroken = trained.generator.state_dict()
    assert all(torch.equal(resumed.generator.state_dict()[k], unbroken[k]) for k in unbroken)
