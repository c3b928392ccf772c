"""Exporting a generator folder for sharing or bundling: without its training state, bit-identical weights
by default; with float16 weights half the size, read back (hash checked) into float32 networks, the card
measured again on them, and the pixel change the rounding makes stated; never over its own source."""

from __future__ import annotations

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.generation.storage import TRAINING_STATE, export_generator, load_generator
from workbench.core.generation.training import train_generator


@pytest.mark.parametrize("kind", ["vae", "gan", "diffusion"])
def test_export_whole_and_in_half_precision(tmp_path, fashion_tiny, tiny_generators, lenet5_fashion, kind):
    source = train_generator(JobContext("cpu"), kind, fashion_tiny, tmp_path / "src", epochs=1,
                             config=tiny_generators[kind], latent_samples=50).folder
    assert (source / TRAINING_STATE).is_file()
    original = load_generator(source)
    whole = export_generator(JobContext("cpu"), source, tmp_path / "whole")
    assert not (whole / TRAINING_STATE).exists()
    copied = load_generator(whole)
    assert all(torch.equal(copied.state_dict()[k], v) for k, v in original.state_dict().items())

    half = export_generator(JobContext("cpu"), source, tmp_path / "half", half=True, dataset=fashion_tiny,
                            classifier=lenet5_fashion)
    rounded = load_generator(half)  # the recorded hash is of the rounded weights it reads back
    weights = sum(f.stat().st_size for f in half.iterdir() if "safetensors" in f.name)
    full = sum(f.stat().st_size for f in whole.iterdir() if "safetensors" in f.name)
    assert weights < 0.6 * full
    assert all(v.dtype == original.state_dict()[k].dtype for k, v in rounded.state_dict().items())
    assert any("float16" in note for note in rounded.card.notes)
    assert any("measured again" in note for note in rounded.card.notes)
    assert rounded.card.seed_acceptance is not None and rounded.card.latent_range is not None
    z = original.sample_latent(8, torch.Generator().manual_seed(0))
    y = torch.arange(8) if original.conditional else None
    assert float((rounded.decode(z, y) - original.decode(z, y)).abs().max()) < 0.05


def test_an_export_never_replaces_its_source(tmp_path, fashion_tiny, tiny_generators):
    source = train_generator(JobContext("cpu"), "vae", fashion_tiny, tmp_path / "src", epochs=1,
                             config=tiny_generators["vae"], latent_samples=50).folder
    with pytest.raises(WorkbenchError, match="replace the generator it is made from"):
        export_generator(JobContext("cpu"), source, source)
    with pytest.raises(WorkbenchError, match="no dataset was given"):
        export_generator(JobContext("cpu"), source, tmp_path / "half", half=True)
