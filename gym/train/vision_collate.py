"""Batches of image rows: padded tokens (as :class:`~gym.train.collate.PadCollator`) plus pixel tensors.

Images are read from disk when the batch is made, not stored in the prepared cache: a dataset of
images stays on disk once, and the model's own image processor (resize, crop, normalise, patching)
makes the tensors, so what trains is exactly what the processor would give at inference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gym.train.collate import PadCollator


@dataclass
class VisionCollator:
    """``input_ids`` / ``labels`` / ``attention_mask`` padded, and the batch's images through the processor."""

    pad_token_id: int
    processor: Any

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from gym.data.vision import open_image
        from gym.model.vision import pixel_inputs

        batch = PadCollator(self.pad_token_id)(rows)
        paths = [path for row in rows for path in (row.get("images") or [])]
        if paths:
            batch.update(pixel_inputs(self.processor, [open_image(path) for path in paths]))
        return batch


def has_images(dataset: Any) -> bool:
    """Whether any prepared row carries images (then the trainer needs the model's processor)."""
    return dataset is not None and "images" in dataset.column_names and any(dataset["images"])
