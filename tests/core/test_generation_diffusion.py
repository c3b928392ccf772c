"""The class-conditional diffusion model: train → save → load → decode with diffusers' own files, a
deterministic DDIM decode (same noise and label, bit-identical image), the class-embedding checks,
and no hub."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext
from workbench.core.generation.diffusion import ConditionalDiffusion, check_class_embeddings
from workbench.core.generation.registry import create_generator
from workbench.core.generation.storage import load_generator
from workbench.core.generation.training import train_generator


@pytest.fixture(scope="module")
def trained(tmp_path_factory, fashion_tiny, tiny_generators):
    out = tmp_path_factory.mktemp("diffusion") / "dm"
    return train_generator(JobContext("cpu"), "diffusion", fashion_tiny, out, epochs=1, batch_size=64,
                           config=tiny_generators["diffusion"], latent_samples=100, grid_per_class=2,
                           preview_per_class=1)


def test_the_default_model_is_the_small_unet_of_the_spec():
    dm = create_generator("diffusion", 10)
    config = dm.unet.config
    assert list(config.block_out_channels) == [16, 32, 64] and config.norm_num_groups == 8
    assert config.num_class_embeds == 11 and not config.add_attention and config.layers_per_block == 1  # and "no class"
    assert 0.55e6 < dm.parameter_count() < 0.7e6 and dm.latent_dim == 784 and dm.config["steps"] == 20
    assert dm.scheduler.config.beta_schedule == "squaredcos_cap_v2"
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_train_save_load_decode_round_trip(trained):
    files = sorted(p.name for p in trained.folder.iterdir())
    assert {"config.json", "diffusion_pytorch_model.safetensors", "scheduler_config.json",
            "generator.json", "samples.npy", "training_state.pt"} == set(files)
    loaded = load_generator(trained.folder)
    assert isinstance(loaded, ConditionalDiffusion) and loaded.unet.config.num_class_embeds == 11
    z = loaded.sample_latent(3, torch.Generator().manual_seed(0))
    y = torch.tensor([0, 4, 9])
    images = loaded.decode(z, y)
    assert images.shape == (3, 1, 28, 28) and float(images.min()) >= 0 and float(images.max()) <= 1
    assert torch.equal(images, trained.generator.decode(z, y).cpu())
    assert loaded.card.final_losses.keys() == {"mse"} and loaded.card.versions["diffusers"]


def test_ddim_decoding_is_deterministic(trained):
    dm = trained.generator
    z = dm.sample_latent(2, torch.Generator().manual_seed(7))
    y = torch.tensor([3, 3])
    first = dm.decode(z, y)
    assert torch.equal(first, dm.decode(z, y))  # same latent and label: bit-identical
    assert torch.equal(first, dm.decode(z.clone(), y.clone()))
    assert not torch.equal(first, dm.decode(z, torch.tensor([8, 8])))  # the label matters


def test_the_loader_checks_the_class_embeddings(trained, tmp_path):
    folder = tmp_path / "dm"
    shutil.copytree(trained.folder, folder)
    descriptor = json.loads((folder / "generator.json").read_text())
    card = {k: v for k, v in descriptor["card"].items() if k != "class_names"}
    (folder / "generator.json").write_text(json.dumps({**descriptor, "num_classes": 5, "card": card}))
    with pytest.raises(WorkbenchError, match="num_classes is 5, but the weights were trained for 10 classes"):
        load_generator(folder)
    (folder / "generator.json").write_text(json.dumps(descriptor))
    (folder / "scheduler_config.json").unlink()
    with pytest.raises(WorkbenchError, match="missing scheduler_config.json"):
        load_generator(folder)


def test_a_diffusers_without_class_embeddings_is_refused():
    class OldUNet:  # what a diffusers without class conditioning offers
        def __init__(self, sample_size=None, in_channels=3, out_channels=3):
            pass

        def forward(self, sample, timestep, return_dict=True):
            pass

    with pytest.raises(WorkbenchError, match="no class embeddings for UNet2DModel"):
        check_class_embeddings(OldUNet)
    from diffusers import UNet2DModel

    check_class_embeddings(UNet2DModel)  # the installed one has them


def test_a_cancel_stops_training_at_the_next_batch(tmp_path, fashion_tiny):
    """The spec-sized model (0.62 M parameters): a cancel is seen at the next batch, so it stops within
    a batch's time (a step of its training: benchmarks/bench_generation.py)."""
    from workbench.core.errors import Cancelled

    reported = []

    def progress(done, total, message):
        reported.append(done)
        if done == 1:
            ctx.cancel()  # during the first of 13 batches' reports

    ctx = JobContext("cpu", on_progress=progress)
    with pytest.raises(Cancelled):
        train_generator(ctx, "diffusion", fashion_tiny, tmp_path / "dm", epochs=1, batch_size=32)
    assert reported == [1]  # the second batch's report raised: no further batch was reported
    assert not (tmp_path / "dm").exists()


