"""Image rows: resolving image references, checking the files, and placing image tokens.

Datasets name images three ways: LLaMA-Factory's ``mllm_demo`` (``<image>`` markers in the text plus an
``images`` column), sharegpt rows with the same column, and OpenAI messages whose content holds
``image_url`` / ``image`` parts. All become an :class:`~gym.data.example.Example` whose text carries
one ``<image>`` marker per image, in order, and whose ``images`` are absolute, readable files.

At tokenization each marker becomes the model's image token (rendered with the chat template like any
text, so answer-only loss masks are computed as for text), and is then expanded to as many image
tokens as the model's processor says that image costs; image tokens never carry loss. Every problem is
a bad row naming the file and row: a missing or unreadable image, an image larger than the processor
allows, more or fewer markers than images.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.data.report import BadRow
from gym.files import gym_cache_home

if TYPE_CHECKING:
    from gym.data.vision_model import ImageTokens

MARKER = "<image>"
MAX_PIXELS = 64_000_000  # larger images are refused as "image too large" (PIL's bomb limit is ~89M)
IGNORE_INDEX = -100


def data_url_file(url: str) -> Path:
    """A ``data:image/...;base64,`` URL written once to Gym's cache (named by its hash); the file path."""
    head, _, payload = url.partition(",")
    if ";base64" not in head:
        raise BadRow("unreadable image", "a data: URL image must be base64-encoded")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise BadRow("unreadable image", "a data: URL holds invalid base64") from None
    folder = gym_cache_home() / "images"
    folder.mkdir(parents=True, exist_ok=True)
    subtype = head.removeprefix("data:").split(";")[0].partition("/")[2] or "bin"
    path = folder / f"{hashlib.sha256(raw).hexdigest()[:24]}.{subtype}"
    if not path.is_file():
        staging = path.with_name(f".{path.name}.tmp")
        staging.write_bytes(raw)
        staging.replace(path)
    return path


def part_image(part: dict[str, Any], position: int) -> str:
    """The image reference of an OpenAI ``image_url`` part or a ``{"type": "image", "image": ...}`` part."""
    value: Any = part.get("image_url") if part.get("type") == "image_url" else part.get("image")
    if value is None and part.get("type") == "image":
        value = part.get("url") or part.get("path")
    if isinstance(value, dict):
        value = value.get("url")
    if not isinstance(value, str) or not value:
        raise BadRow("wrong field type", f"turn {position} has an image part without a URL or path")
    if value.startswith(("http://", "https://")):
        raise BadRow("remote image", f"turn {position}: {value[:80]} (download it and give a local path)")
    if value.startswith("data:"):
        return str(data_url_file(value))
    return value.removeprefix("file://")


def stored_image(item: Any) -> str:
    """An image a Hub dataset decoded (a PIL image, or ``{"bytes", "path"}``) as a file in Gym's cache."""
    if isinstance(item, dict) and item.get("bytes"):
        raw = bytes(item["bytes"])
    elif isinstance(item, dict) and isinstance(item.get("path"), str):
        return item["path"]
    elif hasattr(item, "save"):
        import io

        buffer = io.BytesIO()
        item.save(buffer, format="PNG")
        raw = buffer.getvalue()
    else:
        raise BadRow("wrong field type", f"images should be file paths, got {type(item).__name__}")
    folder = gym_cache_home() / "images"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(raw).hexdigest()[:24]}.img"
    if not path.is_file():
        staging = path.with_name(f".{path.name}.tmp")
        staging.write_bytes(raw)
        staging.replace(path)
    return str(path)


def resolve_image(item: Any, media_dir: Path) -> str:
    """An absolute path to a readable image no larger than :data:`MAX_PIXELS`; BadRow otherwise."""
    if not isinstance(item, str):
        item = stored_image(item)
    if not item:
        raise BadRow("wrong field type", "images should be a list of file paths")
    path = Path(item).expanduser()
    path = path if path.is_absolute() else media_dir / path
    if not path.is_file():
        raise BadRow("missing image file", str(path))
    resolved = str(path.resolve())
    image_size(resolved)  # readable, and not too large
    return resolved


