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
product written in its fast orientation, forward and backward; :class:`CpuLoraVariant` plugs it into
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
        """``scaling * x @ A^T @ B^T`` for ``x`` of shape ``(..., in)``, ``A (r, in)``, ``B (out, r)``."""

        @staticmethod
        def forward(ctx: Any, x: Any, a: Any, b: Any, scaling: float) -> Any:
            flat = x.reshape(-1, x.shape[-1])
            h = torch.mm(a, flat.t()).t()  # (tokens, r): as (r, in) @ (in, tokens)
            scaled = h * scaling if scaling != 1 else h
            ctx.save_for_backward(flat, scaled, a, b)
            ctx.scaling, ctx.input_shape = scaling, x.shape
            return torch.mm(scaled, b.t()).view(*x.shape[:-1], b.shape[0])

        @staticmethod
        def backward(ctx: Any, grad: Any) -> tuple[Any, Any, Any, None]:
            flat, scaled, a, b = ctx.saved_tensors
            grad = grad.reshape(-1, grad.shape[-1])
            grad_b = torch.mm(scaled.t(), grad).t() if ctx.needs_input_grad[2] else None  # (out, r)
            grad_h = torch.mm(b.t(), grad.t()).t()  # (tokens, r): as (r, out) @ (out, tokens)
            if ctx.scaling != 1:
                grad_h = grad_h * ctx.scaling
            grad_a = torch.mm(grad_h.t(), flat) if ctx.needs_input_grad[1] else None  # (r, in)
            grad_x = torch.mm(grad_h, a).view(ctx.input_shape) if ctx.needs_input_grad[0] else None
            return grad_x, grad_a, grad_b, None

    return LowRankUpdate


def low_rank_update(x: Any, a: Any, b: Any, scaling: float) -> Any:
    """``scaling * lora_B(lora_A(x))`` for bias-free adapters, with CPU-friendly products."""
    return _update_class().apply(x, a, b, scaling)


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
        x = module.lora_dropout[active_adapter](x)
        a, b = module.lora_A[active_adapter].weight, module.lora_B[active_adapter].weight
        return result + low_rank_update(x, a, b, module.scaling[active_adapter])


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
