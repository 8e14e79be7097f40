"""`gym export --quantize gptq|awq`: the merged full-precision model quantized to 4 bits, then reloaded.

Merge first, quantize second (a quantized base refuses merges). Calibration rows are the run's own
training rows, tokenized and templated exactly as training saw them, so the quantizer minimises the
error on the data the model will meet. Quantization runs through GPTQModel (GPTQ, and AWQ with its
torch backend) on CPU or GPU; the result is reloaded through transformers (which uses GPTQModel's
kernels) and run on one calibration row before Gym reports success, so a checkpoint that does not
load is never left looking finished.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.export.output import new_parents, replace_folder
from gym.files import gym_cache_home
from gym.model.quantized import gptqmodel_environment

if TYPE_CHECKING:
    from gym.config.root import GymConfig

METHODS = ("gptq", "awq")
CALIBRATION_ROWS = 128
INSTALL = "pip install 'zoo-gym[quantize]' (GPTQModel 7.6.0 and optimum; see docs/quantized.md)"


class QuantizeError(Exception):
    """Quantizing cannot be done or failed; the message is one sentence."""


def calibration_rows(
    config: GymConfig, tokenizer: Any, limit: int = CALIBRATION_ROWS
) -> list[dict[str, list[int]]]:
    """Up to ``limit`` training rows of ``config`` as ``{"input_ids", "attention_mask"}``."""
    from gym.data.prepare import prepare_data
    from gym.model.vision import model_vision

    prepared = prepare_data(config, tokenizer, vision=model_vision(config))
    ids = prepared.train["input_ids"][:limit]
    if not ids:
        raise QuantizeError("the run's datasets have no training rows to calibrate the quantizer with")
    return [{"input_ids": list(row), "attention_mask": [1] * len(row)} for row in ids]


def group_size(folder: Path) -> int:
    """The largest of 128/64/32 that divides every linear layer's input size (tiny models need 32)."""
    import json

    data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    text = data.get("text_config") or data
    sizes = [text.get("hidden_size") or 0, text.get("intermediate_size") or 0]
    return next((g for g in (128, 64, 32) if all(s and s % g == 0 for s in sizes)), 32)


def quantize_folder(merged: Path, target: Path, method: str, rows: list[dict[str, list[int]]]) -> Path:
    """Quantize the full-precision model in ``merged`` with ``method`` into ``target`` (4-bit)."""
    if method not in METHODS:
        raise QuantizeError(f"--quantize must be one of {', '.join(METHODS)}, got {method!r}")
    from gym.model.folders import is_vision_folder

    if is_vision_folder(str(merged)):
        raise QuantizeError(
            f"--quantize {method} handles text models only in this version of Gym; {merged} is a "
            "vision-language model (export it with --merge and quantize it with its own tooling)"
        )
    gptqmodel_environment()
    try:
        from gptqmodel import BACKEND, GPTQModel, QuantizeConfig
        from gptqmodel.quantization import FORMAT, METHOD
    except ImportError:
        raise QuantizeError(
            f"--quantize {method} needs the 'gptqmodel' package, which is not installed; {INSTALL}"
        ) from None
    size = group_size(merged)
    if method == "awq":
        settings = QuantizeConfig(bits=4, group_size=size, quant_method=METHOD.AWQ, format=FORMAT.GEMM)
        backend = BACKEND.AWQ_TORCH
    else:
        settings = QuantizeConfig(bits=4, group_size=size)
        backend = BACKEND.AUTO
    merged, target = merged.resolve(), target.resolve()
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    logs = gym_cache_home() / "gptqmodel-logs"  # GPTQModel writes logs/ into the working directory
    logs.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.chdir(logs):
            model = GPTQModel.load(str(merged), settings)
            model.quantize(rows, batch_size=4, backend=backend)
            model.save(str(staging))
        for name in merged.iterdir():  # tokenizer, chat template, card: everything the weights do not replace
            if name.is_file() and not (staging / name.name).exists():
                shutil.copy2(name, staging / name.name)
        check_reload(staging, method, rows[0])
        replace_folder(staging, target)  # an old folder is replaced only by a finished, reloaded one
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def check_reload(folder: Path, method: str, row: dict[str, list[int]]) -> None:
    """Load the quantized folder through transformers and run one row; QuantizeError naming the file otherwise."""
    import torch
    from transformers import AutoModelForCausalLM

    from gym.model.quantized import checkpoint_quantization

    found = checkpoint_quantization(folder)
    if found != method:
        raise QuantizeError(f"{folder / 'config.json'} says quant_method {found!r}, expected {method!r}")
    from gym.model.device import inference_device

    device = inference_device()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), device_map={"": device})
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([row["input_ids"][:64]], device=device)).logits
    except Exception as error:  # noqa: BLE001 - any failure to load is the same verdict
        from gym.failures import first_line

        raise QuantizeError(
            f"the {method.upper()} model in {folder} does not reload: {first_line(error)}"
        ) from error
    if not bool(torch.isfinite(logits).all()):
        raise QuantizeError(f"the {method.upper()} model in {folder} reloads but produces non-finite logits")


def export_quantized(
    path: Path, method: str, target: Path, config: GymConfig, status: Callable[[str], AbstractContextManager]
) -> Path:
    """`gym export PATH --quantize METHOD`: calibrate on ``config``'s training rows, merge PATH if it is
    an adapter, quantize into ``target`` and check that it reloads. ``status`` wraps each long step."""
    import tempfile

    from gym.export.merge import merge_adapter
    from gym.model.folders import is_adapter_folder
    from gym.model.loading import load_tokenizer

    with status("preparing calibration rows"):
        rows = calibration_rows(config, load_tokenizer(config))
    with tempfile.TemporaryDirectory(prefix="gym-merged-") as scratch, new_parents(target):
        merged = path
        if is_adapter_folder(path):
            with status(f"merging {path}"):
                merged = merge_adapter(path, Path(scratch) / "merged")
        with status(f"quantizing to {method.upper()} 4-bit with {len(rows)} calibration rows"):
            return quantize_folder(merged, target, method, rows)
