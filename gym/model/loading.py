"""Loading the base model and its tokenizer exactly as ``[model]`` in gym.toml describes them.

Every trainer starts here, so the failures a user can hit before training even begins (a mistyped
folder, a Hub id on a machine without network, a quantized base without its package) are turned into
one :class:`ModelError` sentence that says what to do, instead of a transformers traceback.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import socket
from typing import TYPE_CHECKING, Any

from gym.failures import error_chain, first_line
from gym.model.builtin import BUILTIN_PREFIX, resolve_model_path

if TYPE_CHECKING:
    from gym.config.root import GymConfig

logger = logging.getLogger(__name__)

# The packages each quantization needs, as transformers' quantizers check them, with the install hint.
QUANTIZATION_PACKAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "bnb-4bit": (("bitsandbytes", "pip install 'zoo-gym[qlora]'"),),
    "bnb-8bit": (("bitsandbytes", "pip install 'zoo-gym[qlora]'"),),
    "gptq": (
        ("optimum", "pip install 'zoo-gym[quantize]'"),
        ("gptqmodel", "pip install 'zoo-gym[quantize]'"),
    ),
    "awq": (("gptqmodel", "pip install 'zoo-gym[quantize]'"),),
}
# Hub ids are NAME or ORG/NAME; anything else that is not an existing folder is a missing local path.
HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
TRUE = {"1", "true", "yes", "on"}


class ModelError(Exception):
    """The base model or tokenizer cannot be loaded; the message is one sentence saying why and what to do."""


def model_source(config: GymConfig) -> tuple[str, bool]:
    """``(what from_pretrained should load, whether it is a Hub id)`` for ``model.name_or_path``.

    Built-in models become their cache folder; relative folders are resolved against gym.toml's
    folder (not the cwd), so a run behaves the same wherever it is started from.
    """
    name = config.model.name_or_path
    if name.startswith(BUILTIN_PREFIX):
        return resolve_model_path(name), False
    path = config.resolve_path(name)
    if path.exists():
        if not path.is_dir():
            raise ModelError(
                f"model path '{path}' is a file; model.name_or_path must be a model folder or a Hub id"
            )
        return str(path), False
    looks_local = name.startswith((".", "/", "~")) or "\\" in name or not HUB_ID.match(name)
    if looks_local:
        raise ModelError(
            f"model path '{path}' does not exist; check model.name_or_path (relative paths are resolved "
            f"against {config.base_dir})"
        )
    return name, True


def hub_offline() -> bool:
    """Whether the user asked for offline mode, read from the environment at call time.

    huggingface_hub reads ``HF_HUB_OFFLINE`` once at import; reading it here as well means a variable set
    later (a test, a notebook) still keeps Gym off the network.
    """
    if any(
        os.environ.get(name, "").strip().lower() in TRUE
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    ):
        return True
    from huggingface_hub import constants

    return bool(constants.is_offline_mode())


def _connection_failure(error: BaseException) -> bool:
    """Whether a load failed for want of network rather than because the model does not exist.

    The exception types are not enough on their own: huggingface_hub's retry turns a DNS failure into
    ``RuntimeError('Cannot send a request, as the client has been closed.')``, so that message counts as
    a network failure too. (Gym never probes the network itself to decide.)
    """
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled, RepositoryNotFoundError

    chain = error_chain(error)
    if any(isinstance(e, RepositoryNotFoundError) for e in chain):
        return False
    if any(
        isinstance(e, (LocalEntryNotFoundError, OfflineModeIsEnabled, ConnectionError, socket.gaierror))
        for e in chain
    ):
        return True
    if any(type(e).__module__.startswith(("httpx", "httpcore", "requests", "urllib3")) for e in chain):
        return True
    return any("client has been closed" in str(e) or "Name or service not known" in str(e) for e in chain)


def _hub_error(name: str, error: BaseException) -> ModelError:
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    chain = error_chain(error)
    if hub_offline() or _connection_failure(error):
        return ModelError(
            f"model '{name}' is not in the local cache and the Hub cannot be reached; download it where there "
            f"is network (`hf download {name}`) and copy the cache, or set model.name_or_path to a local folder"
        )
    if any(isinstance(e, GatedRepoError) for e in chain):
        return ModelError(
            f"model '{name}' is gated on the Hub; accept its licence there and log in (`hf auth login`)"
        )
    if any(isinstance(e, RevisionNotFoundError) for e in chain):
        return ModelError(
            f"model '{name}' has no revision named in model.revision; check the branch, tag or commit"
        )
    if any(isinstance(e, RepositoryNotFoundError) for e in chain):
        return ModelError(
            f"model '{name}' was not found on the Hub (or it is private); check model.name_or_path"
        )
    return ModelError(f"could not load model '{name}' from the Hub: {first_line(error)}")


def from_pretrained(loader: Any, config: GymConfig, **kwargs: Any) -> Any:
    """``loader.from_pretrained`` on the configured model, with failures turned into :class:`ModelError`."""
    source, is_hub = model_source(config)
    kwargs.setdefault("trust_remote_code", config.model.trust_remote_code)
    if is_hub:
        kwargs.setdefault("revision", config.model.revision)
        if hub_offline():
            kwargs["local_files_only"] = True  # never touch the network when the user said offline
    try:
        return loader.from_pretrained(source, **kwargs)
    except (OSError, RuntimeError, ValueError) as error:
        if "trust_remote_code" in str(error):
            raise ModelError(
                f"model '{config.model.name_or_path}' needs its own Python code; set model.trust_remote_code = true "
                "if you trust it"
            ) from error
        if is_hub and not isinstance(error, ValueError):  # a ValueError is the model's, not the network's
            raise _hub_error(source, error) from error
        raise ModelError(
            f"could not load model '{config.model.name_or_path}' from {source}: {first_line(error)}"
        ) from error
    except Exception as error:
        if not type(error).__module__.startswith("safetensors"):
            raise
        from pathlib import Path

        files = ", ".join(str(p) for p in sorted(Path(source).glob("*.safetensors"))) or source
        raise ModelError(
            f"could not load model '{config.model.name_or_path}': the weights file {files} is corrupt or "
            f"truncated ({first_line(error)}); download or export it again"
        ) from error


def load_tokenizer(config: GymConfig) -> Any:
    """The tokenizer with the chosen chat template on it and a pad token.

    A tokenizer without a pad token gets its EOS token as pad (logged): batching needs one, and EOS is
    what every trainer falls back to. The template goes on the tokenizer so it is saved with the weights.
    """
    from transformers import AutoTokenizer

    from gym.data.templates import AUTO, apply_template

    tokenizer = from_pretrained(AutoTokenizer, config)
    template = config.model.template
    if not (
        template == AUTO and config.train.method == "pt" and not getattr(tokenizer, "chat_template", None)
    ):
        try:
            apply_template(tokenizer, template, base_dir=config.base_dir)
        except (ValueError, FileNotFoundError) as error:
            raise ModelError(first_line(error)) from error
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelError(
                f"the tokenizer of '{config.model.name_or_path}' has neither a pad nor an EOS token; "
                "use a model whose tokenizer defines one of them"
            )
        tokenizer.pad_token = tokenizer.eos_token
        logger.info(
            "the tokenizer of %r has no pad token; using its EOS token %r as pad",
            config.model.name_or_path,
            tokenizer.eos_token,
        )
    return tokenizer


def resolve_dtype(name: str) -> Any:
    """``torch.dtype`` for ``model.dtype``: 'auto' is bfloat16 on a CUDA GPU that supports it, else float32."""
    import torch

    from gym.model.device import auto_dtype_name

    return getattr(torch, auto_dtype_name() if name == "auto" else name)


def effective_quantization(config: GymConfig) -> str:
    """``model.quantization``, with 'none' read as 'bnb-4bit' under ``adapter = 'qlora'`` (QLoRA is a 4-bit base)."""
    if config.train.adapter == "qlora" and config.model.quantization == "none":
        return "bnb-4bit"
    return config.model.quantization


def require_packages(quantization: str, config: GymConfig) -> None:
    """Fail with one sentence when a package the quantization needs cannot be imported."""
    if quantization in ("gptq", "awq"):
        from gym.model.quantized import gptqmodel_environment

        gptqmodel_environment()  # before GPTQModel is imported (it would set HF_HOME itself)
    for package, hint in QUANTIZATION_PACKAGES.get(quantization, ()):
        try:
            importlib.import_module(package)
        except ImportError as error:
            why = (
                "train.adapter = 'qlora'"
                if config.train.adapter == "qlora"
                else f"model.quantization = '{quantization}'"
            )
            raise ModelError(
                f"{why} needs the '{package}' package, which is not installed; {hint}"
            ) from error


def quantization_config(quantization: str, dtype: Any) -> Any:
    """transformers' ``BitsAndBytesConfig`` for bnb-4bit (NF4, double quantization) or bnb-8bit; else None.

    GPTQ and AWQ checkpoints carry their own quantization config, which from_pretrained reads.
    """
    if quantization not in ("bnb-4bit", "bnb-8bit"):
        return None
    from transformers import BitsAndBytesConfig

    if quantization == "bnb-8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=dtype,
    )


def quantized_device_map() -> dict[str, Any]:
    """Where a quantized model goes: this process's GPU (one per rank under accelerate), else the CPU.

    Quantized weights cannot be moved after loading, so they must be placed on the right device up front.
    """
    from gym.model.device import cuda_available

    if cuda_available():
        return {"": int(os.environ.get("LOCAL_RANK", "0"))}
    return {"": "cpu"}


def load_kwargs(config: GymConfig) -> dict[str, Any]:
    """``from_pretrained`` keywords for the configured dtype and quantization (packages checked first).

    Shared by every model class Gym loads (causal LM, the reward model's classifier), so they agree.
    """
    dtype = resolve_dtype(config.model.dtype)
    quantization = effective_quantization(config)
    require_packages(quantization, config)
    kwargs: dict[str, Any] = {"dtype": dtype}
    bnb = quantization_config(quantization, dtype)
    if bnb is not None:
        kwargs["quantization_config"] = bnb
    if quantization != "none":
        kwargs["device_map"] = quantized_device_map()
    return kwargs


def load_model(config: GymConfig, *, for_training: bool = True) -> Any:
    """The base causal LM in the configured dtype and quantization.

    ``for_training`` leaves the model in train mode with the KV cache off (it only costs memory during
    training and conflicts with gradient checkpointing); otherwise the model is in eval mode.
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from gym.model.vision import is_vision_model

    loader = AutoModelForImageTextToText if is_vision_model(config) else AutoModelForCausalLM
    model = from_pretrained(loader, config, **load_kwargs(config))
    if for_training:
        model.config.use_cache = False
        model.train()
    else:
        model.eval()
    return model
