"""Chat messages as the chat template wants them, and the one place that decides which media a model takes.

A text-only model answers an image, audio or file part with a 400 naming the part
(``messages[0].content[1]``) instead of dropping it and answering a question it never saw. A backend
that can see images says so with ``accepts_media = {"image_url", ...}``; this module then passes the
part through to its template unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from gym.api.intake import RequestRejected
from gym.api.schemas import ChatMessage, MediaPart

TEXT_ONLY: frozenset[str] = frozenset()


def accepted_media(backend: Any) -> frozenset[str]:
    """The media part types ``backend`` can read (none for a text-only model)."""
    return frozenset(getattr(backend, "accepts_media", TEXT_ONLY))


def template_messages(messages: list[ChatMessage], media: frozenset[str] = TEXT_ONLY) -> list[dict[str, Any]]:
    """OpenAI messages to the dicts chat templates read (``developer`` becomes ``system``).

    Tool-call arguments arrive as a JSON string; templates such as Qwen's write them with ``tojson``,
    so they are handed over as the object they encode (as transformers' own chat examples do).
    """
    out = []
    for i, message in enumerate(messages):
        role = "system" if message.role == "developer" else message.role
        entry: dict[str, Any] = {"role": role, "content": _content(message, i, media)}
        if message.tool_calls:
            entry["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.function.name,
                        "arguments": _arguments(call.function.arguments),
                    },
                }
                for call in message.tool_calls
            ]
        if message.tool_call_id is not None:
            entry["tool_call_id"] = message.tool_call_id
        if message.name is not None:
            entry["name"] = message.name
        if message.reasoning_content is not None:
            entry["reasoning_content"] = message.reasoning_content
        out.append(entry)
    return out


def _content(message: ChatMessage, index: int, media: frozenset[str]) -> Any:
    content = message.content
    if not isinstance(content, list):
        return content or ""
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        if isinstance(part, MediaPart):
            if part.type not in media:
                param = f"messages[{index}].content[{j}]"
                raise RequestRejected(
                    400,
                    f"{param}: this model reads text only; a '{part.type}' part cannot be served "
                    "(send text parts, or serve a vision-language model).",
                    param=param,
                    code="unsupported_content",
                )
            parts.append(part.model_dump())
        else:
            parts.append({"type": "text", "text": part.text})
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)  # text templates index content as a string
    return parts


def _arguments(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text
