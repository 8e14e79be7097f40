"""LoRA's low-rank update on CPU with its matrix products laid out the way CPU BLAS runs them fast.

PEFT's ``lora_B(lora_A(x)) * scaling`` forms products with only ``r`` columns, a shape MKL's SGEMM
handles poorly. :class:`LowRankUpdate` computes the same update with every product in its fast
orientation, and :class:`MergedLoraProduct` runs the frozen layer and its adapter as one product through
the merged weight ``W + scaling * B @ A``. :class:`CpuLoraVariant` plugs into PEFT's own LoRA-variant
hook (the one DoRA uses), and :func:`use_cpu_lora_matmuls` makes each plain adapted ``nn.Linear`` a
:class:`CpuLoraLinear` (a subclass of PEFT's ``Linear`` overriding ``forward`` only), so weights, saved
adapters and merges stay PEFT's. Only under ``train.cpu_kernels`` and the PEFT versions in
gym/model/device.py; measurements in docs/cpu-kernels.md, equivalence in tests/model/test_lora_matmuls.py.
"""

from __future__ import annotations

from functools import cache
from typing import Any


def _merged_weight(weight: Any, a: Any, b: Any, scaling: float) -> Any:
    """``W + scaling * B @ A``, shape ``(out, in)``: the frozen layer and its adapter as one weight."""
    return weight.addmm(b, a, alpha=scaling)


def _scaled_thin(flat: Any, a: Any, scaling: float) -> Any:
    """``scaling * x @ A^T``, shape ``(tokens, r)``, computed as ``(A @ x^T)^T``: ``(r, in) @ (in, tokens)``."""
    h = a.mm(flat.t()).t()
    return h * scaling if scaling != 1 else h


def _adapter_gradients(
    grad: Any, flat: Any, scaled: Any, a: Any, b: Any, scaling: float, needs: tuple[bool, bool, bool]
) -> tuple[Any, Any, Any]:
    """The gradients of ``A`` and ``B`` and of the thin activations ``h = x @ A^T``, each only where
    ``needs`` (for A, B, h) asks, every product in its fast orientation.

    ``grad`` is the output's gradient ``(tokens, out)``, ``flat`` the input ``(tokens, in)`` and ``scaled``
    ``scaling * h``; ``h``'s gradient comes scaled, as the chain rule gives it.
    """
    needs_a, needs_b, needs_h = needs
    grad_b = scaled.t().mm(grad).t() if needs_b else None  # (out, r)
    grad_h = None
    if needs_a or needs_h:
        grad_h = b.t().mm(grad.t()).t()  # (tokens, r): as (r, out) @ (out, tokens)
        if scaling != 1:
            grad_h = grad_h * scaling
    grad_a = grad_h.t().mm(flat) if needs_a else None  # (r, in)
    return grad_a, grad_b, grad_h


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
            scaled = _scaled_thin(flat, a, scaling)
            ctx.save_for_backward(flat, scaled, weight, a, b)
            ctx.scaling, ctx.input_shape = scaling, x.shape
            # base + update in one product (the sum written by the GEMM itself, not as a separate add)
            return torch.addmm(base.reshape(-1, b.shape[0]), scaled, b.t()).view(*x.shape[:-1], b.shape[0])

        @staticmethod
        def backward(ctx: Any, grad: Any) -> tuple[Any, Any, None, Any, Any, None]:
            flat, scaled, weight, a, b = ctx.saved_tensors
            grad = grad.reshape(-1, grad.shape[-1])
            needs_x = ctx.needs_input_grad[0]
            grad_a, grad_b, grad_h = _adapter_gradients(
                grad, flat, scaled, a, b, ctx.scaling,
                (ctx.needs_input_grad[3], ctx.needs_input_grad[4], needs_x and weight is None),
            )  # fmt: skip
            grad_x = grad_base = None
            if needs_x and weight is not None:
                grad_x = torch.mm(grad, _merged_weight(weight, a, b, ctx.scaling)).view(ctx.input_shape)
            elif needs_x:
                grad_x = torch.mm(grad_h, a).view(ctx.input_shape)
            if ctx.needs_input_grad[1]:
                grad_base = grad.view(*ctx.input_shape[:-1], grad.shape[-1])
            return grad_x, grad_base, None, grad_a, grad_b, None

    return LowRankUpdate


