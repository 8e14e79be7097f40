"""Length-grouped micro-batches: the rows of one padded batch, run as a few groups of similar length.

A padded batch costs ``rows x longest row`` tokens of work; groups sorted by length, each padded to its
own longest row, remove most of the padding while each adds one forward/backward of fixed cost.
``plan_groups`` picks the split minimising ``padded tokens + GROUP_COST_TOKENS x groups`` (an exact
dynamic programme over the sorted lengths). The gradient is the batch's: each group's loss is summed
over its trained tokens and divided by the whole batch's (Trainer's ``num_items_in_batch``).
Measurements in docs/cpu-kernels.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

GROUP_COST_TOKENS = 64


def plan_groups(
    lengths: list[int],
    group_cost: float = GROUP_COST_TOKENS,
    work: Callable[[int, int], float] = lambda rows, longest: rows * longest,
    max_cuts: int | None = None,
) -> list[list[int]]:
    """Row indices per group (shortest rows first), minimising ``work(rows, longest)`` summed over the
    groups plus ``group_cost`` per group: an exact dynamic programme over the sorted lengths.

    ``work`` defaults to padded tokens; ``max_cuts`` bounds the candidate cut points (every
    ``len // max_cuts`` rows) so that long lists stay ~``max_cuts^2 / 2`` steps.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    ordered = [lengths[i] for i in order]
    n = len(ordered)
    step = max(1, n // max_cuts) if max_cuts else 1
    cuts = [*range(0, n, step), n]
    best = {0: 0.0}  # best[j]: cost of the first j sorted rows
    previous: dict[int, int] = {}
    for j in cuts[1:]:  # group = sorted rows i..j-1, padded to the longest, ordered[j - 1]
        best[j], previous[j] = min(
            (best[i] + work(j - i, ordered[j - 1]) + group_cost, i) for i in cuts if i < j
        )
    groups = []
    j = n
    while j > 0:
        groups.append(order[previous[j] : j])
        j = previous[j]
    return groups[::-1]


def split_batch(inputs: dict[str, Any], group_cost: int = GROUP_COST_TOKENS) -> list[dict[str, Any]]:
    """A right-padded batch (``attention_mask`` present) as length-grouped batches with less padding.

    Returns ``[inputs]`` unchanged when splitting would not pay (or the batch is not a padded one).
    """
    mask = inputs.get("attention_mask")
    if mask is None or mask.dim() != 2 or mask.shape[0] < 2:
        return [inputs]
    if any(hasattr(value, "shape") and not _is_row_tensor(value, mask) for value in inputs.values()):
        return [inputs]  # e.g. pixel_values of image rows: not split by row, so the batch stays whole
    lengths = mask.sum(dim=1).tolist()
    groups = plan_groups([int(n) for n in lengths], group_cost)
    if len(groups) == 1:
        return [inputs]
    import torch

    split = []
    for rows in groups:
        index = torch.tensor(rows, dtype=torch.long, device=mask.device)
        longest = int(max(lengths[i] for i in rows))
        split.append(
            {
                key: (value.index_select(0, index)[:, :longest] if _is_row_tensor(value, mask) else value)
                for key, value in inputs.items()
            }
        )
    return split


def _is_row_tensor(value: Any, mask: Any) -> bool:
    """A (rows, positions) tensor aligned with the attention mask: input_ids, labels, position_ids."""
    return hasattr(value, "shape") and tuple(value.shape[:2]) == tuple(mask.shape)
