"""vLLM's engine arguments are built from the adapter folder: its LoRA rank reaches ``max_lora_rank``.

(vLLM itself needs a CUDA GPU; the builder is plain Python and is what VLLMBackend passes verbatim.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym.engine.backend import BackendUnavailable
from gym.engine.engines import vllm_engine_args
from gym.engine.loading import ModelSource


def adapter(tmp_path: Path, **config) -> ModelSource:
    folder = tmp_path / "lora"
    folder.mkdir(exist_ok=True)
    (folder / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": "org/base", "peft_type": "LORA", **config})
    )
    return ModelSource(model_id="m", base="org/base", adapter=str(folder))


@pytest.mark.parametrize(("config", "rank"), [
    ({"r": 8}, 8), ({"r": 16}, 16), ({"r": 64}, 64), ({"r": 20}, 32), ({"r": 300}, 320),
    ({"r": 16, "rank_pattern": {"q_proj": 128}}, 128),
])  # fmt: skip
def test_the_adapters_rank_is_passed(tmp_path: Path, config: dict, rank: int) -> None:
    args = vllm_engine_args(adapter(tmp_path, **config))
    assert args["enable_lora"] is True and args["max_lora_rank"] == rank
    assert args["model"] == "org/base"


def test_no_adapter_no_lora(tmp_path: Path) -> None:
    args = vllm_engine_args(ModelSource(model_id="m", base=str(tmp_path)))
    assert "enable_lora" not in args and "max_lora_rank" not in args


def test_a_rank_vllm_cannot_serve_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="LoRA rank is 1024, above the largest rank vLLM serves"):
        vllm_engine_args(adapter(tmp_path, r=1024))
