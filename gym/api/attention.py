"""SDPA for grouped-query attention with a padding mask, without copying the KV cache every step.

transformers' ``sdpa`` attention expands a GQA model's keys and values to every query head
(``repeat_kv``: a full copy of the cache, per layer, per decode step) whenever an attention mask is
given, because CUDA's fused kernels cannot combine GQA with a mask. The batching engine always
passes a mask (its rows are left-padded), and on CPU ``scaled_dot_product_attention(...,
enable_gqa=True)`` takes that mask and gives bit-identical results: on builtin:tiny with a 450-token
cache it is 2.2x faster than expanding first, and the profile of a shared-system-prompt load showed
``repeat_kv`` as the largest single cost. Registered with transformers' own ``AttentionInterface``
under ``gym_sdpa``; every other case goes to transformers' ``sdpa`` unchanged.
"""

from __future__ import annotations

from typing import Any

NAME = "gym_sdpa"


def gqa_sdpa_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                     scaling: float | None = None, is_causal: bool | None = None, **kwargs: Any) -> tuple[Any, None]:  # fmt: skip
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    plain = kwargs.get("position_bias") is None and not kwargs.get("output_attentions") and not dropout
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
