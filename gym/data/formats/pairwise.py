"""Rows that judge answers: preference (a prompt plus a chosen and a rejected answer, for DPO/RM) and
kto (a conversation whose last answer is labelled desirable or not). Prompts are sharegpt- or
openai-style conversations (detected per row), or alpaca-style/plain prompt strings."""

from __future__ import annotations

from typing import Any

from gym.data.example import Example, Message
from gym.data.formats.alpaca import alpaca_prompt, convert_alpaca
from gym.data.formats.base import Context, attach_media, check_answers, check_order, parse_tools, require
from gym.data.formats.chat import pick_column, read_conversation, read_turns
from gym.data.report import BadRow

TRUE_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def read_answer(value: Any, ctx: Context, what: str) -> tuple[Message, list[Message]]:
    """A chosen/rejected answer: plain text, one turn object, or a whole conversation ending in the
    answer (the HH / UltraFeedback layout), whose earlier turns are returned as the prompt."""
    if isinstance(value, str):
        answer, prefix = Message(role="assistant", content=ctx.fill(value)), []
    else:
        turns = read_turns(value, ctx)
        if not turns:
            raise BadRow("missing field", f"{what} is an empty conversation")
        answer, prefix = turns[-1], turns[:-1]
    if answer.role != "assistant":
        raise BadRow("wrong role order", f"{what} is a {answer.role!r} turn, expected assistant")
    if not answer.content.strip() and not answer.tool_calls:
        raise BadRow("empty assistant turn", f"{what} is empty")
    return answer, prefix


def convert_preference(row: dict[str, Any], ctx: Context) -> Example:
    """``messages`` is the prompt; ``chosen`` and ``rejected`` are the two assistant answers."""
    chosen, chosen_prefix = read_answer(require(row, ctx.column("chosen", "chosen")), ctx, "chosen")
    rejected, _ = read_answer(require(row, ctx.column("rejected", "rejected")), ctx, "rejected")
    if row.get(pick_column(row, ctx, "messages", ("conversations", "messages"))) is not None:
        prompt = read_conversation(row, ctx, None)
    elif chosen_prefix:
        prompt = chosen_prefix
    else:
        prompt = alpaca_prompt(row, ctx, pick_column(row, ctx, "prompt", ("prompt", "instruction")))
    check_order(prompt, ends_with="user", parallel_tools=True)
    check_answers(prompt)
    example = Example(
        messages=prompt,
        chosen=chosen,
        rejected=rejected,
        tools=parse_tools(row.get(ctx.column("tools", "tools"))),
    )
    return attach_media(example, row, ctx)


def read_label(value: Any) -> bool:
    """KTO labels are booleans; CSV files carry them as words, so true/false/yes/no/1/0 are accepted too."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS:
        return TRUE_WORDS[value.strip().lower()]
    raise BadRow("wrong field type", f"label should be true or false, got {value!r}")


def convert_kto(row: dict[str, Any], ctx: Context) -> Example:
    """A conversation ending with the judged answer, plus its boolean ``label`` (``kto_tag`` too)."""
    label = read_label(require(row, pick_column(row, ctx, "label", ("label", "kto_tag"))))
    column = pick_column(row, ctx, "messages", ("conversations", "messages"))
    if row.get(column) is None and row.get(ctx.column("prompt", "instruction")) is not None:
        example = convert_alpaca(row, ctx)
    else:
        messages = read_conversation(row, ctx, None)
        check_order(messages, ends_with="assistant", parallel_tools=True)
        check_answers(messages)
        tools = parse_tools(row.get(ctx.column("tools", "tools")))
        example = attach_media(Example(messages=messages, tools=tools), row, ctx)
    example.label = label
    return example
