"""Rows without a chat to train on: text (documents for continued pretraining) and prompt (a prompt and,
usually, the reference answer that GRPO/PPO reward functions compare generations with)."""

from __future__ import annotations

from typing import Any

from gym.data.example import Example
from gym.data.formats.alpaca import alpaca_prompt
from gym.data.formats.base import Context, attach_media, check_order, parse_tools, require, text_of
from gym.data.formats.chat import pick_column, read_conversation
from gym.data.report import BadRow

REFERENCE_COLUMNS = ("answer", "reference", "solution", "completion", "response", "output")


def convert_text(row: dict[str, Any], ctx: Context) -> Example:
    """The ``text`` column; LLaMA-Factory names it with ``columns.prompt``, which is honoured too."""
    column = ctx.columns.get("text") or ctx.columns.get("prompt") or "text"
    text = text_of(require(row, column), column)
    if not text.strip():
        raise BadRow("empty text", f"{column!r} is empty")
    return Example(text=ctx.fill(text))


def convert_prompt(row: dict[str, Any], ctx: Context) -> Example:
    """A prompt string (``prompt``, + ``query``/``system``) or a conversation, plus a reference answer.

    The reference is required when ``columns.answer`` names its column, else taken from the first
    conventional column present (answer, reference, solution, ...), else from a conversation's final
    assistant turn; a row with none of them is still a usable prompt for reward-model training.
    """
    if row.get(pick_column(row, ctx, "messages", ("conversations", "messages"))) is not None:
        messages = read_conversation(row, ctx, None)
    else:
        messages = alpaca_prompt(
            row, ctx, pick_column(row, ctx, "prompt", ("prompt", "instruction", "question"))
        )
    if "answer" in ctx.columns:
        reference: Any = require(row, ctx.columns["answer"])
    else:
        reference = next((row[c] for c in REFERENCE_COLUMNS if row.get(c) is not None), None)
    if messages and messages[-1].role == "assistant":
        last = messages.pop()
        reference = last.content if reference is None else reference
    if reference is not None and not isinstance(reference, str):
        reference = str(reference)  # numeric answers (GSM8K-style) compare as text
    check_order(messages, ends_with="user", parallel_tools=True)
    example = Example(
        messages=messages,
        reference=ctx.fill(text_of(reference, "answer")) if reference is not None else None,
        tools=parse_tools(row.get(ctx.column("tools", "tools"))),
    )
    return attach_media(example, row, ctx)
