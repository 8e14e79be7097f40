"""Gym's built-in image task, scored by Gym itself: ``gym_colour`` (which colour is the drawn shape?).

lm-eval's multimodal model type expects a Hub-style processor chat template and images from a Hub
dataset; Gym's own task needs neither: held-out images are generated on the spot
(:mod:`gym.data.builtin_vision`, a random stream the training rows never use), each prompt is rendered
through the tuned model's own chat template exactly as training rendered it, the model's processor
makes the pixels and places the image tokens, and the greedy answer is scored by exact match after
stripping whitespace. The rows land in a cache folder keyed by their content.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from gym.eval.report import TaskScore

COLOUR_TASK = "gym_colour"
COLOUR_ROWS = 100


def colour_test_rows(root: Path | None = None) -> tuple[Path, list[dict[str, Any]]]:
    """The held-out colour rows (written once into the eval cache) and their folder."""
    from gym.data.builtin_vision import colour_rows
    from gym.eval.builtin_tasks import eval_cache_root
    from gym.files import publish_folder

    final = (root or eval_cache_root()) / f"{COLOUR_TASK}-v1-{COLOUR_ROWS}"

    def fill(staging: Path) -> None:
        rows = colour_rows(staging, "test", COLOUR_ROWS, seed=0)
        (staging / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        (staging / "done").write_text("ok\n")

    if not (final / "done").is_file():
        publish_folder(final, fill, "done")
    rows = [json.loads(line) for line in (final / "test.jsonl").read_text(encoding="utf-8").splitlines()]
    return final, rows


def generate_answer(
    model: Any, processor: Any, tokenizer: Any, messages: list[dict], images: list[Any]
) -> str:
    """Greedy answer to ``messages`` (``<image>`` markers in the text) with ``images``."""
    import torch

    from gym.model.vision import image_placeholder

    placeholder = image_placeholder(processor, tokenizer)
    chat = [{**m, "content": m["content"].replace("<image>", placeholder)} for m in messages]
    prompt = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[prompt], images=images or None, return_tensors="pt")
    inputs = {k: v.to(model.device) for k, v in inputs.items()}
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=8,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    return text.split("\n")[0].strip()


def score_colour(model: Any, processor: Any, tokenizer: Any, limit: int | None = None) -> TaskScore:
    """Exact match of the greedy answers on the held-out colour images."""
    from gym.data.vision import open_image

    folder, rows = colour_test_rows()
    rows = rows[:limit] if limit else rows
    hits = 0
    for row in rows:
        answer = row["messages"][-1]["content"]
        images = [open_image(str(folder / path)) for path in row["images"]]
        hits += generate_answer(model, processor, tokenizer, row["messages"][:-1], images) == answer
    value = hits / len(rows)
    return TaskScore(
        task=COLOUR_TASK,
        metric="exact_match",
        value=value,
        source="gym",
        stderr=math.sqrt(value * (1 - value) / max(len(rows) - 1, 1)),
        samples=len(rows),
        higher_is_better=True,
        n_shot=0,
        chat_template=True,
        dataset={"id": f"local:{COLOUR_TASK}", "config": None, "split": "test"},
    )


VISION_TASKS = {COLOUR_TASK: score_colour}
