"""GRPO on image rows: TRL's GRPOTrainer with the model's processor, the images where the rows put them.

TRL (1.x) samples a vision prompt by rendering it with the processor's ``apply_chat_template`` on
structured content (``{"type": "image"}`` and ``{"type": "text"}`` blocks) and lets the processor expand
each image into its tokens and make the pixels; the policy's forward pass gets the same pixels. Two things
of Gym's have to meet that:

- **where the images go.** Left to itself, TRL puts every image of a row before the first user turn's text.
  Gym hands it prompts already in blocks, an image block at each ``<image>`` marker of the row, which TRL
  fills in order with the row's images (files, loaded by the processor);
- **the chat template.** Gym's templates (the official ones it trusts, or its own) take text content. The
  processor renders with the run's template behind a short prelude that turns blocks back into text, with
  the model's image placeholder (:func:`gym.model.vision.image_placeholder`) where each image block was:
  the same text SFT trains on and serving sends.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gym.model.vision import MARKER
from gym.train.methods.rows import prompt_and_reference, require_rows

if TYPE_CHECKING:
    from datasets import Dataset

    from gym.config import GymConfig

# Jinja: ``messages`` with block content become messages with text content (text blocks joined, each
# image block replaced by the placeholder); string content passes as it is.
PRELUDE = """\
{%- set gym_flat = namespace(messages=[]) -%}
{%- for gym_message in messages -%}
    {%- if gym_message['content'] is string or gym_message['content'] is none -%}
        {%- set gym_flat.messages = gym_flat.messages + [gym_message] -%}
    {%- else -%}
        {%- set gym_text = namespace(value='') -%}
        {%- for gym_part in gym_message['content'] -%}
            {%- if gym_part['type'] == 'image' -%}
                {%- set gym_text.value = gym_text.value + GYM_PLACEHOLDER -%}
            {%- elif gym_part['type'] == 'text' -%}
                {%- set gym_text.value = gym_text.value + (gym_part['text'] or '') -%}
            {%- endif -%}
        {%- endfor -%}
        {%- set gym_flat.messages = gym_flat.messages + [{'role': gym_message['role'], 'content': gym_text.value}] -%}
    {%- endif -%}
{%- endfor -%}
{%- set messages = gym_flat.messages -%}
"""


def block_template(template: str, placeholder: str) -> str:
    """``template`` (text content) made to accept block content, images rendered as ``placeholder``."""
    return PRELUDE.replace("GYM_PLACEHOLDER", json.dumps(placeholder)) + template


def blocks(text: str) -> list[dict[str, Any]]:
    """A message's text as content blocks: an image block at each ``<image>`` marker, text around them."""
    parts: list[dict[str, Any]] = []
    for index, piece in enumerate(text.split(MARKER)):
        if index:
            parts.append({"type": "image"})
        if piece:
            parts.append({"type": "text", "text": piece})
    return parts


def vision_prompt_rows(rows: Dataset) -> Dataset:
    """``{"prompt": [block messages], "images": [files], "reference"}``: TRL's conversational prompts with
    an image block where each image goes, the row's image files in the same order."""
    require_rows(rows, "grpo", images=True)
    converted = []
    for row in rows.select_columns(["messages", "reference", "images", "source", "index"]):
        messages, reference = prompt_and_reference(row, "grpo")
        images = list(row["images"] or [])
        markers = sum(str(m.get("content") or "").count(MARKER) for m in messages)
        if markers != len(images):
            raise ValueError(
                f"dataset '{row['source']}' row {row['index']}: its prompt has {markers} <image> marker(s) for "
                f"{len(images)} image(s); GRPO samples from the prompt only, so each image needs its marker there"
            )
        prompt = [{"role": m["role"], "content": blocks(str(m.get("content") or ""))} for m in messages]
        converted.append({"prompt": prompt, "images": images, "reference": reference})
    from datasets import Dataset, Features, Json, List, Value

    features = Features(
        {"prompt": List(Json()), "images": List(Value("string")), "reference": Value("string")}
    )
    return Dataset.from_list(converted, features=features)


def vision_processor(config: GymConfig, tokenizer: Any) -> Any:
    """The model's processor with Gym's tokenizer and the run's chat template, taking block content."""
    from gym.model.vision import image_placeholder, load_processor

    processor = load_processor(config, tokenizer)
    processor.chat_template = block_template(tokenizer.chat_template, image_placeholder(processor, tokenizer))
    return processor
