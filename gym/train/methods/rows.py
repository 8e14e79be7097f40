"""Gym's prepared rows as the conversational formats TRL's trainers (and Gym's PPO) take, shared by every method.

Prepared rows carry conversations as JSON text (Arrow cannot hold the varying shapes of tool calls); TRL
wants lists of messages and tokenizes them itself with the chat template the runner has already set.
Converted rows are stored with datasets' ``Json`` feature: a plain struct column would merge the
argument keys of every tool call in the dataset and hand each call ``null`` for the keys it lacks. Bad
rows fail here, before training, with one sentence naming the method and the dataset.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datasets import Dataset

KEPT_KEYS = ("role", "content", "tool_calls")


def chat_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message reduced to what chat templates render: role, content and (when present) tool calls."""
    kept = {key: message[key] for key in KEPT_KEYS if message.get(key)}
    kept.setdefault("role", message.get("role", "assistant"))
    kept.setdefault("content", message.get("content") or "")
    return kept


def conversation(text: str) -> list[dict[str, Any]]:
    """A prepared JSON column (one message or a list of them) as a list of cleaned messages."""
    value = json.loads(text) if text else []
    return [chat_message(m) for m in (value if isinstance(value, list) else [value])]


def tools_text(text: str) -> str | None:
    """The tool schemas of a row as JSON text for TRL, or None when the row has none."""
    tools = json.loads(text) if text else None
    return json.dumps(tools, ensure_ascii=False) if tools else None


def source_names(rows: Dataset, positions: list[int]) -> str:
    """The dataset names of ``positions`` in ``rows``, quoted and comma-separated, for error messages."""
    sources = rows.select_columns(["source"])[positions]["source"] if positions else []
    return ", ".join(f"'{name}'" for name in dict.fromkeys(sources))


def require_rows(rows: Dataset, method: str, *, images: bool = False) -> None:
    """Fail before training when there is nothing to train on or the rows carry images (unless ``images``)."""
    if len(rows) == 0:
        raise ValueError(f"train.method = '{method}' has no training rows left after data preparation")
    if not images and "images" in rows.column_names and any(rows["images"]):
        raise ValueError(
            f"train.method = '{method}' does not support rows with images yet; remove the images column"
        )


def require_preferences(rows: Dataset, method: str, *, images: bool = False) -> None:
    """Fail with one sentence when any row lacks a chosen or a rejected answer."""
    require_rows(rows, method, images=images)
    missing = [
        i for i, (c, r) in enumerate(zip(rows["chosen"], rows["rejected"], strict=True)) if not c or not r
    ]
    if missing:
        raise ValueError(
            f"train.method = '{method}' needs rows with a chosen and a rejected answer, but {len(missing)} of "
            f"{len(rows)} training rows (dataset {source_names(rows, missing)}) have none; "
            "use format = 'preference' for those datasets"
        )


def to_dataset(rows: list[dict[str, Any]], conversation_columns: tuple[str, ...]) -> Dataset:
    """A datasets.Dataset whose conversation columns keep every message exactly (``Json`` feature)."""
    from datasets import Dataset, Features, Json, List, Value

    if rows and all(row.get("tools") is None for row in rows):
        rows = [{k: v for k, v in row.items() if k != "tools"} for row in rows]
    features: dict[str, Any] = {}
    for name in rows[0] if rows else ():
        if name in conversation_columns:
            features[name] = List(Json())
        elif name == "label":
            features[name] = Value("bool")
        else:
            features[name] = Value("string")
    return Dataset.from_list(rows, features=Features(features))


def preference_rows(rows: Dataset, method: str, *, explicit_prompt: bool = True) -> Dataset:
    """Prepared preference rows as TRL's conversational preference format.

    ``explicit_prompt``: ``{"prompt", "chosen", "rejected"}`` (DPO); otherwise the prompt is folded into
    both answers, ``{"chosen": conversation, "rejected": conversation}`` (TRL's implicit-prompt format).
    """
    require_preferences(rows, method)
    converted = []
    for row in rows.select_columns(["messages", "chosen", "rejected", "tools"]):
        prompt = conversation(row["messages"])
        chosen, rejected = conversation(row["chosen"]), conversation(row["rejected"])
        if explicit_prompt:
            item = {"prompt": prompt, "chosen": chosen, "rejected": rejected}
        else:
            item = {"chosen": prompt + chosen, "rejected": prompt + rejected}
        converted.append({**item, "tools": tools_text(row["tools"])})
    columns = ("prompt", "chosen", "rejected")
    return to_dataset(converted, columns)


def prompt_and_reference(row: dict[str, Any], method: str) -> tuple[list[dict[str, Any]], str | None]:
    """A prompt row (or an SFT row, whose final answer becomes the reference when it has none) for GRPO/PPO."""
    messages, reference = conversation(row["messages"]), row["reference"] or None
    if messages and messages[-1]["role"] == "assistant":
        reference = reference or messages[-1]["content"] or None
        messages = messages[:-1]
    if not messages or messages[-1]["role"] != "user":
        raise ValueError(
            f"train.method = '{method}' needs prompts that end with a user turn; use format = 'prompt'"
        )
    return messages, reference
