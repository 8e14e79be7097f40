"""Images in the Chat tab: uploads become OpenAI ``image_url`` parts (``data:`` URLs), as a client of
`gym serve` would send them, and go through the API's own :func:`gym.api.images.split_images`.

So the tab shows what the API answers for the same conversation: the same decoding, the same
``<image>`` markers, the same processor. Images stay in the chat history and are sent again with every
later turn, as an OpenAI client re-sends its whole conversation.
"""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path
from typing import Any


class UploadRefused(ValueError):
    """An upload the chat cannot send; the message is the one sentence the user sees."""


def split_input(message: Any) -> tuple[str, list[str]]:
    """The typed text and the uploaded files' paths of the chat box (a MultimodalTextbox value or a str)."""
    if isinstance(message, dict):
        files = [f.get("path") if isinstance(f, dict) else f for f in message.get("files") or []]
        return str(message.get("text") or ""), [str(f) for f in files if f]
    return str(message or ""), []


def image_part(path: str) -> dict[str, Any]:
    """An uploaded file as an OpenAI image content part with a base64 ``data:`` URL."""
    mime = mimetypes.guess_type(path)[0] or "image/png"
    payload = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{payload}"}}


def check_uploads(paths: list[str]) -> list[dict[str, Any]]:
    """The uploads as image parts, each checked to open as an image; UploadRefused names the first that does not."""
    from gym.api.images import open_upload
    from gym.engine.vision import ImageRequestError

    parts = []
    for path in paths:
        try:
            open_upload(path)
        except ImageRequestError as error:
            raise UploadRefused(
                f"✗ {error}: remove it and attach another; your message is still in the box"
            ) from None
        parts.append(image_part(path))
    return parts


def history_parts(content: Any) -> list[dict[str, Any]]:
    """A Chatbot turn's content (text and file entries, as Gradio hands it back) as OpenAI content parts."""
    items = content if isinstance(content, list) else [content]
    parts: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif isinstance(item, dict) and item.get("type") == "text":
            parts.append({"type": "text", "text": str(item.get("text") or "")})
        elif isinstance(item, dict) and (item.get("type") == "file" or "path" in item):
            file = item.get("file") or item
            path = file.get("path") if isinstance(file, dict) else None
            if path and Path(path).is_file():
                parts.append(image_part(str(path)))
    return parts


def has_images(messages: list[dict[str, Any]]) -> bool:
    return any(
        isinstance(m["content"], list) and any(p.get("type") == "image_url" for p in m["content"])
        for m in messages
    )


def template_messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, str]], list[Any]]:
    """OpenAI messages with image parts → the API's template messages (``<image>`` markers) and images."""
    from gym.api.images import split_images
    from gym.api.schemas import ChatMessage

    return split_images([ChatMessage.model_validate(m) for m in messages])


def text_only_refusal(who: str, attached: bool = True) -> str:
    """The sentence for an image sent to a model without a vision tower (attached now, or earlier in the chat)."""
    fix = (
        "remove the image to send the text alone"
        if attached
        else "the conversation already holds images: press Clear to start one without them"
    )
    return (
        f"✗ {who} is a text-only model and cannot read images: {fix}, or chat with a vision-language model "
        '(model.name_or_path = "builtin:tiny-vl", Qwen2.5-VL, LLaVA, ...); your message is still in the box'
    )
