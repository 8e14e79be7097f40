"""The vision-language engine: prompts with ``<image>`` markers and decoded images in, tokens out.

`gym serve` on a VL model (a folder whose config.json has a vision tower, e.g. a trained
builtin:tiny-vl) uses :class:`VisionBackend`. The HTTP face turns ``image_url`` parts into markers and
PIL images (:mod:`gym.api.images`); here the model's own processor makes the pixels and places the image
tokens exactly as training did, and tokens are decoded one at a time with the KV cache, through the same
:class:`~gym.engine.sequence.Sequence` stop/stream logic as the batching engine. Requests are served one
after another (no continuous batching for image prompts).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from gym.engine.backend import Chunk, SamplingParams, Stats, TokenizerPrompts
from gym.engine.cache_compat import cache_kwargs, output_cache
from gym.engine.loading import ModelSource

MARKER = "<image>"


class ImageRequestError(ValueError):
    """An image part the server cannot use; the message names the message and part."""


class VisionBackend(TokenizerPrompts):
    """A :class:`gym.engine.backend.Backend` over ``AutoModelForImageTextToText`` and its processor."""

    name = "transformers"
    accepts_images = True
    supports_logprobs = True

    def __init__(self, model: Any, tokenizer: Any, processor: Any, model_id: str) -> None:
        self.model, self.tokenizer, self.processor, self.model_id = model, tokenizer, processor, model_id
        text_config = model.config.get_text_config()
        self.context_length = getattr(text_config, "max_position_embeddings", None) or 2048
        eos = model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            self.eos_ids.add(tokenizer.eos_token_id)
        self._lock = threading.Lock()
        self._stats = Stats()
        if next(model.parameters()).device.type == "cpu":  # as the batching engine: the cores left free
            from gym.engine.cputhreads import ThreadPolicy

            ThreadPolicy().apply(force=True)

    @classmethod
    def from_source(cls, source: ModelSource, device: str | None = None, **_: Any) -> VisionBackend:
        from transformers import AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

        from gym.model.device import inference_device

        device = device or inference_device()
        model = AutoModelForImageTextToText.from_pretrained(source.base)
        if source.adapter:
            from peft import PeftModel

            from gym.model.quantized import checkpoint_quantization

            model = PeftModel.from_pretrained(model, source.adapter)
            if checkpoint_quantization(source.base) is None:
                model = model.merge_and_unload()
        tokenizer = AutoTokenizer.from_pretrained(source.tokenizer_path)
        processor = AutoProcessor.from_pretrained(source.tokenizer_path if source.adapter else source.base)
        processor.tokenizer = tokenizer
        model.to(device).eval()
        return cls(model, tokenizer, processor, source.model_id)

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        from gym.model.vision import image_placeholder

        placeholder = image_placeholder(self.processor, self.tokenizer)
        chat = [{**m, "content": m["content"].replace(MARKER, placeholder)} for m in messages]
        return super().encode_chat(chat)

    def _inputs(self, prompt_ids: list[int], images: list[Any]) -> dict[str, Any]:
        """Ids with each image's tokens expanded, plus the processor's pixel tensors."""
        import torch

        from gym.data.report import BadRow
        from gym.data.vision import expand_row
        from gym.model.vision import image_token_counts, image_token_id, pixel_inputs

        ids = prompt_ids
        extra: dict[str, Any] = {}
        if images:
            counts = image_token_counts(self.processor, [(i.height, i.width) for i in images])
            image_id = image_token_id(self.processor, self.tokenizer)
            try:
                ids, _ = expand_row(
                    ids, [0] * len(ids), ["request"] * len(images), image_id=image_id, counts=counts
                )
            except BadRow as error:
                raise ImageRequestError(f"messages: {error.detail}") from None
            extra = pixel_inputs(self.processor, images)
        tensor = torch.tensor([ids], device=self.model.device)
        if "mm_token_type_ids" in getattr(self.processor, "model_input_names", ()):
            extra["mm_token_type_ids"] = (tensor == image_token_id(self.processor, self.tokenizer)).long()
        return {"input_ids": tensor, "attention_mask": torch.ones_like(tensor), **extra}

    def check_images(self, prompt_ids: list[int], images: list[Any]) -> int:
        """Validate the images against the prompt's markers; the prompt length with image tokens."""
        return int(self._inputs(prompt_ids, images)["input_ids"].shape[1])

    def _decode(self, inputs: dict[str, Any], seq: Any) -> None:
        import torch

        with self._lock, torch.inference_mode():
            out = self.model(**inputs, use_cache=True)
            while not seq.done:
                logits = out.logits[0, -1]
                token = seq.sample(logits)
                seq.push(token, seq.token_logprob(token, logits))
                self._stats.generated_tokens += 1
                if seq.done:
                    break
                step = torch.tensor([[token]], device=self.model.device)
                out = self.model(input_ids=step, use_cache=True, **cache_kwargs(output_cache(out)))

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, n: int = 1, images: list[Any] | None = None
    ) -> AsyncIterator[Chunk]:
        from gym.engine.sequence import Sequence

        self._stats.requests += 1
        inputs = self._inputs(prompt_ids, images or [])
        for index in range(n):
            chunks: list[Chunk] = []
            seq = Sequence(
                index=index,
                prompt_ids=list(prompt_ids),
                params=params,
                seed=None if params.seed is None else params.seed + index,
                emit=chunks.append,
                tokenizer=self.tokenizer,
                eos_ids=self.eos_ids,
            )
            try:
                await asyncio.to_thread(self._decode, inputs, seq)
            except Exception as error:  # noqa: BLE001 - one bad request must not kill the server
                seq.fail(f"generation failed: {type(error).__name__}")
            for chunk in chunks:
                yield chunk

    def stats(self) -> dict[str, Any]:
        return self._stats.as_dict()

    def close(self) -> None:
        return None
