"""Vision-language models: telling one from a text-only model, and the processor parts Gym uses.

Gym tokenizes and masks conversations itself (templates, answer-only loss, over-long handling); a
vision-language model adds only two things, both taken from the model's own processor so any
architecture loaded through ``AutoProcessor`` works: how many image tokens one image costs
(``_get_num_multimodal_tokens``, the call vLLM uses too) and the pixel tensors its image processor
makes. The model itself loads through ``AutoModelForImageTextToText``.

:func:`is_vision_source` is cheap (a JSON read, no torch), so `gym validate` can use it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.model.builtin import BUILTIN_MODELS, BUILTIN_PREFIX

if TYPE_CHECKING:
    from gym.config.root import GymConfig

# Keys of a config.json that only vision-language checkpoints have.
VISION_CONFIG_KEYS = ("vision_config", "vision_tower", "mm_vision_tower", "visual")
MARKER = "<image>"  # the dataset-side placeholder (LLaMA-Factory's): one per image, where it goes


def config_is_vision(data: dict[str, Any]) -> bool:
    """Whether a parsed config.json describes a vision-language model."""
    return (
        any(key in data for key in VISION_CONFIG_KEYS)
        or "image_token_index" in data
        or ("image_token_id" in data and "text_config" in data)
    )


def is_vision_source(config: GymConfig) -> bool | None:
    """True/False when ``model.name_or_path`` is known to be vision-language or text-only, None if unknown.

    Built-in models and local folders are answered from their config.json; a Hub id is answered only
    when its config.json is already in the local cache (nothing is downloaded here).
    """
    name = config.model.name_or_path
    if name.startswith(BUILTIN_PREFIX):
        spec = BUILTIN_MODELS.get(name.removeprefix(BUILTIN_PREFIX))
        return None if spec is None else type(spec).__name__ == "TinyVLSpec"
    folder = config.resolve_path(name)
    path: Path | None = folder / "config.json" if folder.is_dir() else None
    if path is None:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(name, "config.json", revision=config.model.revision)
        except Exception:  # not a valid repo id: the loader says so later
            return None
        path = Path(cached) if isinstance(cached, str) else None
    if path is None or not path.is_file():
        return None
    try:
        return config_is_vision(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def is_vision_model(config: GymConfig) -> bool:
    """:func:`is_vision_source`, falling back to loading the config through transformers (may download)."""
    known = is_vision_source(config)
    if known is not None:
        return known
    from transformers import AutoConfig

    from gym.model.loading import from_pretrained

    loaded = from_pretrained(AutoConfig, config)
    return config_is_vision(loaded.to_dict())


def load_processor(config: GymConfig, tokenizer: Any = None) -> Any:
    """The model's ``AutoProcessor``; ``tokenizer`` (Gym's, with the chosen chat template) replaces its own."""
    from transformers import AutoProcessor

    from gym.model.loading import ModelError, from_pretrained

    processor = from_pretrained(AutoProcessor, config)
    if not hasattr(processor, "image_processor"):
        raise ModelError(
            f"model '{config.model.name_or_path}' has no image processor (AutoProcessor gave "
            f"{type(processor).__name__}); image rows need a vision-language model"
        )
    if tokenizer is not None:
        processor.tokenizer = tokenizer
    return processor


def image_token(processor: Any) -> str:
    """The token the language model sees once per image patch (``<image>``, ``<|image_pad|>``, ...)."""
    token = getattr(processor, "image_token", None)
    if not token:
        from gym.model.loading import ModelError

        raise ModelError(f"{type(processor).__name__} does not name its image token; Gym cannot place images")
    return str(token)


def image_placeholder(processor: Any, tokenizer: Any) -> str:
    """What a dataset's ``<image>`` marker becomes in the rendered text for this model.

    Qwen2-VL-style models wrap the image token in ``<|vision_start|>…<|vision_end|>``; LLaVA-style
    models use the bare token.
    """
    token = image_token(processor)
    vocab = tokenizer.get_vocab()
    start = getattr(processor, "vision_start_token", None) or "<|vision_start|>"
    end = getattr(processor, "vision_end_token", None) or "<|vision_end|>"
    if token != MARKER and start in vocab and end in vocab:
        return f"{start}{token}{end}"
    return token


def image_token_id(processor: Any, tokenizer: Any) -> int:
    return int(tokenizer.convert_tokens_to_ids(image_token(processor)))


def image_token_counts(processor: Any, sizes: list[tuple[int, int]]) -> list[int]:
    """Image tokens each image of ``(height, width)`` costs after the processor's resizing."""
    if not sizes:
        return []
    counter = getattr(processor, "_get_num_multimodal_tokens", None)
    try:
        return [int(n) for n in counter(image_sizes=[list(s) for s in sizes]).num_image_tokens]  # type: ignore[misc]
    except (TypeError, KeyError, AttributeError, ValueError):
        # Some processors' counters assume one image processor (LLaVA's reads CLIP's crop_size, which a
        # SigLIP tower has not): ask the processor itself how it expands a blank image of that size.
        return [_measured_count(processor, size) for size in sizes]


