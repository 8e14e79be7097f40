"""The two pieces of Gym's packed attention (packed_attention.py) that stock ops do slowly on CPU.

Short causal attention as batched matrix products: PyTorch's CPU flash kernel spends short samples'
time in per-block overhead; up to :data:`SHORT` tokens one ``baddbmm`` (causal mask added in the same
call), a softmax and one ``bmm`` are faster, query heads sharing a key/value head stacked along the rows.
Gathers whose backward is a gather: every real token appears once in the padded layout and padding
slots receive zero gradient, so the inverse-index gather replaces the slow ``index_add_`` backward.
tests/train/test_packed_kernels.py compares both with PyTorch's own ops, gradients included;
measurements in docs/cpu-kernels.md.
"""

from __future__ import annotations

from functools import cache
from typing import Any

SHORT = 160  # samples this long or shorter (the longest of an attention call) use the batched products


@cache
def _reindex_class() -> type:
    """The autograd Function, defined on first use: torch is imported only when a model trains."""
    import torch

    class Reindex(torch.autograd.Function):
        """``x.index_select(dim, forward)``, whose gradient is ``grad.index_select(dim, backward)``."""

        @staticmethod
        def forward(ctx: Any, x: Any, dim: int, forward: Any, backward: Any) -> Any:
            ctx.dim, ctx.backward_index = dim, backward
            return x.index_select(dim, forward)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> tuple[Any, None, None, None]:
            return grad.index_select(ctx.dim, ctx.backward_index), None, None, None

    return Reindex


def reindex(x: Any, dim: int, forward: Any, backward: Any) -> Any:
    """Rows of ``x`` along ``dim`` picked by ``forward``; the gradient of row ``i`` is that of output row
    ``backward[i]``. Exact only when the other outputs that read row ``i`` carry zero gradient: the packed
    layout's guarantee (padding slots), which its callers rely on."""
    return _reindex_class().apply(x, dim, forward, backward)


_masks: dict[tuple[int, int, Any, Any], Any] = {}


def _causal_mask(longest: int, group: int, dtype: Any, device: Any) -> Any:
    """``(group * longest, longest)``: 0 where a query may see a key, -inf after it, per stacked head."""
    import torch

    key = (longest, group, dtype, device)
    if key not in _masks:
        if len(_masks) > 64:  # lengths vary per batch: keep the cache small
            _masks.clear()
        mask = torch.full((longest, longest), float("-inf"), dtype=dtype, device=device).triu(1)
        _masks[key] = mask.repeat(group, 1)
    return _masks[key]


def short_causal_attention(
    query: Any, key: Any, value: Any, samples: int, longest: int, scaling: float | None
) -> Any:
    """Causal attention of padded samples as batched products; output ``(samples * longest, heads, dim)``.

    ``query`` is ``(heads, samples * longest, dim)`` and ``key``/``value`` are ``(kv_heads, samples *
    longest, dim)``, each sample right-padded to ``longest``; query heads ``j * group .. (j + 1) * group
    - 1`` share key/value head ``j`` (transformers' ``repeat_kv`` order).
    """
    import torch

    heads, dim = query.shape[0], query.shape[-1]
    kv_heads = key.shape[0]
    group = heads // kv_heads
    scale = dim**-0.5 if scaling is None else scaling
    # (kv_heads * samples, group * longest, dim): the group's query heads stacked along the rows
    q = query.view(kv_heads, group, samples, longest, dim).transpose(1, 2).reshape(-1, group * longest, dim)
    k = key.reshape(kv_heads * samples, longest, dim)
    v = value.reshape(kv_heads * samples, longest, dim)
    mask = _causal_mask(longest, group, query.dtype, query.device)
    scores = torch.baddbmm(mask, q, k.transpose(1, 2), alpha=scale)
    out = torch.bmm(torch.softmax(scores, dim=-1), v)
    # (kv_heads, samples, group, longest, dim) -> (samples, longest, heads, dim)
    out = out.view(kv_heads, samples, group, longest, dim).permute(1, 3, 0, 2, 4)
    return out.reshape(samples * longest, heads, dim)
