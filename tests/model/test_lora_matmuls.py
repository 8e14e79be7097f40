"""LoRA adapters trained on CPU compute PEFT's update, forward and backward, with BLAS-friendly products."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import VALID


def adapted(tmp_path: Path, lora: str, adapter: str = "lora") -> Any:
    """builtin:tiny with the adapter ``train.adapter`` builds for training, through Gym's own path."""
    from gym.config import load_config
    from gym.model.adapters import apply_adapter
    from gym.model.loading import load_model

    path = tmp_path / "gym.toml"
    path.write_text(VALID.replace('adapter = "lora"', f'adapter = "{adapter}"') + lora)
    config = load_config(path)
    return apply_adapter(load_model(config, for_training=True), config)


def lora_layers(model: Any) -> list[Any]:
    from peft.tuners.lora.layer import Linear

    return [module for module in model.modules() if isinstance(module, Linear)]


def outputs_and_gradients(model: Any, batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    model.zero_grad()
    out = model(**batch)
    out.loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
    return out.logits.detach(), grads


def products_used(layers: list[Any]) -> tuple[list[str], list[Any]]:
    """The autograd Function that computed each adapted layer's output (forward hooks; remove them after)."""
    seen: list[str] = []
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: seen.append(type(out.grad_fn).__name__)) for m in layers
    ]
    return seen, hooks


@pytest.mark.parametrize(
    ("keep_limit", "length", "product"),
    [
        (None, 40, "MergedLoraProductBackward"),  # 120 tokens: one merged product, merged weight kept
        (0, 90, "MergedLoraProductBackward"),  # 270 tokens >= every in_features: formed again in backward
        (0, 40, "LowRankUpdateBackward"),  # 120 tokens < 128 in_features, nothing kept: thin products
    ],
)
def test_cpu_lora_matches_peft_in_outputs_and_gradients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_limit: int | None, length: int, product: str
) -> None:
    import torch

    from gym.model.cpu_kernels import lora_matmuls
    from gym.model.cpu_kernels.lora_matmuls import CpuLoraVariant

    if keep_limit is not None:
        monkeypatch.setattr(lora_matmuls, "KEEP_MERGED_ELEMENTS", keep_limit)
    # alpha != r: the scaling (2.0) is applied; lora_B is made non-zero so every gradient path carries signal
    model = adapted(tmp_path, "lora.r = 4\nlora.alpha = 8\nlora.dropout = 0.0\n")
    layers = lora_layers(model)
    assert layers and all(isinstance(m.lora_variant["default"], CpuLoraVariant) for m in layers)
    torch.manual_seed(0)
    for module in layers:
        torch.nn.init.normal_(module.lora_B["default"].weight, std=0.05)
    ids = torch.randint(3, 500, (3, length))
    batch = {"input_ids": ids, "labels": ids}
    model.train()

    seen, hooks = products_used(layers)
    logits, grads = outputs_and_gradients(model, batch)
    for hook in hooks:
        hook.remove()
    assert seen == [product] * len(layers)
    with torch.no_grad():
        inference_logits = model(**batch).logits
    for module in layers:  # PEFT's own computation: lora_B(lora_A(x)) * scaling through nn.Linear
        module.lora_variant.clear()
    reference_logits, reference = outputs_and_gradients(model, batch)

    torch.testing.assert_close(logits, reference_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(inference_logits, reference_logits, rtol=1e-5, atol=1e-5)
    assert grads.keys() == reference.keys() and any("lora_A" in k for k in grads)
    for name in reference:
        assert reference[name].abs().sum() > 0, name  # a gradient that reaches every adapter
        torch.testing.assert_close(grads[name], reference[name], rtol=1e-4, atol=1e-6, msg=name)


def test_merging_a_cpu_lora_adapter_gives_peft_merged_weights(tmp_path: Path) -> None:
    import copy

    import torch

    model = adapted(tmp_path, "lora.r = 4\nlora.alpha = 8\n")
    torch.manual_seed(1)
    for module in lora_layers(model):
        torch.nn.init.normal_(module.lora_B["default"].weight, std=0.05)
    vanilla = copy.deepcopy(model)
    for module in lora_layers(vanilla):
        module.lora_variant.clear()
    merged = model.merge_and_unload(safe_merge=True).state_dict()
    expected = vanilla.merge_and_unload(safe_merge=True).state_dict()
    assert merged.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(merged[name], expected[name], msg=name)


def test_dora_adapters_keep_their_own_variant(tmp_path: Path) -> None:
    from gym.model.cpu_kernels.lora_matmuls import CpuLoraVariant

    layers = lora_layers(adapted(tmp_path, "", "dora"))
    assert layers  # DoRA puts LoRA layers on the model, each with PEFT's DoRA variant
    for module in layers:
        assert "default" in module.lora_variant
        assert not isinstance(module.lora_variant["default"], CpuLoraVariant)
