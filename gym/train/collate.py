"""Batching tokenized rows: padded batches, or padding-free packed rows that never attend across samples.

Padding-free packing concatenates the samples of a micro-batch into one row and restarts
``position_ids`` at each sample; with no attention mask, transformers derives a block-diagonal causal
mask from those positions (and Gym's CPU attention, gym/model/cpu_kernels/packed_attention.py, lays the samples
out side by side), so samples never see each other. The first label of every packed sample is
ignored, so no token is trained to follow the previous sample. A row packed ahead of time
(``train.packing``: several samples per row, TRL's ``pack_dataset``) carries ``seq_lengths``, the
lengths of its samples, and is split at them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IGNORE_INDEX = -100


@dataclass
class PadCollator:
    """Right-padded ``input_ids`` / ``labels`` / ``attention_mask`` to the longest row of the batch."""

    pad_token_id: int
    pad_to_multiple_of: int | None = None

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        longest = max(len(row["input_ids"]) for row in rows)
        if self.pad_to_multiple_of:
            longest = -(-longest // self.pad_to_multiple_of) * self.pad_to_multiple_of
        ids = torch.full((len(rows), longest), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(rows), longest), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(rows), longest), dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            ids[i, :n] = torch.as_tensor(row["input_ids"])
            labels[i, :n] = torch.as_tensor(row["labels"])
            mask[i, :n] = 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}


@dataclass
class PackedCollator:
    """All rows of the micro-batch in one padding-free row, positions restarting per sample."""

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        ids: list[int] = []
        labels: list[int] = []
        positions: list[int] = []
        for row in rows:
            start = len(ids)
            ids.extend(row["input_ids"])
            labels.extend(row["labels"])
            for n in row.get("seq_lengths") or [len(row["input_ids"])]:
                labels[start] = IGNORE_INDEX  # nothing is trained to follow the previous sample
                positions.extend(range(n))
                start += n
        return {
            "input_ids": torch.tensor([ids], dtype=torch.long),
            "labels": torch.tensor([labels], dtype=torch.long),
            "position_ids": torch.tensor([positions], dtype=torch.long),
        }
