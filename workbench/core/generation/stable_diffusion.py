"""A Stable Diffusion pipeline from the user's disk (a diffusers folder, optionally with a LoRA) as a
class-conditional generator, searched the way the GenAI-TIG benchmark searched it.

**Classes are prompts.** Each class has one prompt (by default "a photo of {class}" with the class's name);
the empty prompt (or a negative prompt) is the unconditional one of classifier-free guidance.

**The genome is the initial latent noise** x_T, `latent_channels × (resolution / vae_scale)²` values
(16,384 for Stable Diffusion v1.5 at 512 × 512). An image is a deterministic function of (x_T, class):
DDIM with η = 0 over `steps` steps, the noise schedule rescaled to zero terminal SNR (Lin et al., 2024: the
last step of the schedule is pure noise, as x_T is drawn), classifier-free
guidance `guidance` (3.5) for a search's seeds and `search_guidance` (1.4) inside the search, as the
benchmark did: strong guidance makes seeds the classifier accepts, weak guidance leaves the search room
to move. The VAE's output is mapped to [0, 1], resized (bilinear, antialiased) to the classifier's
input and, for a grey classifier, converted to luma (ITU-R BT.601).

The steps keep the pipeline's own spacing ("leading" with an offset of 1 for v1.5: 15 steps start at t = 933).
Zero terminal SNR makes ᾱ of the last step exactly 0, where a noise-predicting (ε) network's estimate of the
clean image divides by √ᾱ = 0: "trailing" spacing, which starts there, is replaced by "leading" for such a
network (a v-predicting one may keep it).

**Nothing is fetched and nothing is unpickled.** Components are read with `local_files_only` from
safetensors files only; a pipeline whose weights exist only as pickles (`.bin`, `.ckpt`) is refused.
A LoRA (a safetensors file diffusers' `load_lora_weights` reads, through peft) is fused into the UNet
and text encoder when the generator is loaded, so a search pays nothing for it.

On CUDA the networks run in float16; on the CPU in float32, which is practical for small pipelines.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.generation.diffusion import ddim_sampler
from workbench.core.generation.protocol import IMAGE_SHAPE, Generator

PIPELINE = "pipeline"  # the diffusers folder, inside the generator folder
LORA = "lora.safetensors"
COMPONENTS = ("unet", "vae", "text_encoder", "tokenizer", "scheduler")
WEIGHT_STEMS = {"unet": "diffusion_pytorch_model", "vae": "diffusion_pytorch_model", "text_encoder": "model"}
PICKLES = (".bin", ".ckpt", ".pt", ".pth", ".pkl")
INSTALL = "pip install 'dl-testing-workbench[stable-diffusion]' (transformers and peft)"
LUMA = (0.299, 0.587, 0.114)


@functools.lru_cache(maxsize=1)
def libraries():
    """diffusers' and transformers' classes, imported offline and quiet (a failure is not cached)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import diffusers
        import transformers
        from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
        from transformers import CLIPTextModel, CLIPTokenizer
    except Exception as exc:  # not installed, or broken
        raise WorkbenchError(f"Stable Diffusion pipelines need diffusers and transformers, which could not be "
                             f"imported ({exc}).", f"Install them: {INSTALL}.") from exc
    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return {"unet": UNet2DConditionModel, "vae": AutoencoderKL, "text_encoder": CLIPTextModel,
            "tokenizer": CLIPTokenizer, "scheduler": DDIMScheduler, "pipeline": StableDiffusionPipeline}


def resolve_pipeline_folder(path) -> Path:
    """The pipeline folder `path` names: the folder itself, or for a Hugging Face cache entry
    (`models--owner--name`) the snapshot its `refs/main` points to."""
    folder = Path(path).expanduser().absolute()
    if not folder.is_dir():
        raise WorkbenchError(f"{folder} is not a folder.", "Give the folder of a diffusers pipeline (it holds "
                             "model_index.json, unet/, vae/, text_encoder/, tokenizer/ and scheduler/).")
    if not (folder / "model_index.json").is_file() and (folder / "snapshots").is_dir():
        ref = folder / "refs" / "main"
        snapshots = sorted(p for p in (folder / "snapshots").iterdir() if p.is_dir())
        chosen = folder / "snapshots" / ref.read_text().strip() if ref.is_file() else None
        if chosen is None or not chosen.is_dir():
            if len(snapshots) != 1:
                raise WorkbenchError(f"{folder} is a Hugging Face cache entry with {len(snapshots)} snapshots and no "
                                     "refs/main.", "Give one of its snapshots/… folders.")
            chosen = snapshots[0]
        folder = chosen
    return folder


