"""Serving vision-language models: OpenAI image content parts in, answers about the images out.

`gym serve` on a VL model (a folder whose config.json has a vision tower, e.g. a trained
builtin:tiny-vl) uses :class:`VisionBackend`: requests carry ``image_url`` parts as ``data:`` URLs
(remote http(s) URLs are refused unless the server was started with ``--fetch-remote-images``: a
server that fetches on a client's behalf can be pointed at addresses only it can reach), the
model's own processor makes the pixels and places the image tokens exactly as training did, and
tokens are decoded one at a time with the KV cache, through the same :class:`~gym.engine.sequence.Sequence`
stop/stream logic as the batching engine. Requests are served one after another (no continuous
batching for image prompts).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gym.api.remote_images import FetchPolicy, FetchRefused, fetch_image_bytes
from gym.engine.backend import Chunk, SamplingParams, Stats, TokenizerPrompts
from gym.engine.loading import ModelSource

MARKER = "<image>"


class ImageRequestError(ValueError):
    """An image part the server cannot use; the message names the message and part."""


def is_remote(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def decode_image(url: str, where: str, fetch: FetchPolicy | None = None) -> Any:
    """A ``data:image/...;base64,`` URL (or, when ``fetch`` is given, an http(s) URL) as an RGB PIL image."""
    from PIL import Image, UnidentifiedImageError

    if is_remote(url):
        if fetch is None:
            raise ImageRequestError(
                f"{where}: remote image URLs are not fetched by this server (start it with "
                "--fetch-remote-images to allow it); send the image as a data: URL"
            )
        try:
            raw, what = fetch_image_bytes(url, where, fetch), "the image URL"
        except FetchRefused as error:
            raise ImageRequestError(str(error)) from None
    else:
        head, _, payload = url.partition(",")
        if not head.startswith("data:") or ";base64" not in head:
            raise ImageRequestError(
                f"{where}: image_url must be a base64 data: URL (data:image/png;base64,...)"
            )
        try:
            raw, what = base64.b64decode(payload, validate=True), "the data: URL"
        except (binascii.Error, ValueError):
            raise ImageRequestError(f"{where}: the data: URL is not a readable image") from None
    try:
        with Image.open(io.BytesIO(raw)) as image:
            return image.convert("RGB")
    except (ValueError, UnidentifiedImageError, OSError, Image.DecompressionBombError):
        raise ImageRequestError(f"{where}: {what} is not a readable image") from None


def open_upload(path: str) -> Any:
    """A file uploaded to a chat page as an RGB PIL image; ImageRequestError names it when it is not one."""
    from PIL import Image

    from gym.data.vision import open_image

    try:
        return open_image(path)
    except (OSError, Image.DecompressionBombError):  # PIL's UnidentifiedImageError is an OSError
        raise ImageRequestError(
            f"{Path(path).name} is not an image this chat can read (PNG, JPEG, WebP, GIF, BMP)"
        ) from None


def image_urls(messages: list[Any]) -> list[str]:
    """Every ``image_url`` part's URL, in order (to count remote ones before fetching any)."""
    urls = []
    for message in messages:
        if isinstance(message.content, list):
            for part in message.content:
                data = part.model_dump() if hasattr(part, "model_dump") else dict(part)
                if data.get("type") == "image_url":
                    url = data.get("image_url")
                    urls.append(str((url.get("url") if isinstance(url, dict) else url) or ""))
    return urls


def split_images(
    messages: list[Any], fetch: FetchPolicy | None = None
) -> tuple[list[dict[str, str]], list[Any]]:
    """Template messages (image parts become ``<image>`` markers, in place) and the decoded images.

    ``fetch``: how http(s) URLs are fetched (`gym serve --fetch-remote-images`); None refuses them."""
    out: list[dict[str, str]] = []
    images: list[Any] = []
    for number, message in enumerate(messages):
        content = message.content
        if isinstance(content, list):
            text = []
            for position, part in enumerate(content):
                data = part.model_dump() if hasattr(part, "model_dump") else dict(part)
                if data.get("type") == "image_url":
                    url = data.get("image_url")
                    url = url.get("url") if isinstance(url, dict) else url
                    where = f"messages[{number}].content[{position}]"
                    images.append(decode_image(str(url or ""), where, fetch))
                    text.append(MARKER)
                elif data.get("type") == "text":
                    text.append(str(data.get("text") or ""))
            content = "".join(text)
        role = "system" if message.role == "developer" else message.role
        out.append({"role": role, "content": content or ""})
    return out, images


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
                out = self.model(input_ids=step, past_key_values=out.past_key_values, use_cache=True)

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
