"""Each train.adapter trains exactly the parameters it should on builtin:tiny, counted from its shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gym.config.root import GymConfig
from gym.model.adapters import ADAPTERS, apply_adapter, register_adapter, trainable_parameters
from gym.model.builtin import ensure_builtin
from gym.model.loading import ModelError, load_model

pytestmark = pytest.mark.slow

# builtin:tiny: hidden 128, intermediate 256, 4 layers, 4 heads / 2 KV heads (head dim 32), vocab 512,
# tied embeddings, no biases.
HIDDEN, INTERMEDIATE, LAYERS, VOCAB = 128, 256, 4, 512
KV = 2 * (HIDDEN // 4)
LINEARS = {  # (in, out) of every linear layer in one decoder layer
    "q_proj": (HIDDEN, HIDDEN),
    "k_proj": (HIDDEN, KV),
    "v_proj": (HIDDEN, KV),
    "o_proj": (HIDDEN, HIDDEN),
    "gate_proj": (HIDDEN, INTERMEDIATE),
    "up_proj": (HIDDEN, INTERMEDIATE),
    "down_proj": (INTERMEDIATE, HIDDEN),
}
LAYER_PARAMS = sum(i * o for i, o in LINEARS.values()) + 2 * HIDDEN  # + input / post-attention RMSNorm
TOTAL = VOCAB * HIDDEN + LAYERS * LAYER_PARAMS + HIDDEN  # embeddings (= head, tied) + layers + final norm


def lora_count(r: int, modules: list[str] | None = None) -> int:
    return LAYERS * sum(r * (i + o) for name, (i, o) in LINEARS.items() if modules is None or name in modules)


def dora_count(r: int) -> int:
    return lora_count(r) + LAYERS * sum(o for _, o in LINEARS.values())  # one magnitude per output feature


@pytest.fixture(scope="module")
def xdg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("xdg")
    ensure_builtin("builtin:tiny", root=root / "gym" / "builtin")
    return root


@pytest.fixture(autouse=True)
def _builtin_cache(xdg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))


def make_config(**train: Any) -> GymConfig:
    return GymConfig.model_validate(
        {
            "project": {"name": "t"},
            "model": {"name_or_path": "builtin:tiny"},
            "datasets": [{"path": "data.jsonl", "format": "alpaca"}],
            "train": train,
        }
    )


def prepared(**train: Any) -> Any:
    config = make_config(**train)
    return apply_adapter(load_model(config), config)


def forward_backward(model: Any) -> None:
    import torch

    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    trained = [p for p in model.parameters() if p.requires_grad]
    assert trained and all(p.grad is not None for p in trained)
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)


def test_architecture_matches_the_counts_used_here() -> None:
    model = load_model(make_config(adapter="full"))
    assert (model.config.vocab_size, model.config.hidden_size, model.config.num_hidden_layers) == (
        VOCAB,
        HIDDEN,
        4,
    )
    assert trainable_parameters(model) == (TOTAL, TOTAL) == (656_512, 656_512)


def test_lora_all_linear() -> None:
    model = prepared(adapter="lora", lora={"r": 8})
    assert trainable_parameters(model) == (lora_count(8), TOTAL + lora_count(8))
    assert lora_count(8) == 65_536
    assert not any("lm_head" in name and "lora" in name for name, _ in model.named_modules())
    forward_backward(model)


def test_lora_named_modules_and_scale() -> None:
    model = prepared(adapter="lora", lora={"r": 4, "alpha": 16, "target_modules": ["q_proj", "v_proj"]})
    assert trainable_parameters(model)[0] == lora_count(4, ["q_proj", "v_proj"])
    q_proj = model.base_model.model.model.layers[0].self_attn.q_proj
    assert q_proj.scaling["default"] == 16 / 4


def test_dora_adds_a_magnitude_per_output_feature() -> None:
    model = prepared(adapter="dora", lora={"r": 8})
    assert trainable_parameters(model) == (dora_count(8), TOTAL + dora_count(8))
    forward_backward(model)


def test_full_trains_everything() -> None:
    model = prepared(adapter="full")
    assert trainable_parameters(model) == (TOTAL, TOTAL)


@pytest.mark.parametrize("layers", [1, 2, 4])
def test_freeze_trains_only_the_last_layers_and_final_norm(layers: int) -> None:
    model = prepared(adapter="freeze", freeze={"trainable_layers": layers})
    assert trainable_parameters(model) == (layers * LAYER_PARAMS + HIDDEN, TOTAL)
    trainable = {
        name.split(".")[2] for name, p in model.named_parameters() if p.requires_grad and ".layers." in name
    }
    assert trainable == {str(i) for i in range(LAYERS - layers, LAYERS)}
    assert model.model.norm.weight.requires_grad and not model.model.embed_tokens.weight.requires_grad
    forward_backward(model)


def test_freeze_more_layers_than_the_model_has() -> None:
    with pytest.raises(ModelError, match=r"trainable_layers = 5 but the model has only 4 decoder layers"):
        prepared(adapter="freeze", freeze={"trainable_layers": 5})


def test_qlora_on_a_4bit_base_on_cpu() -> None:
    """bitsandbytes >= 0.48 has a CPU backend: NF4 quantize/dequantize run in its own C++ library."""
    pytest.importorskip("bitsandbytes", reason="bitsandbytes (the qlora extra) is not installed")
    import bitsandbytes as bnb
    import torch

    model = prepared(adapter="qlora", lora={"r": 8})
    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(layers) == LAYERS * len(LINEARS)
    assert all(m.weight.device.type == "cpu" for m in layers)
    assert trainable_parameters(model) == (lora_count(8), TOTAL + lora_count(8))
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)
    forward_backward(model)


def test_qlora_gradients_are_the_same_after_an_eval_pass() -> None:
    """Generation or evaluation (eval mode, no grad) must not change what training computes afterwards.

    bitsandbytes 0.50 on an AVX512-BF16 CPU would repack the 4-bit weights for its inference kernel, which
    has no autograd formula; the qlora adapter switches that off.
    """
    pytest.importorskip("bitsandbytes", reason="bitsandbytes (the qlora extra) is not installed")
    import warnings

    import torch

    model = prepared(adapter="qlora", lora={"r": 8, "dropout": 0.0})
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))

    def gradients() -> dict[str, Any]:
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    before = gradients()
    model.eval()
    with torch.no_grad():
        model(input_ids=ids)
    model.train()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*autograd kernel was not registered.*")
        after = gradients()
    assert before.keys() == after.keys()
    assert all(torch.allclose(before[n], after[n]) for n in before)


def test_qlora_refuses_an_unquantized_base() -> None:
    config = make_config(adapter="lora")
    model = load_model(config)
    with pytest.raises(ModelError, match=r"^train.adapter = 'qlora' needs the base loaded in 4-bit"):
        ADAPTERS["qlora"](model, config)


def test_registered_adapter_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setitem(ADAPTERS, "full", ADAPTERS["full"])  # restored after the test
    register_adapter("full", lambda model, config: calls.append(config.train.adapter) or model)
    prepared(adapter="full")
    assert calls == ["full"]