def pipeline_files(folder: Path) -> tuple[list[str], str]:
    """The files of `folder` a generator needs (relative paths) and the weights' variant ("" or e.g.
    "fp16"); refuses a folder that is no Stable Diffusion pipeline, or whose weights are pickles only."""
    index = folder / "model_index.json"
    try:
        listed = json.loads(index.read_text())
    except (OSError, ValueError) as exc:
        raise WorkbenchError(f"{folder} is not a diffusers pipeline: {index.name} is missing or not JSON.",
                             "Give the folder that holds model_index.json (e.g. a snapshot folder of the Hugging "
                             "Face cache).", details=str(exc)) from exc
    missing = [c for c in COMPONENTS if not isinstance(listed, dict) or not (folder / c).is_dir()]
    if missing:
        name = listed.get("_class_name", "?") if isinstance(listed, dict) else "?"
        raise WorkbenchError(f"{folder} ({name}) lacks {', '.join(missing)}: it is not a Stable Diffusion pipeline "
                             "of one text encoder.", "Give a Stable Diffusion 1.x or 2.x pipeline folder.")
    files = ["model_index.json", "scheduler/scheduler_config.json"]
    files += sorted(f"tokenizer/{p.name}" for p in (folder / "tokenizer").iterdir()
                    if p.is_file() and p.suffix in (".json", ".txt"))
    variants = set()
    for component, stem in WEIGHT_STEMS.items():
        present = sorted(p.name for p in (folder / component).iterdir() if p.is_file())
        weights = [n for n in present if n.startswith(stem) and ".safetensors" in n]
        if not weights:
            pickled = [n for n in present if n.endswith(PICKLES)]
            raise WorkbenchError(f"{folder / component} holds no safetensors weights" + (
                f" (only {', '.join(pickled)}, pickle files the workbench does not open: loading them can run code)"
                if pickled else "") + ".", "Convert the pipeline to safetensors (diffusers' save_pretrained with "
                "safe_serialization=True), or give a folder that has them.")
        plain = [n for n in weights if n.startswith(f"{stem}.safetensors") or n.startswith(f"{stem}-")]
        variant = "" if plain else weights[0][len(stem) + 1:].split(".")[0]
        chosen = plain or [n for n in weights if n.startswith(f"{stem}.{variant}.")]
        variants.add(variant)
        files += [f"{component}/config.json"] + [f"{component}/{n}" for n in chosen]
    if len(variants) > 1:
        mixed = ", ".join(sorted(v or "plain" for v in variants))
        raise WorkbenchError(f"The weights in {folder} mix variants ({mixed}).",
                             "Give a folder whose UNet, VAE and text encoder are of one variant.")
    absent = [f for f in files if not (folder / f).is_file()]
    if absent:
        raise WorkbenchError(f"{folder} lacks {', '.join(absent)}.", "Copy the whole pipeline folder again.")
    return files, variants.pop()


