"""From what the user typed (folder, ``builtin:tiny``, gym.toml, Hub id) to a loaded model and tokenizer.

A LoRA output folder (``adapter_config.json`` present) is served as its base plus the adapter through
PEFT, and its tokenizer, when saved beside the adapter, wins over the base's: the chat template the
model was trained with is the one serving must render.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym.model.folders import ADAPTER_CONFIG, is_adapter_folder, is_model_folder

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


@dataclass(frozen=True)
class ModelSource:
    """A resolved model: weights folder (or base id) plus an optional LoRA adapter folder."""

    model_id: str  # the name clients send as "model"
    base: str  # folder or Hub id of the full weights
    adapter: str | None = None  # LoRA folder served on top of base

    @property
    def tokenizer_path(self) -> str:
        if self.adapter and any((Path(self.adapter) / name).is_file() for name in TOKENIZER_FILES):
            return self.adapter
        return self.base


def adapter_base(adapter_dir: Path) -> str:
    """The base model an adapter folder names, with ``builtin:`` names built to their cache folder."""
    from gym.model.builtin import resolve_model_path

    config = json.loads((adapter_dir / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{adapter_dir / ADAPTER_CONFIG} does not name base_model_name_or_path")
    return resolve_model_path(base)


def _from_folder(path: Path, model_id: str) -> ModelSource:
    if is_adapter_folder(path):
        return ModelSource(model_id=model_id, base=adapter_base(path), adapter=str(path))
    return ModelSource(model_id=model_id, base=str(path))


def resolve_source(target: str, served_name: str | None = None) -> ModelSource:
    """Resolve ``gym serve``'s argument: a folder, ``builtin:NAME``, a gym.toml, or a Hub repository id.

    For a gym.toml the run's trained output (``project.output_dir``) is served when it holds a model,
    else its base model, so `gym serve gym.toml` works before and after training.
    """
    from gym.model.builtin import BUILTIN_PREFIX, resolve_model_path

    if target.startswith(BUILTIN_PREFIX):
        return ModelSource(model_id=served_name or target, base=resolve_model_path(target))
    path = Path(target).expanduser()
    if path.suffix == ".toml" and path.is_file():
        from gym.config import config_from_args

        config = config_from_args(path)
        name = served_name or config.project.name
        output = config.output_path
        if output.is_dir() and is_model_folder(output):
            return _from_folder(output, name)
        return resolve_source(config.model.name_or_path, served_name=name)
    if path.is_dir():
        if not is_model_folder(path):
            raise ValueError(
                f"{path} holds neither a model (config.json) nor a LoRA adapter ({ADAPTER_CONFIG})"
            )
        return _from_folder(path.resolve(), served_name or path.resolve().name)
    if path.exists() or target.startswith((".", "/", "~")):
        raise ValueError(
            f"{target}: expected a model folder, builtin:NAME, a gym.toml or a Hub repository id"
        )
    from huggingface_hub import snapshot_download

    folder = Path(snapshot_download(target))  # a Hub id, e.g. inside a Space
    return _from_folder(folder, served_name or target)


def load_model_and_tokenizer(
    source: ModelSource, device: str | None = None, dtype: str = "auto"
) -> tuple[Any, Any]:
    """Load weights (merging the adapter for fast inference) and the tokenizer, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if device is None:
        from gym.model.device import inference_device

        device = inference_device()
    from gym.model.quantized import checkpoint_quantization

    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    quantized = checkpoint_quantization(source.base)
    if quantized in ("gptq", "awq"):
        from gym.model.quantized import gptqmodel_environment

        gptqmodel_environment()
    placement = {"device_map": {"": device}} if quantized else {}  # packed weights are placed when loaded
    model = AutoModelForCausalLM.from_pretrained(source.base, dtype=torch_dtype, **placement)
    if source.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, source.adapter)
        if quantized is None:
            model = (
                model.merge_and_unload()
            )  # plain weights: merged for speed; a quantized base keeps it apart
    tokenizer = AutoTokenizer.from_pretrained(source.tokenizer_path)
    if quantized is None:
        model.to(device)
    model.eval()
    return model, tokenizer
