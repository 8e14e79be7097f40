"""Image parts of a chat request: OpenAI ``image_url`` parts (and chat-page uploads) as PIL images.

``data:`` URLs are decoded here; remote http(s) URLs are refused unless the server was started with
``--fetch-remote-images`` (a server that fetches on a client's behalf can be pointed at addresses only it
can reach; :mod:`gym.api.remote_images` holds the limits). Each image part becomes an ``<image>`` marker
in the template message, and the images go to the vision engine (:mod:`gym.engine.vision`).
"""

from __future__ import annotations

import base64
import binascii
import io
from pathlib import Path
from typing import Any

from gym.api.remote_images import FetchPolicy, FetchRefused, fetch_image_bytes
from gym.engine.vision import MARKER, ImageRequestError


def is_remote(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def decode_image(url: str, where: str, fetch: FetchPolicy | None = None) -> Any:
    """A ``data:image/...;base64,`` URL (or, when ``fetch`` is given, an http(s) URL) as an RGB PIL image."""
    from PIL import Image, UnidentifiedImageError

    if is_remote(url):
        if fetch is None:
            raise ImageRequestError(
                f"{where}: remote image URLs are not fetched by this server (start it with "
                "--fetch-remote-images to allow it); send the image as a data: URL"
            )
        try:
            raw, what = fetch_image_bytes(url, where, fetch), "the image URL"
        except FetchRefused as error:
            raise ImageRequestError(str(error)) from None
    else:
        head, _, payload = url.partition(",")
        if not head.startswith("data:") or ";base64" not in head:
            raise ImageRequestError(
                f"{where}: image_url must be a base64 data: URL (data:image/png;base64,...)"
            )
        try:
            raw, what = base64.b64decode(payload, validate=True), "the data: URL"
        except (binascii.Error, ValueError):
            raise ImageRequestError(f"{where}: the data: URL is not a readable image") from None
    try:
        with Image.open(io.BytesIO(raw)) as image:
            return image.convert("RGB")
    except (ValueError, UnidentifiedImageError, OSError, Image.DecompressionBombError):
        raise ImageRequestError(f"{where}: {what} is not a readable image") from None


def open_upload(path: str) -> Any:
    """A file uploaded to a chat page as an RGB PIL image; ImageRequestError names it when it is not one."""
    from PIL import Image

    from gym.data.vision import open_image

    try:
        return open_image(path)
    except (OSError, Image.DecompressionBombError):  # PIL's UnidentifiedImageError is an OSError
        raise ImageRequestError(
            f"{Path(path).name} is not an image this chat can read (PNG, JPEG, WebP, GIF, BMP)"
        ) from None


def image_urls(messages: list[Any]) -> list[str]:
    """Every ``image_url`` part's URL, in order (to count remote ones before fetching any)."""
    urls = []
    for message in messages:
        if isinstance(message.content, list):
            for part in message.content:
                data = part.model_dump() if hasattr(part, "model_dump") else dict(part)
                if data.get("type") == "image_url":
                    url = data.get("image_url")
                    urls.append(str((url.get("url") if isinstance(url, dict) else url) or ""))
    return urls


def split_images(
    messages: list[Any], fetch: FetchPolicy | None = None
) -> tuple[list[dict[str, str]], list[Any]]:
    """Template messages (image parts become ``<image>`` markers, in place) and the decoded images.

    ``fetch``: how http(s) URLs are fetched (`gym serve --fetch-remote-images`); None refuses them."""
    out: list[dict[str, str]] = []
    images: list[Any] = []
    for number, message in enumerate(messages):
        content = message.content
        if isinstance(content, list):
            text = []
            for position, part in enumerate(content):
                data = part.model_dump() if hasattr(part, "model_dump") else dict(part)
                if data.get("type") == "image_url":
                    url = data.get("image_url")
                    url = url.get("url") if isinstance(url, dict) else url
                    where = f"messages[{number}].content[{position}]"
                    images.append(decode_image(str(url or ""), where, fetch))
                    text.append(MARKER)
                elif data.get("type") == "text":
                    text.append(str(data.get("text") or ""))
            content = "".join(text)
        role = "system" if message.role == "developer" else message.role
        out.append({"role": role, "content": content or ""})
    return out, images