def _measured_count(processor: Any, size: tuple[int, int]) -> int:
    cache = processor.__dict__.setdefault("_gym_image_tokens", {})
    if size not in cache:
        from PIL import Image

        token = image_token(processor)
        blank = Image.new("RGB", (size[1], size[0]))
        ids = processor(text=[token], images=[blank], return_tensors="np")["input_ids"][0]
        token_id = processor.tokenizer.convert_tokens_to_ids(token)
        cache[size] = int(sum(1 for t in ids if t == token_id))
    return cache[size]


def max_image_pixels(processor: Any) -> int | None:
    """The largest image (in pixels) the processor accepts as is, where it states one (Qwen2-VL's max_pixels)."""
    image_processor = processor.image_processor
    value = getattr(image_processor, "max_pixels", None)
    size = getattr(image_processor, "size", None)
    if value is None and isinstance(size, dict):
        value = size.get("max_pixels")
    return int(value) if value else None


def pixel_inputs(processor: Any, images: list[Any]) -> dict[str, Any]:
    """The image processor's tensors for ``images`` (``pixel_values`` plus e.g. ``image_grid_thw``)."""
    out = processor.image_processor(images=images, return_tensors="pt")
    return dict(out)


def processor_fingerprint(processor: Any) -> dict[str, Any]:
    """What about the processor decides prepared rows (part of the data cache key)."""
    return {
        "class": type(processor).__name__,
        "image_token": getattr(processor, "image_token", None),
        "image_processor": processor.image_processor.to_dict(),
        "patch_size": getattr(processor, "patch_size", None),
    }


def save_processor(config: GymConfig, tokenizer: Any, folder: Path) -> None:
    """Beside trained vision-language weights, the processor (so the folder loads through AutoProcessor)."""
    if is_vision_source(config):
        load_processor(config, tokenizer).save_pretrained(str(folder))


@dataclass
class ProcessorTokens:
    """:class:`gym.data.vision_model.ImageTokens` over a loaded processor and Gym's tokenizer."""

    processor: Any
    tokenizer: Any

    def placeholder(self) -> str:
        return image_placeholder(self.processor, self.tokenizer)

    def image_token(self) -> str:
        return image_token(self.processor)

    def image_token_id(self) -> int:
        return image_token_id(self.processor, self.tokenizer)

    def token_counts(self, sizes: list[tuple[int, int]]) -> list[int]:
        return image_token_counts(self.processor, sizes)

    def max_pixels(self) -> int | None:
        return max_image_pixels(self.processor)

    def fingerprint(self) -> dict[str, Any]:
        return processor_fingerprint(self.processor)


@dataclass
class ConfiguredVision:
    """:class:`gym.data.vision_model.VisionModel` for the model a gym.toml names."""

    config: GymConfig

    def known(self) -> bool | None:
        return is_vision_source(self.config)

    def confirmed(self) -> bool:
        return is_vision_model(self.config)

    def tokens(self, tokenizer: Any) -> ProcessorTokens:
        return ProcessorTokens(load_processor(self.config, tokenizer), tokenizer)


def model_vision(config: GymConfig) -> ConfiguredVision:
    """What data preparation asks about ``config``'s model when rows carry images."""
    return ConfiguredVision(config)
