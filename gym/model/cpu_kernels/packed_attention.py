"""Padding-free rows on CPU: every layer computes real tokens only, attention stays within each sample.

For a padding-free row (samples concatenated, ``position_ids`` restarting) transformers' SDPA computes
the whole ``(total tokens)^2`` score matrix and discards most of it, and the varlen kernels that avoid
it are CUDA-only. So Gym registers one more attention function through transformers'
``AttentionInterface`` (:data:`NAME`): it lays each sample's queries, keys and values out as padded
batches (samples of similar length together, :func:`plan_attention_groups`), runs causal attention on
each (gym/model/cpu_kernels/packed_kernels.py) and gathers the real positions back. Every other input
(an attention mask, a KV cache, one sequence) goes to SDPA unchanged, so generation and evaluation
are exactly ``sdpa``'s. Measurements in docs/cpu-kernels.md.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from gym.model.cpu_kernels.length_groups import plan_groups
from gym.model.cpu_kernels.packed_kernels import SHORT, reindex, short_causal_attention

NAME = "gym_packed_sdpa"
# The position_ids of the last forward and its layout, per thread: every layer of one forward reuses it,
# and a forward of the same model on another thread (a server's worker, an evaluation) keeps its own.
_layouts = threading.local()


# One more attention call costs about as much as 4k score entries. Set for the batched-product kernel
# (gym/model/cpu_kernels/packed_kernels.py) by alternating training steps of the benchmark's rows in one process:
# 4096 (or 8192) against the 65536 chosen for SDPA calls, 1.03-1.06x per step on the built-in tiny model
# (one and two threads, padding-free and packed rows) and 1.02-1.03x on the 26M Llama; splitting every
# sample into its own call (~0) was 0.94x.
GROUP_COST = 64 * 64


def plan_attention_groups(lengths: list[int], group_cost: int = GROUP_COST) -> list[list[int]]:
    """Sample indices per attention call (shortest first): the split of the length-sorted samples that minimises
    ``sum(samples x longest^2) / 2 + group_cost x calls``, the score entries computed (padding included)
    plus a fixed cost per call. One call for samples of similar length; a packed batch whose samples range
    from 20 to 500 tokens is not padded to 500 throughout."""
    return plan_groups(
        lengths, group_cost, work=lambda samples, longest: samples * longest * longest / 2, max_cuts=64
    )


class Layout(NamedTuple):
    """How a padding-free row runs as padded attention calls (see :func:`layout`)."""

    calls: list[tuple[int, int]]  # (samples, longest) per call, in the order of their rows
    gather: Any  # gather[r]: the packed token at padded row r (a sample's last token in its padding slots)
    scatter: Any  # scatter[j]: the padded row of packed token j


def layout(position_ids: Any) -> Layout | None:
    """How a padding-free row runs as padded attention calls, or None for a single sequence.

    The calls' padded rows are concatenated: call ``c`` holds ``samples x longest`` rows, sample ``b``'s
    token ``t`` at row ``b * longest + t`` of it, right-padded with copies of the sample's last token.
    """
    import torch

    positions = position_ids[0]
    starts = torch.nonzero(positions == 0).flatten()
    if starts.numel() <= 1 or int(starts[0]) != 0:
        return None
    total = positions.numel()
    bounds = torch.cat([starts, starts.new_tensor([total])])
    lengths = bounds[1:] - bounds[:-1]
    if not bool((positions == torch.arange(total) - torch.repeat_interleave(starts, lengths)).all()):
        return None  # positions that do not count 0, 1, 2... within each sample: not Gym's packed layout
    calls, gathers, scatter, row = [], [], torch.empty(total, dtype=torch.long), 0
    for group in plan_attention_groups(lengths.tolist()):
        index = torch.tensor(group, dtype=torch.long)
        group_starts, group_lengths = starts[index], lengths[index]
        samples, longest = len(group), int(group_lengths.max())
        offsets = torch.arange(longest)[None, :]
        gathers.append(
            (group_starts[:, None] + torch.minimum(offsets, (group_lengths - 1)[:, None])).flatten()
        )
        calls.append((samples, longest))
        for b, (begin, n) in enumerate(zip(group_starts.tolist(), group_lengths.tolist(), strict=True)):
            scatter[begin : begin + n] = torch.arange(row + b * longest, row + b * longest + n)
        row += samples * longest
    return Layout(calls, torch.cat(gathers), scatter)


def _cached_layout(position_ids: Any) -> Layout | None:
    if getattr(_layouts, "key", None) is not position_ids:  # every layer of one forward gets the same tensor
        _layouts.key, _layouts.plan = position_ids, layout(position_ids)
    return _layouts.plan


def packed_sdpa_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention-function signature; output ``(batch, tokens, heads, dim)`` like SDPA's."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    position_ids = kwargs.get("position_ids")
    plan = None
    if (
        attention_mask is None
        and position_ids is not None
        and query.shape[0] == 1
        and position_ids.shape[0] == 1
        and query.shape[2] == key.shape[2] == position_ids.shape[-1]
    ):
        plan = _cached_layout(position_ids)
    if plan is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    import torch

    gather, scatter = plan.gather.to(query.device), plan.scatter.to(query.device)
    grouped = query.shape[1] != key.shape[1]
    dropout = dropout if module.training else 0.0
    # (heads, tokens, dim) -> (heads, padded rows, dim), one gather for all calls; its backward a gather too
    query, key, value = (reindex(states[0], 1, gather, scatter) for states in (query, key, value))
    heads, dim = query.shape[0], query.shape[2]
    outputs, row = [], 0
    for samples, longest in plan.calls:
        q, k, v = (states.narrow(1, row, samples * longest) for states in (query, key, value))
        row += samples * longest
        if longest <= SHORT and not dropout:
            outputs.append(short_causal_attention(q, k, v, samples, longest, scaling))
            continue
        # (heads, rows, dim) -> (samples, heads, longest, dim); SDPA pairs grouped heads itself (enable_gqa)
        q, k, v = (
            states.view(states.shape[0], samples, longest, dim).transpose(0, 1) for states in (q, k, v)
        )
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=grouped
        )
        outputs.append(out.transpose(1, 2).reshape(samples * longest, heads, dim))
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    # padded rows -> packed tokens (here index_add_, the stock backward, is the faster: whole rows)
    return out.index_select(0, scatter).unsqueeze(0), None


def packed_mask(*args: Any, **kwargs: Any) -> Any:
    """No mask for a padding-free row (the attention function keeps samples apart); SDPA's otherwise."""
    from transformers.masking_utils import sdpa_mask

    if kwargs.get("attention_mask") is None:
        return None
    return sdpa_mask(*args, **kwargs)


def register() -> str:
    """Make :data:`NAME` an attention implementation transformers models accept; returns it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, packed_sdpa_forward)
    AttentionMaskInterface.register(NAME, packed_mask)
    return NAME


def use_packed_attention(model: Any) -> bool:
    """Switch an SDPA model (the base under a PEFT wrapper) to :data:`NAME`; False when it cannot."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not hasattr(
        base, "set_attn_implementation"
    ):
        return False
    register()
    try:
        base.set_attn_implementation(NAME)
    except (ValueError, KeyError, NotImplementedError):
        return False
    return base.config._attn_implementation == NAME
