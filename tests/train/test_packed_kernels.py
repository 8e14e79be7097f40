"""Gym's packed attention gives each sample exactly what causal SDPA on that sample alone gives, gradients too.

Driven through the attention function transformers calls (``packed_sdpa_forward``) on a packed row, against
PyTorch's own ``scaled_dot_product_attention`` run sample by sample: this covers the batched-product path
for short samples, SDPA for long ones, both in one row, grouped-query heads, and the gathers whose
backward is a gather (a padding slot that leaked gradient into a real token would fail the comparison).
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("lengths", "heads", "kv_heads"),
    [
        ((9, 120, 14, 118, 11, 125), 4, 2),  # short samples only: batched products
        ((30, 150, 33), 4, 4),  # ordinary multi-head attention
        ((5, 300, 10, 280), 4, 1),  # a short call and a long call (SDPA) in one row
    ],
)
def test_packed_attention_matches_sdpa_per_sample(
    lengths: tuple[int, ...], heads: int, kv_heads: int
) -> None:
    import torch
    import torch.nn.functional as F

    from gym.model.cpu_kernels.packed_attention import SHORT, layout, packed_sdpa_forward

    torch.manual_seed(0)
    dim, total = 16, sum(lengths)
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]
    query = torch.randn(1, heads, total, dim, requires_grad=True)
    key = torch.randn(1, kv_heads, total, dim, requires_grad=True)
    value = torch.randn(1, kv_heads, total, dim, requires_grad=True)
    upstream = torch.randn(1, total, heads, dim)
    plan = layout(position_ids)
    assert plan is not None and sum(samples for samples, _ in plan.calls) == len(lengths)
    longest = [longest for _, longest in plan.calls]
    assert any(n <= SHORT for n in longest)
    if max(lengths) > SHORT:
        assert any(n > SHORT for n in longest)

    module = torch.nn.Module().train()
    ours, _ = packed_sdpa_forward(
        module, query, key, value, None, scaling=dim**-0.5, position_ids=position_ids
    )
    ours.backward(upstream)
    grads = [t.grad.clone() for t in (query, key, value)]
    for t in (query, key, value):
        t.grad = None

    outputs, start = [], 0
    for n in lengths:
        q, k, v = (t[:, :, start : start + n] for t in (query, key, value))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=heads != kv_heads)
        outputs.append(out.transpose(1, 2))
        start += n
    reference = torch.cat(outputs, dim=1)
    reference.backward(upstream)

    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    for name, ours_grad, tensor in zip(("query", "key", "value"), grads, (query, key, value), strict=True):
        torch.testing.assert_close(ours_grad, tensor.grad, rtol=1e-4, atol=1e-5, msg=name)
