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
        if "mm_token_type_ids" in getattr(self.processor, "model_input_names", ()):
            batch["mm_token_type_ids"] = mm_token_type_ids(batch["input_ids"], image_token_id(self.processor))
        return batch


def image_token_id(processor: Any) -> int:
    from gym.model.vision import image_token

    return int(processor.tokenizer.convert_tokens_to_ids(image_token(processor)))


def mm_token_type_ids(input_ids: Any, image_id: int) -> Any:
    """1 where an image token is, else 0: what M-RoPE models (Qwen2-VL and later) need beside the ids."""
    return (input_ids == image_id).long()


def has_images(dataset: Any) -> bool:
    """Whether any prepared row carries images (then the trainer needs the model's processor)."""
    return dataset is not None and "images" in dataset.column_names and any(dataset["images"])
