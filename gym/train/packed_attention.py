"""Padding-free rows on CPU: every layer computes real tokens only, attention stays within each sample.

A padding-free batch (gym/train/collate.py) is one row of concatenated samples whose ``position_ids``
restart at each sample. transformers keeps such samples apart with a block-diagonal mask built from
those positions, and SDPA then computes the whole ``(total tokens)^2`` score matrix and discards most
of it: with 8 samples of ~90 tokens that is 8x the attention work of the samples alone, and why packed
rows were slower than padded ones on CPU. The varlen kernels that avoid it (flash-attention's
``cu_seqlens``) are CUDA-only.

So Gym registers one more attention function through transformers' own ``AttentionInterface``, named
:data:`NAME`: for a padding-free row (no attention mask, ``position_ids`` restarting) it lays the
samples' queries, keys and values out as a right-padded ``(samples, heads, longest, dim)`` batch with
two index gathers, runs PyTorch's causal SDPA on it, and gathers the real positions back. A causal
query never sees a key after itself, so the padding slots at each sample's end are never attended to;
outputs of padding queries are dropped. Attention then costs what it costs for padded rows, while the
projections, MLPs, norms and the LM head (everything else) run on real tokens only. Every other input
(a 2D attention mask, a KV cache, a single sequence) goes to transformers' SDPA unchanged, so the model
generates and evaluates exactly as with ``sdpa``.
"""

from __future__ import annotations

from typing import Any

NAME = "gym_packed_sdpa"
_layouts: list[Any] = [None, None]  # [position_ids of the last forward, its layout]: one per forward


def layout(position_ids: Any) -> tuple[Any, Any, int, int] | None:
    """``(gather, scatter, samples, longest)`` of a padding-free row, or None for a single sequence.

    ``gather[b * longest + t]`` is the packed index of sample ``b``'s token ``t`` (its last token for the
    padding slots past its end); ``scatter[j]`` is where packed token ``j`` sits in the padded layout.
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
    samples, longest = int(lengths.numel()), int(lengths.max())
    offsets = torch.arange(longest)
    gather = (starts[:, None] + torch.minimum(offsets[None, :], (lengths - 1)[:, None])).flatten()
    sample_of = torch.repeat_interleave(torch.arange(samples), lengths)
    scatter = sample_of * longest + (torch.arange(total) - starts[sample_of])
    return gather, scatter, samples, longest


def _cached_layout(position_ids: Any) -> tuple[Any, Any, int, int] | None:
    if _layouts[0] is not position_ids:  # every layer of one forward gets the same tensor
        _layouts[0], _layouts[1] = position_ids, layout(position_ids)
    return _layouts[1]


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
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

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

    gather, scatter, samples, longest = plan
    gather, scatter = gather.to(query.device), scatter.to(query.device)
    groups = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)

    def padded(states: Any) -> Any:  # (1, heads, total, dim) -> (samples, heads, longest, dim)
        heads, dim = states.shape[1], states.shape[3]
        return states[0].index_select(1, gather).view(heads, samples, longest, dim).transpose(0, 1)

    out = torch.nn.functional.scaled_dot_product_attention(
        padded(query),
        padded(key),
        padded(value),
        dropout_p=dropout if module.training else 0.0,
        is_causal=True,
        scale=scaling,
    )
    heads, dim = out.shape[1], out.shape[3]
    out = out.transpose(1, 2).reshape(samples * longest, heads, dim).index_select(0, scatter)
    return out.unsqueeze(0), None


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
