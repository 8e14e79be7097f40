"""``builtin:tiny-vl``: a tiny LLaVA (CLIP vision tower at 32 px, patch 8, plus a 2-layer Llama) built offline.

The vision-language twin of ``builtin:tiny``: tests, the vision quickstart and anyone without network
access get a real checkpoint that loads through ``AutoModelForImageTextToText`` / ``AutoProcessor``
exactly like a Hub LLaVA. The tokenizer is builtin:tiny's (same corpus, same BPE) with one ``<image>``
special token added; the processor is a ``LlavaProcessor`` whose CLIP image processor resizes and
crops every image to 32x32, so each image costs (32 / 8)^2 = 16 image tokens. Same seed, same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

IMAGE_TOKEN = "<image>"


@dataclass(frozen=True)
class TinyVLSpec:
    """Shape of the built-in vision-language model; part of the cache key, so a change rebuilds it."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 2048
    vision_hidden_size: int = 64
    vision_intermediate_size: int = 128
    vision_layers: int = 2
    vision_heads: int = 2
    image_size: int = 32
    patch_size: int = 8
    seed: int = 0
    recipe: int = 1  # bump when the build steps change


def build_processor(spec: TinyVLSpec):  # -> LlavaProcessor
    from transformers import LlavaProcessor

    from gym.model.builtin import BUILTIN_MODELS, build_tokenizer

    try:  # transformers >= 5 without torchvision: the PIL backend, named explicitly (no warning)
        from transformers.models.clip.image_processing_pil_clip import (
            CLIPImageProcessorPil as ImageProcessor,
        )
    except ImportError:  # pragma: no cover - older transformers
        from transformers import CLIPImageProcessor as ImageProcessor

    tokenizer = build_tokenizer(BUILTIN_MODELS["tiny"])
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", IMAGE_TOKEN]})
    size = spec.image_size
    image_processor = ImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=spec.patch_size,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's class token, dropped by the "default" strategy
        image_token=IMAGE_TOKEN,
        chat_template=tokenizer.chat_template,
    )


def build_model(spec: TinyVLSpec, processor):  # -> LlavaForConditionalGeneration
    import torch
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

    from gym.model.builtin import llama_config  # (builtin imports this module at its top)

    tokenizer = processor.tokenizer
    vision = CLIPVisionConfig(
        hidden_size=spec.vision_hidden_size,
        intermediate_size=spec.vision_intermediate_size,
        num_hidden_layers=spec.vision_layers,
        num_attention_heads=spec.vision_heads,
        image_size=spec.image_size,
        patch_size=spec.patch_size,
        projection_dim=spec.vision_hidden_size,
    )
    text = llama_config(spec, tokenizer)
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        tie_word_embeddings=True,
        dtype="float32",
    )
    torch.manual_seed(spec.seed)
    model = LlavaForConditionalGeneration(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def build_vl(spec: TinyVLSpec, target: Path) -> None:
    """Weights, processor (tokenizer with chat template, image processor) into ``target``."""
    processor = build_processor(spec)
    model = build_model(spec, processor)
    model.save_pretrained(target, safe_serialization=True)
    processor.save_pretrained(target)
