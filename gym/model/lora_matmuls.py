"""LoRA's low-rank update on CPU with its matrix products laid out the way CPU BLAS runs them fast.

PEFT computes a LoRA layer's update as ``lora_B(lora_A(x)) * scaling``: two ``nn.Linear`` layers, whose
autograd then forms ``grad_B = g^T @ h`` and ``grad_h = g @ B``. Both are products whose result has only
``r`` columns (r = 8 by default), a shape MKL's SGEMM handles poorly: profiled on this project's CPU
machines (torch.profiler, one thread, 960 tokens, r 8, 256 output features), ``(256, 960) @ (960, 8)``
takes 300 us where the same numbers as ``((8, 960) @ (960, 256))^T`` take 72 us, and ``x @ A^T`` 50 us
against 31 us for ``(A @ x^T)^T``. Across the 28 adapted layers of the built-in tiny model that was a
tenth of a training step, spent on the adapters' few thousand parameters.

:class:`LowRankUpdate` computes exactly PEFT's update (the same products, the scaling applied to the
``r``-column activations instead of the output, which is the same number up to rounding) with every
product written in its fast orientation, forward and backward. When the frozen layer's output comes
straight from the same input (no LoRA dropout, one adapter), the input's gradient of layer and adapter
together is one product through the merged weight ``W + scaling * B @ A`` (an ``(out, r) @ (r, in)``
product per step), replacing the frozen layer's own backward, one adapter product and the sum of the
two. :class:`CpuLoraVariant` plugs it into
PEFT's own extension point for LoRA variants (``LoraLayer.lora_variant``, the hook DoRA uses), so the
layers, weights, saved adapters and merges stay PEFT's. It is installed only for training on CPU and
only on plain ``nn.Linear`` adapters without a variant of their own or a LoRA bias.
tests/model/test_lora_matmuls.py checks outputs and gradients against PEFT's own computation.
"""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def _update_class() -> type:
    """The autograd Function, defined on first use: torch is imported only when an adapter computes."""
    import torch

    class LowRankUpdate(torch.autograd.Function):
        """``base + scaling * x @ A^T @ B^T`` for ``x`` of shape ``(..., in)``, ``A (r, in)``, ``B (out, r)``.

        ``base`` is the frozen layer's output ``x @ W^T (+ bias)``, already computed. With ``weight`` (that
        frozen ``W``, shape ``(out, in)``) the input's gradient is one product through the merged weight,
        ``g @ (W + scaling * B @ A)``, in place of the frozen layer's own backward plus two adapter
        products and their sum; ``base`` then carries no gradient of its own (:func:`low_rank_update` detaches it).
        """

        @staticmethod
        def forward(ctx: Any, x: Any, base: Any, weight: Any, a: Any, b: Any, scaling: float) -> Any:
            flat = x.reshape(-1, x.shape[-1])
            h = torch.mm(a, flat.t()).t()  # (tokens, r): as (r, in) @ (in, tokens)
            scaled = h * scaling if scaling != 1 else h
            ctx.save_for_backward(flat, scaled, weight, a, b)
            ctx.scaling, ctx.input_shape = scaling, x.shape
            # base + update in one product (the sum written by the GEMM itself, not as a separate add)
            return torch.addmm(base.reshape(-1, b.shape[0]), scaled, b.t()).view(*x.shape[:-1], b.shape[0])

        @staticmethod
        def backward(ctx: Any, grad: Any) -> tuple[Any, Any, None, Any, Any, None]:
            flat, scaled, weight, a, b = ctx.saved_tensors
            grad = grad.reshape(-1, grad.shape[-1])
            grad_b = torch.mm(scaled.t(), grad).t() if ctx.needs_input_grad[4] else None  # (out, r)
            grad_h = torch.mm(b.t(), grad.t()).t()  # (tokens, r): as (r, out) @ (out, tokens)
            if ctx.scaling != 1:
                grad_h = grad_h * ctx.scaling
            grad_a = torch.mm(grad_h.t(), flat) if ctx.needs_input_grad[3] else None  # (r, in)
            grad_x = grad_base = None
            if ctx.needs_input_grad[0] and weight is not None:
                merged = torch.addmm(weight, b, a, alpha=ctx.scaling)  # W + scaling * B @ A
                grad_x = torch.mm(grad, merged).view(ctx.input_shape)
            elif ctx.needs_input_grad[0]:
                grad_x = torch.mm(grad_h, a).view(ctx.input_shape)
            if ctx.needs_input_grad[1]:
                grad_base = grad.view(*ctx.input_shape[:-1], grad.shape[-1])
            return grad_x, grad_base, None, grad_a, grad_b, None

    return LowRankUpdate