def place(source: Path, target: Path) -> None:
    """`source` at `target`: a hard link where the file system allows it (no copy of gigabytes), else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source.resolve(), target)
    except OSError:
        shutil.copyfile(source.resolve(), target)


class StableDiffusion(Generator):
    """A local Stable Diffusion pipeline (diffusers folder, optional LoRA): class prompts, the initial
    latent noise as genome. Made by `workbench add-generator diffusers`, not trained here."""

    kind = "stable-diffusion"
    title = "Stable Diffusion"
    conditional = True
    trainable = False
    image_shapes = None  # any: the decoded image is resized and converted to the classifier's input
    presets = {"default": {"prompts": [""], "negative_prompt": "", "steps": 25, "guidance": 3.5,
                           "search_guidance": 1.4, "resolution": 512, "latent_channels": 4, "vae_scale": 8,
                           "lora": False, "lora_scale": 1.0, "variant": ""}}
    weight_files = (f"{PIPELINE}/model_index.json",)

    @classmethod
    def shape_problem(cls, shape: tuple[int, int, int]) -> str | None:
        return None if shape[0] in (1, 3) else "makes grey or RGB images (1 or 3 channels)"

    def __init__(self, num_classes: int = 10, image_shape=IMAGE_SHAPE, **config):
        self.tokenizer = self.ddim_config = self.source = self._ddim = None
        self.files: list[str] = []
        self.digest = ""
        self._embeddings: dict = {}
        super().__init__(num_classes, image_shape, **config)
        prompts = self.config["prompts"]
        if len(prompts) != num_classes:
            raise WorkbenchError(f"The Stable Diffusion generator has {len(prompts)} prompts for {num_classes} "
                                 "classes.", "Give one prompt per class (config.prompts in generator.json).")
        steps = self.config["steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 1000:
            raise WorkbenchError(f"The DDIM steps must be a whole number from 1 to 1000, not {steps!r}.",
                                 "Use 15 to 50 steps.")
        for key in ("guidance", "search_guidance", "lora_scale"):
            value = float(self.config[key])
            if not 0.0 <= value <= 100.0:
                raise WorkbenchError(f"The Stable Diffusion generator's {key.replace('_', ' ')} must be from 0 to "
                                     f"100, not {value}.", "Use the benchmark's guidance 3.5 and search guidance 1.4.")
        side, scale = self.config["resolution"], self.config["vae_scale"]
        if not (isinstance(side, int) and isinstance(scale, int) and scale >= 1 and side >= scale
                and side % scale == 0 and side <= 4096 and 1 <= self.config["latent_channels"] <= 64):
            raise WorkbenchError(f"A resolution of {side!r} does not fit the pipeline's VAE (which shrinks images "
                                 f"{scale!r} times) with {self.config['latent_channels']!r} latent channels.",
                                 f"Use a resolution divisible by {scale!r}, e.g. 512.")

    @property
    def latent_side(self) -> int:
        return self.config["resolution"] // self.config["vae_scale"]

    @property
    def latent_dim(self) -> int:
        return self.config["latent_channels"] * self.latent_side ** 2

    @property
    def decode_batch(self) -> int:
        """As many images per call as hold the latents of a population at 512×512 (25 in float32 on the CPU, 100 in
        float16 on CUDA): a UNet's activations grow with its latents, so a small pipeline decodes many more at
        once. A stop is seen after every DDIM step (`between_steps`)."""
        populations = 4 if self.device.type == "cuda" else 1
        return max(1, populations * 25 * 4 * 64 * 64 // self.latent_dim)

    def build(self):
        from torch import nn

        return nn.ModuleDict()  # the networks are read from the pipeline folder (`load_pipeline`)

    # --- reading a pipeline ----------------------------------------------------------------------

    def load_weights(self, folder: Path) -> None:
        folder = Path(folder)
        pipeline, lora = folder / PIPELINE, folder / LORA if self.config["lora"] else None
        inside = folder.resolve()
        for path in (pipeline, lora, *(p for p in pipeline.rglob("*") if p.is_symlink())):
            if path is not None and not path.resolve().is_relative_to(inside):
                raise WorkbenchError(f"{path} leads out of the generator folder {folder}; only files inside it are "
                                     "read.", "Copy the pipeline's files into the folder (workbench add-generator "
                                     "diffusers makes it so).")
        self.load_pipeline(pipeline, lora)

    def stored_shapes(self, folder: Path) -> dict | None:
        return None  # diffusers checks each component's weights against its own config

    def load_pipeline(self, folder: Path, lora: Path | None = None) -> None:
        """Read the UNet, VAE, text encoder, tokenizer and scheduler of the pipeline `folder` (float32, on the
        CPU), fuse `lora` into them, and check they fit this generator's settings."""
        import torch

        classes = libraries()
        files, variant = pipeline_files(folder)
        if variant != self.config["variant"]:
            raise WorkbenchError(f"The pipeline in {folder} holds {variant or 'plain'} weights, but the generator's "
                                 f"settings say {self.config['variant'] or 'plain'}.",
                                 "Make the generator again with `workbench add-generator diffusers`.")
        options = {"local_files_only": True, "use_safetensors": True, "variant": variant or None,
                   "torch_dtype": torch.float32}
        try:
            nets = {name: classes[name].from_pretrained(str(folder / name), **options)
                    for name in ("unet", "vae", "text_encoder")}
            self.tokenizer = classes["tokenizer"].from_pretrained(str(folder / "tokenizer"), local_files_only=True)
            scheduler = classes["scheduler"].from_pretrained(str(folder / "scheduler"), local_files_only=True)
        except Exception as exc:
            raise WorkbenchError(f"diffusers could not read the pipeline in {folder}: {exc}",
                                 "The folder is damaged or of another kind; give a Stable Diffusion pipeline folder.",
                                 details=repr(exc)) from exc
        if lora is not None:
            self._fuse_lora(classes, nets, scheduler, lora)
        self._check_fit(folder, nets)
        self.ddim_config, self._ddim = {**scheduler.config, "rescale_betas_zero_snr": True}, None
        if scheduler.config.get("prediction_type", "epsilon") == "epsilon" and \
                scheduler.config.get("timestep_spacing") == "trailing":  # it would start at ᾱ = 0 (module docstring)
            self.ddim_config["timestep_spacing"] = "leading"
        for net in nets.values():
            net.requires_grad_(False).eval()
        self.net = torch.nn.ModuleDict(nets)
        self._embeddings = {}
        self.device = torch.device("cpu")
        self.source = (folder, files, lora)
        self.files = [f"{PIPELINE}/{f}" for f in files] + ([LORA] if lora is not None else [])
        self.weight_files = tuple(self.files)
        from workbench.core.models.model_io import weights_digest

        self.digest = weights_digest(self.net.state_dict())  # of the float32 weights, whatever device follows

    def _fuse_lora(self, classes, nets, scheduler, lora: Path) -> None:
        if not lora.is_file():
            raise WorkbenchError(f"The LoRA file {lora} is missing.", "Copy it again, or give --lora FILE.")
        if lora.suffix != ".safetensors":
            raise WorkbenchError(f"{lora} is not a safetensors file; LoRA weights in pickle files are not opened "
                                 "(loading them can run code).", "Give the LoRA as a .safetensors file.")
        pipe = classes["pipeline"](vae=nets["vae"], text_encoder=nets["text_encoder"], tokenizer=self.tokenizer,
                                   unet=nets["unet"], scheduler=scheduler, safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
        try:
            pipe.load_lora_weights(str(lora.parent), weight_name=lora.name)
            pipe.fuse_lora(lora_scale=float(self.config["lora_scale"]))
            pipe.unload_lora_weights()  # the fused weights stay; the adapters' layers go
        except Exception as exc:
            raise WorkbenchError(f"The LoRA {lora} could not be applied to this pipeline: {exc}",
                                 "Give a LoRA trained for this pipeline (diffusers' or kohya's format); peft must be "
                                 f"installed ({INSTALL}).", details=repr(exc)) from exc

    def _check_fit(self, folder: Path, nets: dict) -> None:
        unet, vae, text = nets["unet"], nets["vae"], nets["text_encoder"]
        scale = 2 ** (len(vae.config.block_out_channels) - 1)
        found = {"latent_channels": unet.config.in_channels, "vae_scale": scale}
        differ = [f"{k} {v} vs {self.config[k]}" for k, v in found.items() if v != self.config[k]]
        if differ:
            raise WorkbenchError(f"The pipeline in {folder} does not fit the generator's settings "
                                 f"({', '.join(differ)}).",
                                 "Make the generator again with `workbench add-generator diffusers`.")
        if unet.config.cross_attention_dim != text.config.hidden_size:
            raise WorkbenchError(f"The UNet in {folder} attends to {unet.config.cross_attention_dim} features, but its "
                                 f"text encoder gives {text.config.hidden_size}.", "The folder mixes two pipelines.")
        halvings = 2 ** (len(unet.config.block_out_channels) - 1)
        if self.latent_side % halvings:
            raise WorkbenchError(f"A resolution of {self.config['resolution']} gives latents of side "
                                 f"{self.latent_side}, which the UNet's {halvings}-fold downsampling does not divide.",
                                 f"Use a resolution divisible by {halvings * scale}.")

    # --- decoding -------------------------------------------------------------------------------

    def forward_decode(self, z, y):
        return self._sample(z, y, float(self.config["search_guidance"]))

    def forward_seed_decode(self, z, y):
        return self._sample(z, y, float(self.config["guidance"]))

    def prompt_embeddings(self):
        """The text encoder's output for every class prompt and, last, the unconditional prompt."""
        import torch

        dtype = self.net["text_encoder"].dtype
        key = (str(self.device), dtype)
        if key not in self._embeddings:
            prompts = [*self.config["prompts"], self.config["negative_prompt"]]
            tokens = self.tokenizer(prompts, padding="max_length", max_length=self.tokenizer.model_max_length,
                                    truncation=True, return_tensors="pt")
            with torch.inference_mode():
                self._embeddings = {key: self.net["text_encoder"](tokens.input_ids.to(self.device))[0]}
        return self._embeddings[key]

    def ddim(self):
        """The DDIM sampler for the configured steps (`ddim_sampler`)."""
        self._ddim = ddim_sampler(self._ddim, libraries()["scheduler"], self.ddim_config, int(self.config["steps"]))
        return self._ddim

    def _sample(self, z, y, guidance: float):
        import torch
        import torch.nn.functional as F

        if self.ddim_config is None:
            raise WorkbenchError("The Stable Diffusion generator has no pipeline loaded.",
                                 "Load it from its folder (workbench generators DIR).")
        unet, vae = self.net["unet"], self.net["vae"]
        ddim = self.ddim()
        n, side = len(z), self.latent_side
        latents = z.reshape(n, self.config["latent_channels"], side, side).to(unet.dtype) * ddim.init_noise_sigma
        embeddings = self.prompt_embeddings()
        labelled, free = embeddings[y], embeddings[-1:].expand(n, *embeddings.shape[1:])
        guided = guidance != 1.0
        context = torch.cat([free, labelled]) if guided else labelled
        for t in ddim.timesteps:
            model_input = ddim.scale_model_input(torch.cat([latents, latents]) if guided else latents, t)
            noise = unet(model_input, t.to(latents.device), encoder_hidden_states=context).sample
            if guided:
                unconditional, conditional = noise.chunk(2)
                noise = unconditional + guidance * (conditional - unconditional)
            latents = ddim.step(noise, t, latents, eta=0.0).prev_sample.to(unet.dtype)  # float16 stays float16
            self.between_steps()
        scaled = latents / vae.config.scaling_factor
        if getattr(vae.config, "shift_factor", None):
            scaled = scaled + vae.config.shift_factor
        # the VAE's activations are large: eight 512×512 images at a time, more of smaller ones
        piece = max(1, 8 * 512 ** 2 // self.config["resolution"] ** 2)
        images = torch.cat([vae.decode(part).sample for part in scaled.split(piece)])
        images = ((images.float() + 1.0) / 2.0).clamp(0.0, 1.0)
        channels, height, width = self.image_shape
        if images.shape[-2:] != (height, width):
            images = F.interpolate(images, size=(height, width), mode="bilinear", antialias=True, align_corners=False)
        if channels == 1:
            images = sum(w * images[:, i:i + 1] for i, w in enumerate(LUMA))
        return images.clamp(0.0, 1.0)

    # --- what this kind does not do ------------------------------------------------------------

    def optimisers(self, lr: float) -> dict:
        raise WorkbenchError("A Stable Diffusion generator is not trained by the workbench.",
                             "Make one from a diffusers pipeline folder: workbench add-generator diffusers DIR.")

    def train_step(self, x, y, optimisers: dict, rng) -> dict:
        return self.optimisers(0.0)

    def round_to_half(self) -> None:
        raise WorkbenchError("A Stable Diffusion generator's files are the pipeline's own; they are not rounded.",
                             "Export it without --half (on CUDA it runs in float16 anyway).")

    # --- devices and files -----------------------------------------------------------------------

    def to(self, device) -> "StableDiffusion":
        """On CUDA in float16 (with batches of several populations: `decode_batch`), elsewhere in float32."""
        import torch

        self.device = torch.device(device)
        half = self.device.type == "cuda"
        self.net.to(self.device, torch.float16 if half else torch.float32)
        return self

    def weights_sha256(self) -> str:
        return self.digest

    def versions(self) -> dict:
        import diffusers
        import transformers

        out = {"diffusers": diffusers.__version__, "transformers": transformers.__version__}
        if self.config["lora"]:
            import peft

            out["peft"] = peft.__version__
        return out

    def save_weights(self, folder: Path, half: bool = False) -> None:
        """The pipeline's files as they were read (hard links where possible) and the LoRA file."""
        if self.source is None:
            raise WorkbenchError("The Stable Diffusion generator has no pipeline loaded.", "Load it first.")
        source, files, lora = self.source
        for name in files:
            place(source / name, Path(folder) / PIPELINE / name)
        if lora is not None:
            place(lora, Path(folder) / LORA)