def test_a_stop_is_seen_after_every_ddim_step_of_a_decode(trained):
    """A decode call holds a large batch (`decode_batch`), so the job's cancel check runs between the DDIM steps:
    a stop during a decode ends it at the next step, and the step count decides how often it is asked."""
    from workbench.core.errors import Cancelled
    from workbench.core.generation.assessment import decode_in_batches

    dm = trained.generator
    steps = int(dm.config["steps"])
    z = dm.sample_latent(4, torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 2, 3])
    asked = []
    first = dm.decode(z, y, check=lambda: asked.append(1))
    assert len(asked) == steps and torch.equal(first, dm.decode(z, y))  # asked once per step; the images unchanged

    ctx = JobContext("cpu")
    asked.clear()
    original = ctx.check

    def check():
        asked.append(1)
        if len(asked) == 3:
            ctx.cancel()
        original()

    ctx.check = check
    with pytest.raises(Cancelled):
        decode_in_batches(ctx, dm, z, y)
    assert len(asked) == 3  # the third step saw the stop: the decode went no further
    assert dm.decode(z, y).shape == (4, 1, 28, 28)  # and the generator decodes as before afterwards


def test_guided_decoding_mixes_the_labelled_and_the_unlabelled_prediction(trained):
    """ε = ε∅ + w·(ε_y − ε∅), with ε∅ the prediction for "no class" (index num_classes), written out here step by
    step with one UNet call per prediction."""
    from diffusers import DDIMScheduler

    dm = trained.generator
    w = float(dm.config["guidance"])
    assert w == 1.5 and dm.unconditional
    z = dm.sample_latent(2, torch.Generator().manual_seed(3))
    y = torch.tensor([1, 7])
    ddim = DDIMScheduler.from_config(dm.scheduler.config)
    ddim.set_timesteps(dm.config["steps"])
    x = z.reshape(2, 1, 28, 28)
    with torch.no_grad():
        for t in ddim.timesteps:
            labelled = dm.unet(x, t, class_labels=y).sample
            free = dm.unet(x, t, class_labels=torch.full_like(y, 10)).sample
            x = ddim.step(free + w * (labelled - free), t, x, eta=0.0).prev_sample
    assert torch.allclose(dm.decode(z, y), (x.clamp(-1, 1) + 1) / 2, atol=1e-5)


def test_training_keeps_an_average_of_the_weights_and_resumes_from_the_trained_ones(fashion_tiny, tiny_generators):
    """The saved UNet is the exponential average (decay warmed up as min(d, (1+n)/(10+n))), computed here by hand
    over three steps; the training state carries the trained weights, so a resumed run starts from them."""
    dm = create_generator("diffusion", 10, (1, 28, 28), **tiny_generators["diffusion"])
    optimisers = dm.optimisers(1e-3)
    average = optimisers["average"]
    expected = {k: v.clone() for k, v in dm.unet.state_dict().items()}
    x = fashion_tiny.split("train").tensor(range(16))
    y = torch.from_numpy(fashion_tiny.split("train").labels[:16]).long()
    rng = torch.Generator().manual_seed(0)
    for n in range(1, 4):
        dm.train_step(x, y, optimisers, rng)
        decay = min(0.999, (1 + n) / (10 + n))
        trained = average.trained.state_dict()
        expected = {k: decay * v + (1 - decay) * trained[k] for k, v in expected.items()}
    for name, value in dm.unet.state_dict().items():
        assert torch.allclose(value, expected[name], atol=1e-6), name
    assert not torch.equal(dm.unet.state_dict()["conv_in.weight"], average.trained.state_dict()["conv_in.weight"])
    state = average.state_dict()
    again = create_generator("diffusion", 10, (1, 28, 28), **tiny_generators["diffusion"])
    again.unet.load_state_dict(dm.unet.state_dict())  # what a checkpoint's weights file holds: the average
    resumed = again.optimisers(1e-3)["average"]
    resumed.load_state_dict(state)
    assert resumed.updates == 3
    assert all(torch.equal(a, b) for a, b in zip(resumed.trained.parameters(), average.trained.parameters()))


def test_guidance_needs_a_no_class_prediction_and_old_folders_are_told_how_to_load(trained, tmp_path):
    with pytest.raises(WorkbenchError, match="label_dropout 0 does not train"):
        create_generator("diffusion", 10, label_dropout=0.0, guidance=2.0)
    for setting, value in (("label_dropout", 1.0), ("ema_decay", -0.5), ("guidance", float("inf"))):
        with pytest.raises(WorkbenchError, match=setting if setting != "guidance" else "finite number"):
            create_generator("diffusion", 10, **{setting: value})
    folder = tmp_path / "old"
    shutil.copytree(trained.folder, folder)
    descriptor = json.loads((folder / "generator.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_class_embeds": 10}))  # trained before guidance
    with pytest.raises(WorkbenchError, match="no \"no class\" embedding") as raised:
        load_generator(folder)
    assert '"label_dropout": 0.0, "guidance": 1.0' in raised.value.hint
    assert descriptor["config"]["label_dropout"] == 0.1
