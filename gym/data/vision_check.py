"""`gym validate`'s cheap check that image rows are not headed for a text-only model.

Reads only the first record of each local dataset (no `datasets`, no torch) and the model's
config.json, so validation stays fast; the full check of every row happens when the data is prepared
(`gym data preview`, `gym train`), with the same sentence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config.root import GymConfig
    from gym.data.vision_model import VisionModel


def row_has_images(row: dict[str, Any], images_column: str) -> bool:
    """An ``images`` value, or an image part in any turn of ``messages`` / ``conversations``."""
    if row.get(images_column):
        return True
    for column in ("messages", "conversations"):
        turns = row.get(column)
        for turn in turns if isinstance(turns, list) else []:
            content = turn.get("content") if isinstance(turn, dict) else None
            if isinstance(content, list) and any(
                isinstance(p, dict) and p.get("type") in ("image_url", "image") for p in content
            ):
                return True
    return False


def text_model_with_images(config: GymConfig, vision: VisionModel) -> str | None:
    """The one-sentence refusal when a dataset has image rows and ``vision`` knows the model is text-only."""
    from gym.config.sniff import SniffError, first_record

    for index, dataset in enumerate(config.datasets):
        if dataset.path is None:
            continue
        path = config.resolve_path(dataset.path)
        try:
            row = first_record(path)
        except (SniffError, OSError, ValueError):
            continue  # unreadable or not sniffable here: preparing the data reports it
        if not row_has_images(row, dataset.columns.get("images", "images")):
            continue
        if vision.known() is False:
            return (
                f"datasets.{index} ({dataset.path}) has rows with images but model "
                f"'{config.model.name_or_path}' is a text-only model; use a vision-language model "
                "(e.g. builtin:tiny-vl) or remove the images"
            )
    return None