@cache
def _merged_class() -> type:
    """The merged-weight autograd Function, defined on first use (torch is imported only then)."""
    import torch
    from torch.nn import functional

    class MergedLoraProduct(torch.autograd.Function):
        """``x @ (W + scaling * B @ A)^T + bias``: the frozen layer and its adapter as one product.

        The backward is :class:`LowRankUpdate`'s (the thin activations ``x @ A^T`` are recomputed there,
        the forward never needs them); ``keep_merged`` saves the merged weight for the input's gradient
        instead of forming it again (one copy of the layer's weight held until the backward).
        """

        @staticmethod
        def forward(ctx: Any, x: Any, weight: Any, bias: Any, a: Any, b: Any, scaling: float, keep_merged: bool) -> Any:  # fmt: skip
            merged = _merged_weight(weight, a, b, scaling)
            kept = merged if keep_merged and ctx.needs_input_grad[0] else None
            ctx.save_for_backward(x, weight, kept, a, b)
            ctx.scaling = scaling
            return functional.linear(x, merged, bias)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> tuple[Any, None, None, Any, Any, None, None]:
            x, weight, merged, a, b = ctx.saved_tensors
            flat, grad = x.reshape(-1, x.shape[-1]), grad.reshape(-1, grad.shape[-1])
            grad_x = grad_a = grad_b = None
            needs_a, needs_b = ctx.needs_input_grad[3], ctx.needs_input_grad[4]
            if needs_a or needs_b:
                scaled = _scaled_thin(flat, a, ctx.scaling)  # not needed by the forward: formed here
                grad_a, grad_b, _ = _adapter_gradients(
                    grad, flat, scaled, a, b, ctx.scaling, (needs_a, needs_b, False)
                )
            if ctx.needs_input_grad[0]:
                merged = _merged_weight(weight, a, b, ctx.scaling) if merged is None else merged
                grad_x = torch.mm(grad, merged).view(x.shape)
            return grad_x, None, None, grad_a, grad_b, None, None

    return MergedLoraProduct


# A layer's merged weight is kept from forward to backward up to this many elements (4 MB in fp32: every
# linear layer of the 26M benchmark model); bigger layers form it again in the backward.
KEEP_MERGED_ELEMENTS = 1 << 20


def merged_product_pays(tokens: int, weight: Any, training: bool) -> bool:
    """Whether one merged-weight product costs less than the frozen product plus the adapter's thin ones.

    Forming the merged weight costs ``out * r * in`` multiply-adds. The thin path costs ``tokens * r *
    (in + out)`` in the forward; when training it also forms the merged weight for the input's gradient,
    so keeping it makes the merged forward always cheaper, and forming it twice pays from ``tokens >= in``.
    """
    out_features, in_features = weight.shape
    if training:
        return weight.numel() <= KEEP_MERGED_ELEMENTS or tokens >= in_features
    return tokens * (in_features + out_features) >= in_features * out_features


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


def _mergeable_weight(module: Any, name: str, x: Any) -> Any:
    """The frozen weight through which ``module``'s layer and adapter ``name`` may compute as one merged
    weight for ``x``, else None: a frozen ``nn.Linear`` of ``x``'s dtype, no LoRA dropout between the
    two, and ``name`` the only active adapter (so the layer's output is that of this same ``x`` alone)."""
    from torch import nn

    weight = _frozen_weight(module.get_base_layer(), x)
    if (
        weight is None
        or not isinstance(module.lora_dropout[name], nn.Identity)
        or len(module.active_adapters) != 1
    ):
        return None
    return weight


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
        a, b = module.lora_A[active_adapter].weight, module.lora_B[active_adapter].weight
        scaling = module.scaling[active_adapter]
        weight = _mergeable_weight(module, active_adapter, x)
        if weight is not None:  # the input's gradient through the merged weight
            return low_rank_update(x, result, a, b, scaling, weight=weight)
        return low_rank_update(module.lora_dropout[active_adapter](x), result, a, b, scaling)


@cache
def _linear_class() -> type:
    """:class:`CpuLoraLinear`, defined on first use (PEFT is imported only then)."""
    import torch
    from peft.tuners.lora.layer import Linear

    class CpuLoraLinear(Linear):
        """PEFT's LoRA ``Linear`` whose forward, for one plain adapter (:class:`CpuLoraVariant`) without
        dropout on a frozen layer, is one merged-weight product; everything else is PEFT's own."""

        def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
            product = None if args or kwargs else self._merged_product(x)
            return product if product is not None else super().forward(x, *args, **kwargs)

        def _merged_product(self, x: Any) -> Any:
            if self.disable_adapters or self.merged or len(self.active_adapters) != 1:
                return None
            name = self.active_adapters[0]
            if not isinstance(self.lora_variant.get(name), CpuLoraVariant):
                return None  # no adapter of that name here, a variant of its own (DoRA), or PEFT's path
            a, b = self.lora_A[name].weight, self.lora_B[name].weight
            weight = _mergeable_weight(self, name, x)
            if weight is None or a.dtype != x.dtype or torch.is_autocast_enabled(x.device.type):
                return None
            training = torch.is_grad_enabled()
            if not merged_product_pays(x.numel() // x.shape[-1], weight, training):
                return None
            keep = weight.numel() <= KEEP_MERGED_ELEMENTS
            bias = self.get_base_layer().bias
            return _merged_class().apply(x, weight, bias, a, b, self.scaling[name], keep)

    return CpuLoraLinear


def use_cpu_lora_matmuls(model: Any) -> int:
    """Compute every plain LoRA linear adapter of ``model`` with :class:`CpuLoraVariant` (and its layer as
    a :class:`CpuLoraLinear`); the count switched.

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
        if any(isinstance(v, CpuLoraVariant) for v in module.lora_variant.values()):
            module.__class__ = _linear_class()
    return switched
