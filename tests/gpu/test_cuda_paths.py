"""What a GPU node runs: `gym train` (bf16 LoRA SFT) and `gym serve` on CUDA, with PEFT's own layers."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import free_port, stop, wait_healthy

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
STEPS = 20


def write_run(folder: Path, adapter: str = "lora") -> Path:
    from gym.data.builtin_datasets import write_reverse_dataset

    write_reverse_dataset(folder / "data", n_train=128, n_test=8)
    config = folder / "gym.toml"
    config.write_text(f"""\
[project]
name = "gpu-path"
output_dir = "out"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"

[train]
method = "sft"
adapter = "{adapter}"
max_steps = {STEPS}
batch_size = 16
learning_rate = 3e-3
lr_scheduler = "constant"
warmup_ratio = 0.0
save_steps = 1000
resume = "never"
""")
    return config


def gym_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}


def test_bf16_lora_sft_trains_on_cuda_through_gym_train(tmp_path: Path, gpu_device: str) -> None:
    config = write_run(tmp_path)
    done = subprocess.run([sys.executable, "-m", "gym", "train", str(config), "--no-progress"],
                          cwd=tmp_path, env=gym_env(), capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "train_results.json").read_text())
    decided = results["device"]
    assert decided["device"] == gpu_device
    assert decided["dtype"] == ("bfloat16" if gpu_device == "cuda" else "float32")
    assert decided["cpu_kernels"] is False
    assert decided["attention"] == "transformers' own"
    assert results["steps"] == STEPS
    losses = [loss for _, loss in results["loss_curve"]]
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0]  # LoRA on a random base still learns the letters' distribution
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()


def test_gpu_path_uses_peft_layers_and_transformers_attention(tmp_path: Path, gpu_device: str) -> None:
    """The model `gym train` builds: PEFT's own LoRA layers and the attention transformers picks by itself."""
    from peft.tuners.lora import LoraLayer
    from transformers import AutoModelForCausalLM

    from gym.config import load_config
    from gym.model.adapters import apply_adapter
    from gym.model.builtin import ensure_builtin
    from gym.model.loading import load_model

    config = load_config(write_run(tmp_path))
    model = apply_adapter(load_model(config, for_training=True), config)
    lora_layers = [module for module in model.modules() if isinstance(module, LoraLayer)]
    assert lora_layers
    assert {type(layer).__module__ for layer in lora_layers} <= {"peft.tuners.lora.layer"}
    gym_classes = {
        type(module).__qualname__ for module in model.modules() if type(module).__module__.startswith("gym.")
    }
    assert not gym_classes
    plain = AutoModelForCausalLM.from_pretrained(ensure_builtin("builtin:tiny"))
    assert model.base_model.model.config._attn_implementation == plain.config._attn_implementation


def test_gym_serve_on_cuda_answers_as_generate_greedy(tmp_path: Path, gpu_device: str) -> None:
    import torch
    from openai import OpenAI
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gym.model.builtin import ensure_builtin

    folder = ensure_builtin("builtin:tiny")
    messages = [{"role": "user", "content": "Reverse: g a e"}]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype="auto").to(gpu_device).eval()
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True).to(gpu_device)  # fmt: skip
    with torch.no_grad():
        generated = model.generate(**prompt, do_sample=False, max_new_tokens=16)
    expected = tokenizer.decode(generated[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    del model
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gym", "serve", str(folder), "--device", gpu_device, "--served-model-name",
         "tiny", "--host", "127.0.0.1", "--port", str(port)],
        env=gym_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process, timeout=300)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        reply = client.chat.completions.create(model="tiny", messages=messages, temperature=0, max_tokens=16)
    finally:
        stop(process)
    assert reply.choices[0].message.content == expected