def low_rank_update(x: Any, base: Any, a: Any, b: Any, scaling: float, weight: Any = None) -> Any:
    """``base + scaling * lora_B(lora_A(x))`` for bias-free adapters, with CPU-friendly products.

    With ``weight``, the frozen weight that computed ``base`` from ``x``, the input's gradient runs through
    the merged weight, so ``base`` is detached here (its own backward would add that gradient twice).
    """
    if weight is not None:
        base = base.detach()
    return _update_class().apply(x, base, weight, a, b, scaling)


def _frozen_weight(layer: Any, x: Any) -> Any:
    """The weight of a frozen ``nn.Linear`` (bias frozen or absent) of ``x``'s dtype, else None."""
    bias = getattr(layer, "bias", None)
    if (
        layer.weight.requires_grad
        or (bias is not None and bias.requires_grad)
        or layer.weight.dtype != x.dtype
    ):
        return None
    return layer.weight


class CpuLoraVariant:
    """PEFT's LoRA-variant interface (static methods, as PEFT calls them) for plain LoRA computed by
    :func:`low_rank_update`; merging is vanilla LoRA's (``get_delta_weight``)."""

    def supports_lora_conversion(self) -> bool:
        return True

    @staticmethod
    def init(module: Any, adapter_name: str, **kwargs: Any) -> None:
        return None

    @staticmethod
    def merge_safe(module: Any, active_adapter: str, orig_weight: Any) -> Any:
        return orig_weight + module.get_delta_weight(active_adapter).to(orig_weight.dtype)

    @staticmethod
    def merge_unsafe(module: Any, active_adapter: str, orig_weight: Any) -> None:
        orig_weight.data += module.get_delta_weight(active_adapter).to(orig_weight.dtype)

    @staticmethod
    def unmerge(module: Any, active_adapter: str, orig_weight: Any) -> Any:
        return orig_weight.data - module.get_delta_weight(active_adapter).to(orig_weight.dtype)

    @staticmethod
    def forward(module: Any, active_adapter: str, x: Any, result: Any, **kwargs: Any) -> Any:
        from torch import nn

        a, b = module.lora_A[active_adapter].weight, module.lora_B[active_adapter].weight
        scaling = module.scaling[active_adapter]
        dropout = module.lora_dropout[active_adapter]
        weight = _frozen_weight(module.get_base_layer(), x)
        # Merged-weight gradient only when ``result`` is the frozen layer's output of this same ``x`` alone
        # (no dropout between them, no other adapter added before this one).
        if weight is not None and isinstance(dropout, nn.Identity) and len(module.active_adapters) == 1:
            return low_rank_update(x, result, a, b, scaling, weight=weight)
        return low_rank_update(dropout(x), result, a, b, scaling)


def use_cpu_lora_matmuls(model: Any) -> int:
    """Compute every plain LoRA linear adapter of ``model`` with :class:`CpuLoraVariant`; the count switched.

    Left to PEFT: adapters with a variant already (DoRA), with a LoRA bias, or on layers that are not a
    plain ``nn.Linear`` (bitsandbytes, GPTQ, embeddings, convolutions).
    """
    from peft.tuners.lora.layer import Linear
    from torch import nn

    switched = 0
    for module in model.modules():
        if type(module) is not Linear or not isinstance(module.get_base_layer(), nn.Linear):
            continue
        for name in module.lora_A:
            if name in module.lora_variant or module.lora_B[name].bias is not None:
                continue
            module.lora_variant[name] = CpuLoraVariant()
            switched += 1
    return switched
