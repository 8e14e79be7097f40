"""DPO on image rows: rendered text prompts and answers plus image files, for TRL's vision collator.

TRL's ``DataCollatorForVisionPreference`` runs the model's processor per batch: it expands each image
token of the prompt text and makes the pixels, so the images really reach both the policy and the
reference. Gym hands it prompts and answers already rendered with the run's chat template (the same
text SFT trains on, image placeholders in place) rather than conversations, because TRL would render
conversations with the processor's own template and insert images before the first user turn.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datasets import Dataset


def _render(tokenizer: Any, messages: list[dict[str, Any]], *, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def vision_preference_rows(rows: Dataset, tokenizer: Any) -> Dataset:
    """``{"prompt", "chosen", "rejected"}`` as rendered text plus ``images`` (file paths), one row each."""
    from datasets import Dataset

    out = []
    for row in rows.select_columns(["messages", "chosen", "rejected", "images", "source", "index"]):
        prompt = json.loads(row["messages"])
        prompt_text = _render(tokenizer, prompt, generation_prompt=True)
        item: dict[str, Any] = {"prompt": prompt_text, "images": list(row["images"] or [])}
        for side in ("chosen", "rejected"):
            full = _render(tokenizer, [*prompt, json.loads(row[side])], generation_prompt=False)
            if not full.startswith(prompt_text):
                raise ValueError(
                    f"dataset '{row['source']}' row {row['index']}: the chat template renders the prompt "
                    f"differently with the {side} answer after it, so the answer cannot be separated; "
                    "use a template whose prompt is a prefix of the conversation"
                )
            item[side] = full[len(prompt_text) :]
        out.append(item)
    return Dataset.from_list(out)
