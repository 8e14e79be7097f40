"""Loading the model to evaluate: a LoRA output folder (base + adapter) or a full model folder.

The model is loaded once and handed to lm-eval's ``HFLM`` as an object, so lm-eval never reloads it
per task. The base for an adapter is loaded the way training loaded it (``[model]``: dtype,
quantization, revision), so the adapter sits on exactly the weights it was trained against.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.eval.errors import EvalError
from gym.failures import first_line
from gym.model.folders import ADAPTER_CONFIG, is_adapter_folder, is_model_folder

if TYPE_CHECKING:
    from gym.config.root import GymConfig

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def device() -> str:
    from gym.model.device import inference_device

    return inference_device()


def _place(model: Any) -> Any:
    """Move an unquantized model to the GPU when there is one (quantized ones are placed when loaded)."""
    if not getattr(model, "is_quantized", False) and getattr(model, "hf_device_map", None) is None:
        model.to(device())
    return model.eval()


def load_base(config: GymConfig) -> tuple[Any, Any]:
    """The base model and its tokenizer (with the configured chat template), ready for inference."""
    from gym.model.loading import ModelError, load_model, load_tokenizer

    try:
        return _place(load_model(config, for_training=False)), load_tokenizer(config)
    except ModelError as error:
        raise EvalError(str(error)) from error


def load_tuned(config: GymConfig, path: Path) -> tuple[Any, Any]:
    """The trained model at ``path``: base + LoRA adapter (merged unless the base is quantized), or full weights.

    The tokenizer saved beside the weights wins: it carries the chat template the model was trained with.
    """
    from gym.model.builtin import BUILTIN_PREFIX, resolve_model_path

    if str(path).startswith(BUILTIN_PREFIX):
        path = Path(resolve_model_path(str(path)))
    if not path.is_dir():
        raise EvalError(f"no trained model at '{path}'; run `gym train` first or pass --model PATH")
    adapter = is_adapter_folder(path)
    if not is_model_folder(path):
        raise EvalError(
            f"'{path}' holds neither a model (config.json) nor a LoRA adapter ({ADAPTER_CONFIG}); "
            "run `gym train` first or pass --model PATH"
        )
    if adapter:
        model, base_tokenizer = load_base(config)
        from peft import PeftModel

        try:
            model = PeftModel.from_pretrained(model, str(path))
        except (OSError, ValueError, RuntimeError) as error:
            raise EvalError(f"could not load the LoRA adapter in '{path}': {first_line(error)}") from error
        if not getattr(model.base_model.model, "is_quantized", False):
            model = model.merge_and_unload()  # plain weights: faster, and what HFLM expects
        model.eval()
    else:
        model, base_tokenizer = _load_full(config, path), None
    tokenizer = _tokenizer(config, path, base_tokenizer)
    return model, tokenizer


def _load_full(config: GymConfig, path: Path) -> Any:
    import json

    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from gym.model.loading import resolve_dtype
    from gym.model.vision import config_is_vision

    vision = config_is_vision(json.loads((path / "config.json").read_text(encoding="utf-8")))
    loader = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    try:
        model = loader.from_pretrained(
            str(path),
            dtype=resolve_dtype(config.model.dtype),
            trust_remote_code=config.model.trust_remote_code,
        )
    except (OSError, ValueError, RuntimeError) as error:
        raise EvalError(f"could not load the model in '{path}': {first_line(error)}") from error
    return _place(model)


def _tokenizer(config: GymConfig, path: Path, fallback: Any) -> Any:
    if any((path / name).is_file() for name in TOKENIZER_FILES):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=config.model.trust_remote_code)
        if tokenizer.pad_token is None and tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer
    if fallback is not None:
        return fallback
    return load_base_tokenizer(config)


def load_base_tokenizer(config: GymConfig) -> Any:
    from gym.model.loading import ModelError, load_tokenizer

    try:
        return load_tokenizer(config)
    except ModelError as error:
        raise EvalError(str(error)) from error
