"""Pre-quantized (GPTQ, AWQ, ...) checkpoints: telling one apart, and what cannot be done with one.

A LoRA adapter trained on a quantized base can be served on top of that base, but never merged into
it: the base's weights are packed integers, and ``merge_and_unload`` would have to dequantize, add
and requantize them. Serving keeps such an adapter unmerged; ``gym export --merge`` refuses with one
sentence saying what to do instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gym.files import gym_cache_home

CONFIG = "config.json"


def checkpoint_quantization(folder: str | Path) -> str | None:
    """The ``quant_method`` of a model folder's config.json (``gptq``, ``awq``, ``bitsandbytes``...), else None."""
    path = Path(folder) / CONFIG
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    candidates = [data.get("quantization_config"), (data.get("text_config") or {}).get("quantization_config")]
    for quantization in candidates:
        if isinstance(quantization, dict):
            method = quantization.get("quant_method") or (
                "bitsandbytes"
                if quantization.get("load_in_4bit") or quantization.get("load_in_8bit")
                else None
            )
            if method:
                return str(method).lower()
    return None


def merge_refusal(base: str, adapter: str | Path, method: str) -> str:
    """The sentence `gym export --merge` answers for an adapter on a quantized base."""
    return (
        f"cannot merge the LoRA adapter in {adapter} into its base {base}: the base is a {method.upper()}-quantized "
        f"checkpoint, whose packed weights cannot take a merge; serve the adapter unmerged (`gym serve {adapter}`), "
        "or train on the full-precision base and run `gym export --merge --quantize gptq|awq`"
    )


def gptqmodel_environment() -> None:
    """Settings GPTQModel needs before its import: worker count, where it builds kernels, and HF_HOME.

    GPTQModel otherwise sets ``HF_HOME`` itself on import and starts one worker per core it believes
    it has; on a 2-core machine that starves the quantizer.
    """
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(max(1, min(2, os.cpu_count() or 1))))
    os.environ.setdefault("GPTQMODEL_TORCH_EXTENSIONS_DIR", str(gym_cache_home() / "gptqmodel-extensions"))
    os.environ.setdefault("HF_HOME", str(Path("~/.cache/huggingface").expanduser()))
