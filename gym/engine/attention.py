"""SDPA for grouped-query attention with a padding mask, without copying the KV cache every step.

transformers' ``sdpa`` attention expands a GQA model's keys and values to every query head
(``repeat_kv``: a full copy of the cache, per layer, per decode step) whenever an attention mask is
given, because CUDA's fused kernels cannot combine GQA with a mask. The batching engine always
passes a mask (its rows are left-padded), and on CPU ``scaled_dot_product_attention(...,
enable_gqa=True)`` takes that mask and gives bit-identical results, without the copy that was the
largest single cost of a shared-system-prompt load (figures in docs/performance.md). Registered with
transformers' own ``AttentionInterface`` under ``gym_sdpa``; every other case goes to transformers' ``sdpa`` unchanged.

Shared prompt prefixes (cascade attention): when every row of the running batch starts with the same
cached prompt prefix (a shared system prompt), the batching engine keeps that prefix's KV once, not
once per row, and runs the model inside :func:`shared_prefix`. Each layer then attends to the shared
keys with one batched matmul per KV head and to the row's own keys separately, merging the two
softmaxes exactly (:func:`cascade_attention`): with N streams the prefix is read once per step
instead of N times.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

NAME = "gym_sdpa"
_SHARED: contextvars.ContextVar[tuple[list[Any], list[Any]] | None] = contextvars.ContextVar(
    "gym_shared_prefix", default=None
)


@contextlib.contextmanager
def shared_prefix(keys: list[Any], values: list[Any]) -> Iterator[None]:
    """Forward passes inside see ``keys[layer]``/``values[layer]`` (``(1, kv_heads, P, head_dim)``) as the
    first ``P`` positions of every row, in front of the keys the model's cache holds for that row."""
    token = _SHARED.set((keys, values))
    try:
        yield
    finally:
        _SHARED.reset(token)


def cascade_attention(query: Any, key: Any, value: Any, mask: Any, shared_key: Any, shared_value: Any,
                      scale: float | None) -> Any:  # fmt: skip
    """Attention of ``query`` over ``shared_key`` (one copy for all rows, never masked) followed by each
    row's own ``key`` (masked by ``mask``); returns ``(batch, q_len, heads, head_dim)`` like SDPA.

    The two parts' softmaxes are merged with their running maxima, which is the same softmax as over
    the concatenated keys; the shared part is a ``bmm`` per KV head over every row's queries at once.
    """
    import torch

    batch, heads, q_len, dim = query.shape
    kv_heads, prefix = shared_key.shape[1], shared_key.shape[2]
    groups = heads // kv_heads
    scale = dim**-0.5 if scale is None else scale
    rows_q = query.reshape(batch, kv_heads, groups * q_len, dim)  # heads h*groups.. share KV head h
    flat_q = rows_q.transpose(0, 1).reshape(kv_heads, batch * groups * q_len, dim)
    shared_scores = torch.bmm(flat_q, shared_key[0].transpose(1, 2)).mul_(scale)
    shared_scores = shared_scores.view(kv_heads, batch, groups * q_len, prefix).transpose(0, 1)
    own_scores = torch.matmul(rows_q, key.transpose(-1, -2)).mul_(scale)  # (batch, kv, g*q, own)
    own = key.shape[2]
    if mask is None and q_len > 1:  # causal over the row's own keys, aligned at the end
        mask = torch.ones(q_len, own, dtype=torch.bool, device=query.device).tril(own - q_len)[None, None]
    if mask is not None:
        mask = mask[:, :, -q_len:, -own:]
        mask = mask.unsqueeze(2).expand(mask.shape[0], mask.shape[1], groups, q_len, own)
        mask = mask.reshape(mask.shape[0], mask.shape[1], groups * q_len, own)
        if mask.dtype == torch.bool:
            own_scores = own_scores.masked_fill(~mask, float("-inf"))
        else:
            own_scores = own_scores + mask
    top = torch.maximum(shared_scores.amax(-1), own_scores.amax(-1)).unsqueeze(-1)  # finite: prefix > 0
    shared_p = (shared_scores - top).exp_()
    own_p = (own_scores - top).exp_()
    total = shared_p.sum(-1, keepdim=True) + own_p.sum(-1, keepdim=True)
    flat_p = shared_p.transpose(0, 1).reshape(kv_heads, batch * groups * q_len, prefix)
    out = torch.bmm(flat_p, shared_value[0]).view(kv_heads, batch, groups * q_len, dim).transpose(0, 1)
    out = (out + torch.matmul(own_p, value)).div_(total)
    return out.reshape(batch, heads, q_len, dim).transpose(1, 2).contiguous()


def gqa_sdpa_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                     scaling: float | None = None, is_causal: bool | None = None, **kwargs: Any) -> tuple[Any, None]:  # fmt: skip
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    plain = kwargs.get("position_bias") is None and not kwargs.get("output_attentions") and not dropout
    shared = _SHARED.get()
    if shared is not None:
        if not plain or getattr(module, "layer_idx", None) is None:
            raise RuntimeError("a shared prompt prefix needs plain attention layers that know their index")
        layer = module.layer_idx
        out = cascade_attention(
            query, key, value, attention_mask, shared[0][layer], shared[1][layer], scaling
        )
        return out, None
    if groups > 1 and attention_mask is not None and plain and query.device.type == "cpu":
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, scale=scaling, enable_gqa=True
        )
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)  # fmt: skip


def use_gqa_sdpa(model: Any) -> bool:
    """Switch a model that uses transformers' ``sdpa`` to :func:`gqa_sdpa_forward` (same masks)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(NAME, gqa_sdpa_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    try:
        model.set_attn_implementation(NAME)
    except (ValueError, ImportError, KeyError):
        return False
    return model.config._attn_implementation == NAME
