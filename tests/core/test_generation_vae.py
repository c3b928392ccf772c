"""The VAE and the training job every kind shares: train → save → load → decode, encode/decode, the card,
per-epoch partial results and checkpoints, resume, cancel, NaN losses, and damaged folders."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from workbench.core.errors import Cancelled, WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.generation.storage import load_generator, read_samples, read_training_state
from workbench.core.generation.training import EpochReport, train_generator
from workbench.core.generation.vae import VAE


@pytest.fixture(scope="module")
def trained(tmp_path_factory, fashion_tiny, tiny_generators, lenet5_fashion):
    """A tiny VAE trained for 2 epochs on 400 images, with its partial results."""
    out = tmp_path_factory.mktemp("vae") / "vae"
    reports = []
    ctx = JobContext("cpu", on_partial=reports.append)
    result = train_generator(ctx, "vae", fashion_tiny, out, epochs=2, batch_size=32, lr=1e-3,
                             config=tiny_generators["vae"], classifier=lenet5_fashion, acceptance_samples=100,
                             latent_samples=200, command="workbench train-generator --generator vae")
    return result, reports


def test_train_save_load_decode_round_trip(trained):
    result, _ = trained
    loaded = load_generator(result.folder)
    assert isinstance(loaded, VAE) and loaded.config == {"h_dim": 64, "z_dim": 8} and loaded.num_classes == 10
    assert all(torch.equal(loaded.state_dict()[k], result.generator.state_dict()[k].cpu()) for k in loaded.state_dict())
    z = loaded.sample_latent(5, torch.Generator().manual_seed(0))
    assert torch.equal(loaded.decode(z), result.generator.decode(z).cpu())
    assert loaded.decode(z).shape == (5, 1, 28, 28)


def test_encode_gives_the_posterior_mean_and_decode_reconstructs(trained, fashion_tiny, tiny_generators):
    vae = trained[0].generator
    x = fashion_tiny.split("test").tensor(np.arange(20))
    z = vae.encode(x)
    assert z.shape == (20, 8) and torch.equal(z, vae.encode(x))  # µ, not a sample
    recon = vae.decode(z)
    assert recon.shape == x.shape and float(recon.min()) >= 0 and float(recon.max()) <= 1
    untrained = VAE(10, **tiny_generators["vae"])
    trained_error = float(((recon - x) ** 2).mean())
    assert trained_error < float(((untrained.decode(untrained.encode(x)) - x) ** 2).mean()) * 0.8
    with pytest.raises(WorkbenchError, match="do not fit this generator"):
        vae.encode(torch.zeros(2, 1, 8, 8))


def test_the_card_records_how_it_was_made(trained):
    result, _ = trained
    card = load_generator(result.folder).card
    assert card.kind == "vae" and card.dataset == "fashion-tiny" and card.class_names[4] == "Coat"
    assert card.complete and card.epochs == 2 == card.epochs_planned and card.batch_size == 32 and card.lr == 1e-3
    assert [row["epoch"] for row in card.loss_curve] == [1, 2] and card.seconds > 0
    assert set(card.final_losses) == {"loss", "bce", "kl"} and card.final_losses == {
        k: v for k, v in card.loss_curve[-1].items() if k not in ("epoch", "seconds")}
    assert card.loss_curve[1]["loss"] < card.loss_curve[0]["loss"]
    assert card.latent_range["source"] == "encoded test images" and card.latent_range["n"] == 200
    assert card.seed_acceptance["classifier"] == "lenet5-fashion" and card.seed_acceptance["n"] == 100
    assert card.parameters == result.generator.parameter_count() and card.device == "CPU"
    assert card.command.startswith("workbench train-generator") and "torch" in card.versions
    grid = read_samples(result.folder)
    assert grid.shape == (10, 8, 1, 28, 28) and grid.dtype == np.float32 and card.sample_grid == "samples.npy"


def test_partial_results_per_epoch(trained):
    _, reports = trained
    assert [r.epoch for r in reports] == [1, 2] and all(isinstance(r, EpochReport) for r in reports)
    assert reports[1].loss_curve[0]["loss"] == reports[0].losses["loss"]
    assert reports[0].grid.shape == (10, 4, 1, 28, 28) and reports[0].grid.dtype == np.float32


def test_resuming_gives_the_same_weights_as_an_unbroken_run(tmp_path, fashion_tiny, tiny_generators, trained):
    out = tmp_path / "vae"
    first = train_generator(JobContext("cpu"), "vae", fashion_tiny, out, epochs=1, batch_size=32, lr=1e-3,
                            config=tiny_generators["vae"], latent_samples=50)
    assert first.card.complete and first.card.epochs == 1 and read_training_state(out)["epoch"] == 1
    resumed = train_generator(JobContext("cpu"), "vae", fashion_tiny, out, epochs=2, resume=True, latent_samples=50)
    unbroken = trained[0].generator.state_dict()
    assert resumed.card.epochs == 2 and resumed.card.notes and len(resumed.card.loss_curve) == 2
    assert all(torch.equal(resumed.generator.state_dict()[k], unbroken[k]) for k in unbroken)
    with pytest.raises(WorkbenchError, match="trained for 2 epochs already"):
        train_generator(JobContext("cpu"), "vae", fashion_tiny, out, epochs=2, resume=True)
    with pytest.raises(WorkbenchError, match="holds a vae generator, not a gan"):
        train_generator(JobContext("cpu"), "gan", fashion_tiny, out, epochs=3, resume=True)


def test_an_existing_folder_is_never_overwritten(tmp_path, fashion_tiny, trained):
    with pytest.raises(WorkbenchError, match="holds a generator already"):
        train_generator(JobContext("cpu"), "vae", fashion_tiny, trained[0].folder, epochs=1)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(WorkbenchError, match="not an empty folder"):
        train_generator(JobContext("cpu"), "vae", fashion_tiny, other, epochs=1)
    assert (other / "notes.txt").read_text() == "mine"
    with pytest.raises(WorkbenchError, match="no training run to resume"):
        train_generator(JobContext("cpu"), "vae", fashion_tiny, tmp_path / "none", epochs=1, resume=True)


def cancel_at(step: int):
    """A job context that cancels itself at progress step `step` (counted over the whole run)."""
    holder = {}

    def progress(done, total, message):
        if done == step:
            holder["ctx"].cancel()

    holder["ctx"] = JobContext("cpu", on_progress=progress)
    return holder["ctx"]


def test_a_cancel_keeps_the_last_finished_epoch(tmp_path, fashion_tiny, tiny_generators):
    out = tmp_path / "vae"
    ctx = cancel_at(13 + 5)  # 13 batches of 32 per epoch: in the middle of the second epoch
    with pytest.raises(Cancelled):
        train_generator(ctx, "vae", fashion_tiny, out, epochs=3, batch_size=32, config=tiny_generators["vae"])
    assert any("checkpoint of epoch 1" in n for n in ctx.notices)
    kept = load_generator(out)
    assert kept.card.epochs == 1 and not kept.card.complete and kept.card.latent_range is None
    assert any("stopped after 1 of 3 epochs" in w for w in kept.card.warnings())
    done = train_generator(JobContext("cpu"), "vae", fashion_tiny, out, resume=True, latent_samples=50)
    assert done.card.complete and done.card.epochs == 3

    early = tmp_path / "early"
    ctx = cancel_at(3)
    with pytest.raises(Cancelled):
        train_generator(ctx, "vae", fashion_tiny, early, epochs=2, batch_size=32, config=tiny_generators["vae"])
    assert not early.exists() and any("nothing was saved" in n for n in ctx.notices)


def test_a_nan_loss_stops_and_keeps_the_last_good_epoch(tmp_path, fashion_tiny, tiny_generators, monkeypatch):
    calls = {"n": 0}
    step = VAE.train_step

    def failing(self, x, y, optimisers, rng):
        losses = step(self, x, y, optimisers, rng)
        calls["n"] += 1
        if calls["n"] == 13 + 2:  # the second batch of the second epoch
            losses["kl"] = torch.tensor(float("nan"))
        return losses

    monkeypatch.setattr(VAE, "train_step", failing)
    out = tmp_path / "vae"
    with pytest.raises(WorkbenchError, match="the kl loss became nan in epoch 2, batch 2 of 13") as raised:
        train_generator(JobContext("cpu"), "vae", fashion_tiny, out, epochs=3, batch_size=32,
                        config=tiny_generators["vae"])
    assert "checkpoint of epoch 1" in raised.value.hint and "--resume" in raised.value.hint
    kept = load_generator(out)
    assert kept.card.epochs == 1 and all(torch.isfinite(v).all() for v in kept.state_dict().values())


def test_damaged_or_mismatched_folders_are_refused(tmp_path, trained):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(trained[0].folder, folder)
    with pytest.raises(WorkbenchError, match="has 10 classes, but 5 are needed"):
        load_generator(folder, num_classes=5)

    descriptor = json.loads((folder / "generator.json").read_text())
    (folder / "generator.json").write_text(json.dumps({**descriptor, "weights_sha256": "0" * 64}))
    with pytest.raises(WorkbenchError, match="damaged: its weights do not match"):
        load_generator(folder)

    (folder / "generator.json").write_text(json.dumps({**descriptor, "kind": "flow",
                                                       "card": {**descriptor["card"], "kind": "flow"}}))
    with pytest.raises(WorkbenchError, match="kind 'flow', which this workbench does not have"):
        load_generator(folder)

    smaller = {"h_dim": 32, "z_dim": 8}
    (folder / "generator.json").write_text(json.dumps({**descriptor, "config": smaller,
                                                       "card": {**descriptor["card"], "config": smaller}}))
    with pytest.raises(WorkbenchError, match="do not fit the weights stored beside it"):
        load_generator(folder)

    (folder / "generator.json").write_text("{not json")
    with pytest.raises(WorkbenchError, match="not readable JSON"):
        load_generator(folder)

    (folder / "generator.json").write_text(json.dumps(descriptor))
    (folder / "weights.safetensors").unlink()
    with pytest.raises(WorkbenchError, match="missing weights.safetensors"):
        load_generator(folder)
    with pytest.raises(WorkbenchError, match="no generator.json"):
        load_generator(tmp_path)
    with pytest.raises(WorkbenchError, match="No generator folder"):
        load_generator(tmp_path / "absent")
