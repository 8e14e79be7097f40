"""What every converter shares: the per-dataset context (column and tag remaps, placeholders, the folder
media paths are relative to) and the checks that make a row "bad" the same way in every format."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym.data.example import Example, Message, ToolCall
from gym.data.report import BadRow

PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
MEDIA_MARKERS = {"images": "<image>", "audios": "<audio>"}


@dataclass
class Context:
    """The dataset settings a converter needs, detached from the config so converters stay pure."""

    columns: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    placeholders: dict[str, str] = field(default_factory=dict)
    media_dir: Path = Path(".")
    source: str = ""

    def column(self, role: str, default: str) -> str:
        """The row key for a column role: the remap in gym.toml, else the format's default name."""
        return self.columns.get(role, default)

    def tag(self, role: str, default: str) -> str:
        return self.tags.get(role, default)

    def fill(self, text: str) -> str:
        """Replace ``{{name}}`` with its value from ``placeholders``; unknown names stay as written."""
        if not self.placeholders or "{{" not in text:
            return text
        return PLACEHOLDER.sub(lambda m: self.placeholders.get(m.group(1), m.group(0)), text)


def require(row: dict[str, Any], key: str) -> Any:
    """A row value that must be present: a missing key and a null (arrow's fill for a gap) are both missing."""
    value = row.get(key)
    if value is None:
        raise BadRow("missing field", f"no {key!r} value")
    return value


def text_of(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise BadRow("wrong field type", f"{what} should be a string, got {type(value).__name__}")
    return value


def maybe_json(value: Any, what: str) -> Any:
    """Columns that hold structures in JSON files often hold JSON strings in CSV/parquet; accept both."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as error:
            raise BadRow("wrong field type", f"{what} is a string but not JSON ({error.msg})") from None
    return value


def drop_nulls(value: Any) -> Any:
    """Remove the null keys arrow adds when it merges differently-shaped objects into one struct type.

    Only applied to structures that came through arrow (tool schemas and call arguments given as objects,
    not strings); a key that really was null in the file is lost, which tool schemas never rely on.
    """
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def parse_tools(value: Any) -> list[dict[str, Any]]:
    """A ``tools`` column: a JSON string or a list of tool schemas (one schema alone is accepted too)."""
    if value is None or value == "":
        return []
    was_text = isinstance(value, str)
    try:
        tools = json.loads(value) if was_text else value
    except json.JSONDecodeError as error:
        raise BadRow("unparseable tools", f"tools is not valid JSON ({error.msg})") from None
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise BadRow("unparseable tools", "tools should be a list of JSON objects")
    return tools if was_text else drop_nulls(tools)


def parse_tool_calls(value: Any) -> list[ToolCall]:
    """Tool calls as JSON text or objects: ``{"name", "arguments"}``, a list of them, or the OpenAI
    ``{"type": "function", "function": {...}}`` wrapping; arguments may themselves be a JSON string."""
    try:
        calls = json.loads(value) if isinstance(value, str) else drop_nulls(value)
    except json.JSONDecodeError as error:
        raise BadRow("unparseable tool call", f"not valid JSON ({error.msg})") from None
    calls = calls if isinstance(calls, list) else [calls]
    parsed: list[ToolCall] = []
    for call in calls:
        if isinstance(call, dict) and isinstance(call.get("function"), dict):
            call = call["function"]
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            raise BadRow("unparseable tool call", "a tool call needs a 'name' string")
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as error:
                raise BadRow("unparseable tool call", f"arguments are not valid JSON ({error.msg})") from None
        if not isinstance(arguments, dict):
            raise BadRow("unparseable tool call", "tool call arguments should be a JSON object")
        parsed.append(ToolCall(name=call["name"], arguments=arguments))
    if not parsed:
        raise BadRow("unparseable tool call", "an empty list of tool calls")
    return parsed


def check_order(messages: list[Message], *, ends_with: str, parallel_tools: bool) -> None:
    """The turn order every chat template assumes: an optional leading system turn, then user, assistant,
    user, ... where an assistant turn with tool calls is answered by tool turns before the assistant
    speaks again. ``ends_with`` is "assistant" for SFT/KTO rows and "user" for prompts."""
    turns = messages[1:] if messages and messages[0].role == "system" else messages
    if not turns:
        raise BadRow("missing field", "no user turn")
    expected = {"user"}
    for position, message in enumerate(turns):
        if message.role not in expected:
            want = " or ".join(sorted(expected))
            raise BadRow("wrong role order", f"turn {position} is {message.role!r}, expected {want}")
        if message.role == "user":
            expected = {"assistant"}
        elif message.role == "tool":
            expected = {"assistant", "tool"} if parallel_tools else {"assistant"}
        else:
            expected = {"tool"} if message.tool_calls else {"user"}
    last = turns[-1].role
    if ends_with == "assistant" and last != "assistant":
        raise BadRow("wrong role order", f"the last turn is {last!r}, expected a final assistant turn")
    if ends_with == "user" and last not in ("user", "tool"):
        raise BadRow("wrong role order", f"the prompt ends with {last!r}, expected a user turn")


def check_answers(messages: list[Message]) -> None:
    """An assistant turn with neither text nor tool calls would teach the model to say nothing."""
    for position, message in enumerate(messages):
        if message.role == "assistant" and not message.content.strip() and not message.tool_calls:
            raise BadRow("empty assistant turn", f"turn {position} is empty")


def attach_media(example: Example, row: dict[str, Any], ctx: Context) -> Example:
    """Resolve ``images`` / ``audios`` paths against the dataset file's folder and check that they exist.

    Images (the ``images`` column, then image parts of the turns) are also opened and checked against
    the ``<image>`` markers of the text (see :mod:`gym.data.vision`).
    """
    for role, marker in MEDIA_MARKERS.items():
        value = row.get(ctx.column(role, role))
        if role == "images":
            if value is None and not any(message.images for message in example.messages):
                example.images = []  # no image anywhere: nothing to resolve, and markers are plain text
                continue
            from gym.data.vision import place_markers, resolve_image

            items = [] if value is None else [value] if isinstance(value, str) else list(value)
            items += [ref for message in example.messages for ref in message.images]
            example.images = [resolve_image(item, ctx.media_dir) for item in items]
            place_markers(example.messages, len(example.images), value is not None)
            continue
        if value is None or value == []:
            continue
        items = [value] if isinstance(value, str) else value
        kind = role[:-1]
        paths: list[str] = []
        for item in items:
            if not isinstance(item, str) or not item:
                raise BadRow("wrong field type", f"{role} should be a list of file paths")
            path = Path(item).expanduser()
            path = path if path.is_absolute() else ctx.media_dir / path
            if not path.is_file():
                raise BadRow(f"missing {kind} file", str(path))
            paths.append(str(path.resolve()))
        markers = sum(m.content.count(marker) for m in example.messages)
        if markers and markers != len(paths):
            raise BadRow(f"{kind} count mismatch", f"{markers} {marker} markers but {len(paths)} {role}")
        setattr(example, role, paths)
    return example
