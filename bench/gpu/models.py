"""Random-weight Qwen2.5-shaped model folders, built offline, and the peak FLOPS MFU is measured against.

No download: the shapes are Qwen2.5-0.5B's and Qwen2.5-7B's published configs, the weights are random
(drawn on the GPU when there is one: a 7B model drawn on the CPU takes minutes) and the tokenizer is
Gym's built-in one. Throughput and MFU do not depend on what the weights are.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                     "tie_word_embeddings": True},
    "qwen2.5-7b": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                   "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                   "tie_word_embeddings": False},
    # --smoke: the same architecture, two layers, small enough for a CPU in CI
    "qwen2-smoke": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048,
                    "tie_word_embeddings": True},
}  # fmt: skip

# Dense bf16 tensor-core peak by device name (vendor datasheets, no sparsity); longest name matched first.
PEAK_BF16_FLOPS: dict[str, float] = {
    "GH200": 989e12,
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
}

DEVICE_ENV = "GYM_GPU_CHECK_DEVICE"
INFO = "gpu_check_model.json"  # written last: parameter count and shape; a folder holding it is finished


def peak_bf16_flops(device_name: str) -> float | None:
    """The datasheet peak for ``device_name`` ('NVIDIA H200'), or None for a device not in the table."""
    for key in sorted(PEAK_BF16_FLOPS, key=len, reverse=True):
        if key in device_name:
            return PEAK_BF16_FLOPS[key]
    return None


def device_name() -> str:
    """The GPU's name ('NVIDIA H200') or 'CPU'; a row process reads it from its parent (no torch import)."""
    if os.environ.get(DEVICE_ENV):
        return os.environ[DEVICE_ENV]
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "CPU"


def build_model(shape: str, folder: Path, *, vocab_from_tokenizer: bool = False) -> dict[str, Any]:
    """Save a random ``shape`` model with Gym's built-in tokenizer into ``folder`` (once); its info.

    ``vocab_from_tokenizer``: the LM head covers only the tokenizer's tokens, so every token a random
    model generates decodes to text (the serving rows count and time text as clients see it).
    """
    info_path = folder / INFO
    if info_path.is_file():
        return json.loads(info_path.read_text())
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from gym.model.builtin import ensure_builtin

    tokenizer = AutoTokenizer.from_pretrained(ensure_builtin("builtin:tiny"))
    dims = dict(SHAPES[shape])
    if vocab_from_tokenizer:
        dims["vocab_size"] = len(tokenizer)
    config = Qwen2Config(**dims, max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(config, dtype=torch.bfloat16)
    parameters = sum(p.numel() for p in model.parameters())
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    del model
    info = {"shape": shape, "parameters": parameters, "vocab_size": dims["vocab_size"]}
    (staging / INFO).write_text(json.dumps(info))
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return info
