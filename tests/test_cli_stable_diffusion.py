"""A Stable Diffusion pipeline from disk as a generator: `add-generator diffusers` with a LoRA, the card read by
`generators DIR --json`, a search by `generate`; the sampler against diffusers' own pipeline; what is refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from cli_helpers import assert_clean_failure, run_cli, run_json
from tiny_pipelines import SIDE, tiny_lora, tiny_pipeline

pytest.importorskip("transformers")
pytest.importorskip("peft")


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sd")
    pipe = tiny_pipeline(folder)
    return pipe, tiny_lora(pipe, folder / "lora" / "style.safetensors")


@pytest.fixture(scope="module")
def blocks(tmp_path_factory):
    """Four classes of coloured blocks (3×32×32) and a small CNN trained one epoch on them."""
    from workbench.cli import main

    folder = tmp_path_factory.mktemp("blocks")
    rng = np.random.default_rng(0)
    labels = np.arange(96) % 4
    palette = np.array([[220, 40, 40], [40, 200, 40], [40, 40, 220], [220, 220, 40]], dtype=np.float64)
    images = np.clip(rng.normal(0, 25, (96, 3, 32, 32)) + palette[labels][:, :, None, None], 0, 255).astype(np.uint8)
    np.savez(folder / "blocks.npz", x_train=images[:64], y_train=labels[:64], x_test=images[64:], y_test=labels[64:])
    model = folder / "cnn.pt"
    assert main(["train", "--model", "cifar-convnet", "--data", str(folder / "blocks.npz"), "--epochs", "1",
                 "--out", str(model), "--device", "cpu", "--seed", "0"]) == 0
    return folder / "blocks.npz", model


def test_a_pipeline_with_a_lora_becomes_a_generator_that_searches(capsys, tmp_path, pipeline, blocks):
    pipe, lora = pipeline
    data, model = blocks
    out = tmp_path / "sd"
    card = run_json(capsys, "add-generator", "diffusers", pipe, "--data", data, "--lora", lora, "--out", out,
                    "--prompt", "a photo of {class}", "--steps", 3, "--classifier", model, "--acceptance-samples", 8,
                    "--samples-per-class", 1, "--device", "cpu")
    assert card["kind"] == "stable-diffusion" and card["complete"] and card["image_shape"] == [3, 32, 32]
    config = card["config"]
    assert config["prompts"] == [f"a photo of {name}" for name in ("0", "1", "2", "3")]
    assert config["lora"] and config["resolution"] == SIDE and config["steps"] == 3
    assert (config["guidance"], config["search_guidance"]) == (3.5, 1.4)
    assert card["latent_dim"] == 4 * (SIDE // 2) ** 2 and card["latent_range"]["source"] == "prior draws"
    assert card["seed_acceptance"]["n"] == 8 and card["versions"]["peft"]
    assert (out / "lora.safetensors").is_file() and (out / "pipeline" / "unet" / "config.json").is_file()
    assert np.load(out / "samples.npy").shape == (4, 1, 3, 32, 32)

    shown = run_json(capsys, "generators", out)
    assert shown["kind"] == "stable-diffusion" and shown["latent_dim"] == 256 and shown["config"] == config
    assert all(w.startswith("Seed acceptance is") for w in shown["warnings"])  # random weights: chance

    result = run_json(capsys, "generate", "--generator", out, "--model", model, "--data", data, "--seeds", 4,
                      "--budget", 3, "--device", "cpu", "--no-proxies")
    (run,) = result["runs"]
    assert run["seeds"] == 4 and len(run["seeds_detail"]) == run["kept"]
    assert all(1 <= s["generations"] <= 3 for s in run["seeds_detail"])


def test_the_sampler_is_diffusers_own_pipeline_with_the_benchmarks_scheduler(pipeline):
    """Seeds at guidance 3.5 and the search at 1.4 give what StableDiffusionPipeline gives for the same initial
    latents with DDIM rescaled to zero terminal SNR; the LoRA changes the images; a grey classifier gets luma."""
    from diffusers import DDIMScheduler, StableDiffusionPipeline

    from workbench.core.generation.stable_diffusion import StableDiffusion

    pipe_dir, lora = pipeline
    settings = {"prompts": ["a photo of cat", "a photo of dog"], "steps": 4, "resolution": SIDE, "vae_scale": 2}
    ours = StableDiffusion(2, (3, SIDE, SIDE), **settings)
    ours.load_pipeline(pipe_dir)
    z = torch.randn(3, ours.latent_dim, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 1])
    reference = StableDiffusionPipeline.from_pretrained(str(pipe_dir), local_files_only=True)
    reference.scheduler = DDIMScheduler.from_config(reference.scheduler.config, rescale_betas_zero_snr=True)
    reference.set_progress_bar_config(disable=True)
    for seeds, guidance in ((True, 3.5), (False, 1.4)):
        expected = reference([settings["prompts"][i] for i in y], height=SIDE, width=SIDE, num_inference_steps=4,
                             guidance_scale=guidance, latents=z.reshape(3, 4, SIDE // 2, SIDE // 2), eta=0.0,
                             output_type="pt").images
        asked = []
        assert torch.allclose(ours.decode(z, y, seeds=seeds, check=lambda: asked.append(1)), expected, atol=1e-5)
        assert len(asked) == 4  # a stop is seen after each DDIM step, and the sampler made once serves both calls
    fused = StableDiffusion(2, (1, 8, 8), **settings, lora=True)
    fused.load_pipeline(pipe_dir, lora)
    plain = StableDiffusion(2, (1, 8, 8), **settings)
    plain.load_pipeline(pipe_dir)
    grey = plain.decode(z, y)
    assert grey.shape == (3, 1, 8, 8) and not torch.allclose(fused.decode(z, y), grey, atol=1e-4)
    colour = torch.nn.functional.interpolate(ours.decode(z, y), size=(8, 8), mode="bilinear", antialias=True)
    luma = 0.299 * colour[:, 0] + 0.587 * colour[:, 1] + 0.114 * colour[:, 2]
    assert torch.allclose(grey[:, 0], luma, atol=1e-5)


def test_what_is_not_a_usable_pipeline_is_refused_in_words(capsys, tmp_path, pipeline, blocks):
    pipe, lora = pipeline
    data, _ = blocks

    def refused(source, *words, extra=()):
        rc, _, err = run_cli(capsys, "add-generator", "diffusers", source, "--data", data, "--out",
                             tmp_path / f"out{len(list(tmp_path.iterdir()))}", "--device", "cpu", *extra)
        assert_clean_failure(rc, err, *words)

    refused(tmp_path / "nowhere", "is not a folder")
    (tmp_path / "empty").mkdir()
    refused(tmp_path / "empty", "model_index.json is missing")
    partial = tmp_path / "partial"
    shutil.copytree(pipe, partial)
    shutil.rmtree(partial / "tokenizer")
    refused(partial, "lacks tokenizer", "not a Stable Diffusion pipeline")
    pickled = tmp_path / "pickled"
    shutil.copytree(pipe, pickled)
    weights = pickled / "unet" / "diffusion_pytorch_model.safetensors"
    weights.rename(weights.with_suffix(".bin"))
    refused(pickled, "no safetensors weights", "diffusion_pytorch_model.bin", "can run code")
    damaged = tmp_path / "damaged"
    shutil.copytree(pipe, damaged)
    (damaged / "vae" / "diffusion_pytorch_model.safetensors").write_bytes(b"not weights")
    refused(damaged, "could not read the pipeline")
    refused(pipe, "does not name the class", extra=("--prompt", "a photo"))
    refused(pipe, "LoRA file", "missing", extra=("--lora", tmp_path / "none.safetensors"))
    (tmp_path / "style.pt").write_bytes(b"\x80")
    refused(pipe, "not a safetensors file", extra=("--lora", tmp_path / "style.pt"))
    rc, _, err = run_cli(capsys, "add-generator", "diffusers", pipe, "--data", data, "--out", tmp_path / "partial",
                         "--device", "cpu")
    assert_clean_failure(rc, err, "is not an empty folder", "left as it is")
    refused(pipe, "resolution of 21", extra=("--resolution", 21))
    refused(pipe, "latents of side 9", extra=("--resolution", 18))
    rc, _, err = run_cli(capsys, "train-generator", "--generator", "stable-diffusion", "--data", data, "--out",
                         tmp_path / "trained", "--classifier", "none", "--device", "cpu")
    assert_clean_failure(rc, err, "not trained by the workbench", "add-generator diffusers")


def test_a_damaged_generator_folder_is_found_when_loaded(capsys, tmp_path, pipeline, blocks):
    from workbench.core.errors import WorkbenchError
    from workbench.core.generation.storage import load_generator

    pipe, _ = pipeline
    data, _ = blocks
    out = tmp_path / "sd"
    run_json(capsys, "add-generator", "diffusers", pipe, "--data", data, "--out", out, "--device", "cpu")
    assert load_generator(out).latent_dim == 256
    descriptor = json.loads((out / "generator.json").read_text())
    prompts = descriptor["config"]["prompts"]
    descriptor["config"]["prompts"] = descriptor["card"]["config"]["prompts"] = prompts[:3]
    (out / "generator.json").write_text(json.dumps(descriptor))
    with pytest.raises(WorkbenchError, match="3 prompts for 4 classes"):
        load_generator(out)
    descriptor["config"]["prompts"] = descriptor["card"]["config"]["prompts"] = prompts
    (out / "generator.json").write_text(json.dumps(descriptor))
    weights = out / "pipeline" / "text_encoder" / "model.safetensors"
    tensors = __import__("safetensors.torch", fromlist=["load_file"]).load_file(str(weights))
    name = next(iter(tensors))
    tensors[name] = tensors[name] + 1.0
    weights.unlink()  # a hard link to the source pipeline: replaced, not written through
    __import__("safetensors.torch", fromlist=["save_file"]).save_file(tensors, str(weights))
    with pytest.raises(WorkbenchError, match="damaged"):
        load_generator(out)
