"""The bundled generators: each reads back whole (files, weights' hash), decodes images the classifier
takes, and carries a finished card with its latent range, seed acceptance and samples."""

from __future__ import annotations

import pytest
import torch

from workbench.core.generation.storage import bundled_generators, load_generator, read_samples

BUNDLED = {"vae-fashion-mnist", "gan-fashion-mnist", "diffusion-fashion-mnist", "vae-mnist-5k", "gan-mnist-5k"}


def test_the_bundle_holds_the_generators_the_workbench_ships():
    assert BUNDLED <= {entry["name"] for entry in bundled_generators()}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_a_bundled_generator_reads_back_and_decodes(name):
    generator = load_generator(name)  # refused if a file is missing or the weights do not match their hash
    card = generator.card
    assert card.complete and card.epochs == card.epochs_planned and card.latent_range and card.seed_acceptance
    assert card.seed_acceptance["real_accuracy"] is not None  # measured on what is stored
    assert any("measured again on the stored weights" in note for note in card.notes)
    if generator.kind != "diffusion":  # the diffusion model is small: stored at float32, unrounded
        assert any("float16" in note for note in card.notes)
    z = generator.sample_latent(4, torch.Generator().manual_seed(0))
    images = generator.decode(z, torch.arange(4) if generator.conditional else None)
    assert images.shape == (4, 1, 28, 28) and 0 <= float(images.min()) <= float(images.max()) <= 1
    grid = read_samples(generator.folder)
    assert grid.shape[:2] == (10, 8)
