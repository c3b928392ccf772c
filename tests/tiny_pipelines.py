"""A Stable Diffusion pipeline small enough for a test, built in code as diffusers' own tests build theirs: a
two-level UNet with cross-attention, a two-level VAE (latents a quarter of the pixels), a two-layer CLIP text
encoder and a character-level tokenizer whose vocabulary this module writes. Random weights, seeded."""

from __future__ import annotations

import json
import string
from pathlib import Path

SIDE = 16  # the pipeline's own resolution: latents of 4 × 8 × 8


def tiny_pipeline(folder: Path, seed: int = 0) -> Path:
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(seed)
    unet = UNet2DConditionModel(block_out_channels=(8, 16), layers_per_block=1, sample_size=SIDE // 2, in_channels=4,
                                out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=16,
                                norm_num_groups=4, attention_head_dim=4)
    vae = AutoencoderKL(block_out_channels=(8, 16), in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        norm_num_groups=4, sample_size=SIDE)
    text = CLIPTextModel(CLIPTextConfig(bos_token_id=0, eos_token_id=1, pad_token_id=1, hidden_size=16,
                                        intermediate_size=32, num_attention_heads=2, num_hidden_layers=2,
                                        vocab_size=200, max_position_embeddings=24))
    words = folder / "words"
    words.mkdir(parents=True)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in string.ascii_lowercase + string.digits + "-_/":
        vocab[c], vocab[c + "</w>"] = len(vocab), len(vocab) + 1
    (words / "vocab.json").write_text(json.dumps(vocab))
    (words / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(words / "vocab.json"), str(words / "merges.txt"), model_max_length=24)
    # Stable Diffusion v1.5's schedule
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    out = folder / "pipeline"
    pipe.save_pretrained(str(out), safe_serialization=True)
    return out


def tiny_lora(pipeline: Path, file: Path, seed: int = 1) -> Path:
    """A LoRA of rank 2 on the UNet's attention projections, with random (non-zero) weights: it changes the images."""
    import torch
    from diffusers import StableDiffusionPipeline, UNet2DConditionModel
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    torch.manual_seed(seed)
    unet = UNet2DConditionModel.from_pretrained(str(pipeline / "unet"), local_files_only=True)
    unet.add_adapter(LoraConfig(r=2, lora_alpha=2, init_lora_weights=False,
                                target_modules=["to_q", "to_k", "to_v", "to_out.0"]))
    StableDiffusionPipeline.save_lora_weights(str(file.parent), unet_lora_layers=get_peft_model_state_dict(unet),
                                              weight_name=file.name)
    return file