@lru_cache(maxsize=65536)
def image_size(path: str) -> tuple[int, int]:
    """``(height, width)`` of a fully decodable image file (a truncated file fails here, not in training)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise BadRow(
                    "image too large", f"{path} is {width}x{height} (more than {MAX_PIXELS:,} pixels)"
                )
            image.load()
    except BadRow:
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise BadRow("unreadable image", f"{path}: {str(error)[:100]}") from None
    return height, width


def open_image(path: str) -> Any:
    """The image as RGB, for the processor."""
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


def place_markers(messages: list[Any], count: int, source_has_column: bool) -> None:
    """Check markers against images; rows with images but no markers get them before the first user text.

    Raises BadRow on a count mismatch (``source_has_column``: the row declares its images, so markers
    without images are a mismatch too, not literal text).
    """
    markers = sum(m.content.count(MARKER) for m in messages)
    if markers == 0 and count:
        first_user = next(m for m in messages if m.role == "user")
        first_user.content = MARKER * count + first_user.content
        return
    if markers != count and (count or source_has_column):
        raise BadRow("image count mismatch", f"{markers} {MARKER} markers but {count} images")


def expand_row(
    input_ids: list[int],
    labels: list[int],
    images: list[str],
    *,
    image_id: int,
    counts: list[int],
) -> tuple[list[int], list[int]]:
    """Each image token of the text becomes ``counts[i]`` image tokens; none of them carries loss."""
    ids: list[int] = []
    out: list[int] = []
    seen = 0
    for token, label in zip(input_ids, labels, strict=True):
        if token == image_id:
            if seen >= len(counts):
                raise BadRow("image count mismatch", f"more image tokens than the {len(images)} images")
            ids.extend([image_id] * counts[seen])
            out.extend([IGNORE_INDEX] * counts[seen])
            seen += 1
        else:
            ids.append(token)
            out.append(label)
    if seen != len(counts):
        raise BadRow(
            "image count mismatch",
            f"{seen} image markers survived templating but the row has {len(counts)} images",
        )
    return ids, out


def expand_batch(
    batch: dict[str, list[Any]], *, tokens: ImageTokens, image_id: int, max_length: int
) -> dict[str, list[Any]]:
    """``datasets.map(batched=True)`` body: image tokens expanded per image, statuses set for bad rows."""
    from gym.data.tokenize import KEPT, TOO_LONG

    limit = tokens.max_pixels()
    for position, images in enumerate(batch["images"]):
        if not images or batch["status"][position] not in KEPT:
            continue
        try:
            sizes = [image_size(path) for path in images]
            for path, (height, width) in zip(images, sizes, strict=True):
                if limit and height * width > limit:
                    raise BadRow(
                        "image too large",
                        f"{path} is {width}x{height}, more than the processor's max_pixels {limit:,}",
                    )
            ids, labels = expand_row(
                batch["input_ids"][position],
                batch["labels"][position],
                images,
                image_id=image_id,
                counts=tokens.token_counts(sizes),
            )
        except BadRow as bad:
            batch["status"][position] = str(bad)
            continue
        if len(ids) > max_length:
            batch["status"][position] = TOO_LONG
        batch["input_ids"][position], batch["labels"][position] = ids, labels
        batch["length"][position] = len(ids)
    return batch


def has_image_rows(dataset: Any) -> bool:
    """Whether any row lists an image, read as one Arrow column (``dataset["images"]`` formats row by row)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = dataset.with_format("arrow")[:].column("images")
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return False  # an all-null column (type null): no row has images
    return (pc.max(pc.list_value_length(column)).as_py() or 0) > 0


def expand_images(dataset: Any, tokens: ImageTokens, max_length: int) -> Any:
    """The tokenized rows with every image's tokens in place (see :func:`expand_batch`)."""
    if not has_image_rows(dataset):
        return dataset
    return dataset.map(
        expand_batch,
        batched=True,
        batch_size=256,
        fn_kwargs={
            "tokens": tokens,
            "image_id": tokens.image_token_id(),
            "max_length": max_length,
        },
        load_from_cache_file=False,
        desc="placing image tokens",
    )


def use_placeholder(examples: list[Any], placeholder: str) -> None:
    """Replace the dataset-side ``<image>`` marker by the model's own placeholder text in place."""
    if placeholder == MARKER:
        return
    for example in examples:
        if example.images:
            for message in example.messages:
                message.content = message.content.replace(MARKER, placeholder)


def refuse_text_only(examples: list[Any], reports: dict[str, Any], model: str) -> None:
    """A text-only model never silently trains on image rows: one sentence naming the dataset and row."""
    from gym.data.report import DataError

    with_images = [e for e in examples if e.images]
    if not with_images:
        return
    first = with_images[0]
    report = reports[first.source]
    raise DataError(
        f"dataset {first.source!r} ({report.file}): {len(with_images)} rows have images (first: row "
        f"{first.index}) but model '{model}' is a text-only model; use a vision-language model "
        "(e.g. builtin:tiny-vl) or remove the images"
    )


def image_lines(images: list[str], input_ids: list[int], settings: dict[str, Any]) -> Any:
    """`gym data preview`'s line per image: file, size, and the image tokens the row spends on images."""
    from rich.text import Text

    image_id = settings.get("image_token_id")
    tokens = sum(1 for token in input_ids if token == image_id) if image_id is not None else 0
    text = Text(f"{len(images)} image(s), {tokens} image tokens:", style="cyan")
    for path in images:
        try:
            height, width = image_size(path)
            text.append(f"\n  {Path(path).name} {width}x{height}", style="cyan")
        except BadRow as bad:
            text.append(f"\n  {Path(path).name}: {bad}", style="red")
    return text


def collapse_image_runs(text: Any) -> Any:
    """``<image><image>…`` (one per image token) shown as ``<image ×N>``, keeping the highlighting."""
    import re

    from rich.text import Text

    plain = text.plain
    out = Text()
    last = 0
    for match in re.finditer(r"((?:<image>|<\|image_pad\|>)){2,}", plain):
        token = match.group(1)
        out.append_text(text[last : match.start()])
        out.append(f"{token[:-1]} ×{(match.end() - match.start()) // len(token)}>", "magenta")
        last = match.end()
    out.append_text(text[last:])
    return out
