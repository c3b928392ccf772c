"""A generator folder made from a diffusers pipeline folder (`workbench add-generator diffusers`): the
pipeline's files linked or copied in, one prompt per class of the dataset, and a card measured like a
trained generator's (latent range from prior draws; seed acceptance and samples when asked, since on a
CPU each image of a full-size pipeline takes many seconds)."""

from __future__ import annotations

from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.generation.assessment import measure_latent_range, sample_grid, seed_acceptance
from workbench.core.generation.protocol import GeneratorCard, check_fits
from workbench.core.generation.stable_diffusion import (StableDiffusion, libraries, pipeline_files,
                                                        resolve_pipeline_folder)
from workbench.core.generation.storage import save_generator

CLASS_FIELD = "{class}"


def class_prompts(template: str, class_names: list[str]) -> list[str]:
    """One prompt per class: `template` with `{class}` replaced by the class's name."""
    if CLASS_FIELD not in template:
        raise WorkbenchError(f"The prompt {template!r} does not name the class: every class would get the same "
                             "prompt.", 'Put {class} where the class name goes, e.g. "a photo of {class}".')
    return [template.replace(CLASS_FIELD, name) for name in class_names]


def pipeline_name(folder: Path) -> str:
    """How a card names the pipeline: `owner/name` for a Hugging Face cache snapshot, else the folder's name."""
    entry = folder.parent.parent.name
    if folder.parent.name == "snapshots" and entry.startswith("models--"):
        return entry.removeprefix("models--").replace("--", "/")
    return folder.name


def pipeline_settings(folder: Path) -> dict:
    """The sizes a generator needs from a pipeline folder's own configs, read without loading weights."""
    import json

    try:
        unet = json.loads((folder / "unet" / "config.json").read_text())
        vae = json.loads((folder / "vae" / "config.json").read_text())
        side = int(unet["sample_size"]) * 2 ** (len(vae["block_out_channels"]) - 1)
        return {"latent_channels": int(unet["in_channels"]), "vae_scale": 2 ** (len(vae["block_out_channels"]) - 1),
                "resolution": side}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WorkbenchError(f"The UNet or VAE config in {folder} is missing or damaged.",
                             "Copy the whole pipeline folder again.", details=repr(exc)) from exc


def add_diffusers_generator(ctx, source, out, dataset, *, prompt: str = "a photo of {class}",
                            negative_prompt: str = "", lora=None, lora_scale: float = 1.0, steps: int = 25,
                            guidance: float = 3.5, search_guidance: float = 1.4, resolution: int | None = None,
                            classifier=None, acceptance_samples: int = 0, grid_per_class: int = 0,
                            latent_samples: int = 1000, seed: int = 0, command: str = "") -> StableDiffusion:
    """Write the generator folder `out` for the pipeline folder `source` (and LoRA file `lora`) searching
    `dataset`'s classes, with its card; returns the generator, loaded on the CPU."""
    from workbench.core.execution.jobs import device_description
    from workbench.core.project.store import library_versions

    libraries()  # says what to install before anything is read
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise WorkbenchError(f"{out} exists and is not an empty folder; it is left as it is.",
                             "Choose a new folder for the generator (--out DIR).")
    folder = resolve_pipeline_folder(source)
    _, variant = pipeline_files(folder)
    lora = Path(lora).expanduser() if lora else None
    settings = pipeline_settings(folder)
    if resolution is not None:
        settings["resolution"] = int(resolution)
    names = list(dataset.class_names)
    config = {"prompts": class_prompts(prompt, names), "negative_prompt": negative_prompt, "steps": int(steps),
              "guidance": float(guidance), "search_guidance": float(search_guidance), **settings,
              "lora": lora is not None, "lora_scale": float(lora_scale), "variant": variant}
    generator = StableDiffusion(len(names), dataset.image_shape, **config)
    ctx.progress(0, 1, f"reading the pipeline in {folder}")
    generator.load_pipeline(folder, lora)
    check_fits(generator, dataset=dataset)
    if classifier is not None:
        check_fits(generator, classifier=classifier)
    card = GeneratorCard(kind=generator.kind, title=f"{generator.title} ({pipeline_name(folder)}"
                         + (f" + {lora.name}" if lora else "") + f") for {dataset.card.title}",
                         dataset=dataset.spec, class_names=names, image_shape=list(generator.image_shape),
                         preset="default", config=dict(generator.config), parameters=generator.parameter_count(),
                         seed=int(seed), complete=True, command=command, device=device_description(ctx.device),
                         versions={**library_versions(), **generator.versions()},
                         notes=[f"Made from the diffusers pipeline {folder}"
                                + (f" with the LoRA {lora}" if lora else "") + "; not trained by the workbench."])
    test = dataset.splits.get("test")
    images = test if test is not None and len(test) else dataset.split("train")
    card.latent_range = measure_latent_range(ctx.quiet(), generator, None, latent_samples, seed).to_dict()
    generator.to(ctx.device)
    if classifier is not None and acceptance_samples:
        ctx.progress(0, 1, f"measuring seed acceptance by {classifier.name}")
        card.seed_acceptance = seed_acceptance(ctx.quiet(), generator, classifier, images, acceptance_samples,
                                               seed).to_dict()
    grid = sample_grid(ctx.quiet(), generator, grid_per_class, seed, images) if grid_per_class else None
    generator.to("cpu")
    ctx.progress(1, 1, "saving")
    save_generator(generator, out, card, grid=grid)
    return generator
