"""Conversations as lists of turns: sharegpt (``from``/``value``, roles human/gpt/system/function_call/
observation) and openai (``role``/``content`` with ``tool_calls``). The turn reader is shared with the
preference and kto formats, whose prompts are conversations in either style."""

from __future__ import annotations

from typing import Any

from gym.data.example import Example, Message
from gym.data.formats.base import (
    Context,
    attach_media,
    check_answers,
    check_order,
    maybe_json,
    parse_tool_calls,
    parse_tools,
    text_of,
)
from gym.data.report import BadRow

# Default tag names per style; gym.toml's `tags` table overrides any of them.
STYLE_TAGS: dict[str, dict[str, str]] = {
    "sharegpt": {
        "role": "from",
        "content": "value",
        "user": "human",
        "assistant": "gpt",
        "system": "system",
        "observation": "observation",
        "function": "function_call",
    },
    "openai": {
        "role": "role",
        "content": "content",
        "user": "user",
        "assistant": "assistant",
        "system": "system",
        "observation": "tool",
        "function": "function_call",
    },
}
INTERNAL_ROLE = {"user": "user", "assistant": "assistant", "system": "system", "observation": "tool"}


def pick_column(row: dict[str, Any], ctx: Context, role: str, candidates: tuple[str, ...]) -> str:
    """The remapped column if gym.toml names one, else the first conventional name the row has."""
    if role in ctx.columns:
        return ctx.columns[role]
    return next((name for name in candidates if row.get(name) is not None), candidates[0])


def detect_style(turn: Any, ctx: Context) -> str:
    """sharegpt when the turns use ``from`` (or a remapped role tag other than ``role``), else openai."""
    role_tag = ctx.tags.get("role")
    if role_tag is not None:
        return "openai" if role_tag == "role" else "sharegpt"
    return "sharegpt" if isinstance(turn, dict) and "from" in turn else "openai"


def read_turns(turns: Any, ctx: Context, style: str | None = None) -> list[Message]:
    """Turn dicts into Messages, mapping the dataset's role names onto system/user/assistant/tool."""
    turns = maybe_json(turns, "the conversation")
    if isinstance(turns, dict):
        turns = [turns]
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise BadRow("wrong field type", "the conversation should be a list of turn objects")
    style = style or detect_style(turns[0] if turns else None, ctx)
    tags = {**STYLE_TAGS[style], **ctx.tags}
    roles = {tags[name]: name for name in ("user", "assistant", "system", "observation", "function")}
    if style == "openai":
        roles.setdefault("developer", "system")
    messages: list[Message] = []
    for position, turn in enumerate(turns):
        role = turn.get(tags["role"])
        kind = roles.get(role) if isinstance(role, str) else None
        if kind is None:
            raise BadRow("unknown role", f"turn {position} has role {role!r}")
        content = turn.get(tags["content"])
        if kind == "function":
            messages.append(Message(role="assistant", content="", tool_calls=parse_tool_calls(content)))
            continue
        images: list[str] = []
        text = content_text(content, position, images)
        message = Message(role=INTERNAL_ROLE[kind], content=ctx.fill(text), images=images)  # type: ignore[arg-type]
        if turn.get("tool_calls"):
            message.tool_calls = parse_tool_calls(turn["tool_calls"])
        reasoning = turn.get("reasoning_content") or turn.get("reasoning")
        if isinstance(reasoning, str):
            message.reasoning = ctx.fill(reasoning)
        if message.role == "tool":
            name = turn.get("name")
            previous = messages[-1].tool_calls if messages else []
            message.name = name if isinstance(name, str) else previous[0].name if len(previous) == 1 else None
        messages.append(message)
    return messages


def content_text(content: Any, position: int, images: list[str] | None = None) -> str:
    """Turn content: a string, null (an assistant turn that only calls tools), or OpenAI content parts.

    Image parts (``image_url`` / ``image``) leave an ``<image>`` marker in the text and their reference
    in ``images``; other part types are refused.
    """
    if content is None:
        return ""
    if isinstance(content, list):
        from gym.data.vision import MARKER, part_image

        text = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                text.append(str(part.get("text") or ""))
            elif kind in ("image_url", "image") and images is not None:
                images.append(part_image(part, position))
                text.append(MARKER)
            else:
                raise BadRow("wrong field type", f"turn {position} has a content part of type {kind!r}")
        return "".join(text)
    return text_of(content, f"turn {position} content")


def read_conversation(row: dict[str, Any], ctx: Context, style: str | None) -> list[Message]:
    """The row's conversation plus its ``system`` column, which a leading system turn overrides."""
    column = pick_column(row, ctx, "messages", ("conversations", "messages"))
    turns = row.get(column)
    if turns is None:
        raise BadRow("missing field", f"no {column!r} value")
    messages = read_turns(turns, ctx, style)
    system = row.get(ctx.column("system", "system"))
    if isinstance(system, str) and system and not (messages and messages[0].role == "system"):
        messages.insert(0, Message(role="system", content=ctx.fill(system)))
    return messages


def chat_example(row: dict[str, Any], ctx: Context, style: str) -> Example:
    messages = read_conversation(row, ctx, style)
    check_order(messages, ends_with="assistant", parallel_tools=style == "openai")
    check_answers(messages)
    example = Example(messages=messages, tools=parse_tools(row.get(ctx.column("tools", "tools"))))
    return attach_media(example, row, ctx)


def convert_sharegpt(row: dict[str, Any], ctx: Context) -> Example:
    """sharegpt: function_call turns become assistant tool calls, observation turns become tool turns."""
    return chat_example(row, ctx, "sharegpt")


def convert_openai(row: dict[str, Any], ctx: Context) -> Example:
    """openai: messages of role/content; several tool results may follow one assistant turn."""
    return chat_example(row, ctx, "openai")
