"""What part of the model trains: ``train.adapter`` mapped to a function that prepares the model.

Each adapter is ``fn(model, config) -> model``, kept in the plain dict :data:`ADAPTERS` and added with
:func:`register_adapter`, so a new kind (a new PEFT method, a custom freezing rule) is one function and
one call, and trainers never branch on the adapter name themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gym.model.loading import ModelError

if TYPE_CHECKING:
    from gym.config.root import GymConfig

AdapterFn = Callable[[Any, "GymConfig"], Any]
ADAPTERS: dict[str, AdapterFn] = {}
FINAL_NORM_NAMES = ("norm", "final_layernorm", "final_layer_norm", "ln_f")


def register_adapter(name: str, fn: AdapterFn) -> AdapterFn:
    """Make ``train.adapter = name`` call ``fn(model, config)``; returns ``fn``."""
    ADAPTERS[name] = fn
    return fn


def apply_adapter(model: Any, config: GymConfig) -> Any:
    """The model prepared for ``config.train.adapter``."""
    name = config.train.adapter
    if name not in ADAPTERS:
        raise ModelError(f"unknown adapter {name!r}; registered adapters: {', '.join(ADAPTERS)}")
    return ADAPTERS[name](model, config)


def trainable_parameters(model: Any) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts, shared (tied) weights counted once.

    A bitsandbytes 4-bit weight is stored two values per byte, so its ``numel()`` is doubled (as PEFT
    does) to count the parameters of the original layer.
    """
    trainable = total = 0
    for param in model.parameters():
        count = param.numel()
        if type(param).__name__ == "Params4bit":
            count *= 2 * param.element_size()
        total += count
        if param.requires_grad:
            trainable += count
    return trainable, total


def is_quantized(model: Any) -> bool:
    """Whether the model was loaded with a quantizer (bitsandbytes, GPTQ, AWQ, ...)."""
    return bool(getattr(model, "is_quantized", False) or getattr(model, "hf_quantizer", None) is not None)


def is_peft(model: Any) -> bool:
    """Whether ``model`` carries PEFT adapters (then its adapter-free base serves as the reference policy)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def keep_4bit_differentiable_on_cpu(model: Any) -> None:
    """Stop bitsandbytes repacking 4-bit CPU weights for its inference kernel in a model that will train.

    On CPUs with AVX512-BF16, bitsandbytes 0.50's ``Linear4bit`` repacks its weight in place the first
    time it runs in eval mode without gradients (generation in GRPO, an evaluation loop); from then on
    every forward, training ones too, goes through ``gemv_4bit``, which has no autograd formula, so the
    gradients reaching the adapters below are silently wrong. Its own per-layer switch turns that off.
    """
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False


def gradient_checkpointing(config: GymConfig) -> bool:
    """``train.gradient_checkpointing`` resolved: 'auto' is on with a CUDA GPU, off on CPU (slower there)."""
    value = config.train.gradient_checkpointing
    if value == "auto":
        from gym.model.device import plan_device

        return plan_device(config).device == "cuda"
    return bool(value)


def lora_config(config: GymConfig, model: Any, *, use_dora: bool = False) -> Any:
    """peft's ``LoraConfig`` from ``train.lora``; 'all-linear' is peft's own (every linear but the head)."""
    from peft import LoraConfig

    lora = config.train.lora
    classifier = type(model).__name__.endswith("ForSequenceClassification")
    targets = lora.target_modules if lora.target_modules == "all-linear" else list(lora.target_modules)
    if targets == "all-linear" and is_quantized(model):
        # peft's 'all-linear' looks for nn.Linear; GPTQ/AWQ layers are packed QuantLinear modules
        targets = (
            sorted(
                {
                    name.rsplit(".", 1)[-1]
                    for name, module in model.named_modules()
                    if hasattr(module, "qweight")
                }
            )
            or targets
        )
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        bias="none",
        use_dora=use_dora,
        task_type="SEQ_CLS" if classifier else "CAUSAL_LM",
    )


def _peft(model: Any, config: GymConfig, *, use_dora: bool) -> Any:
    from peft import get_peft_model, prepare_model_for_kbit_training

    if is_quantized(model):
        # Freezes the quantized base, upcasts norms to fp32 and lets gradients reach the adapters.
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=gradient_checkpointing(config)
        )
        keep_4bit_differentiable_on_cpu(model)
    try:
        adapted = get_peft_model(model, lora_config(config, model, use_dora=use_dora))
    except ValueError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelError(
            f"cannot put a {'DoRA' if use_dora else 'LoRA'} adapter on the model: {first}"
        ) from error
    from gym.model.device import plan_device

    if plan_device(config).uses("lora_matmuls"):  # the adapters' products in BLAS's fast CPU layout
        from gym.model.cpu_kernels.lora_matmuls import use_cpu_lora_matmuls

        use_cpu_lora_matmuls(adapted)
    return adapted


def lora(model: Any, config: GymConfig) -> Any:
    """Low-rank adapters on ``train.lora.target_modules``; the base stays frozen."""
    return _peft(model, config, use_dora=False)


def dora(model: Any, config: GymConfig) -> Any:
    """LoRA with weight decomposition (a trainable magnitude per output feature of each adapted layer)."""
    return _peft(model, config, use_dora=True)


def qlora(model: Any, config: GymConfig) -> Any:
    """LoRA on a bitsandbytes 4-bit base (``load_model`` loads it so under ``adapter = 'qlora'``)."""
    if not getattr(model, "is_loaded_in_4bit", False):
        raise ModelError(
            "train.adapter = 'qlora' needs the base loaded in 4-bit; load it with gym.model.loading.load_model "
            "(model.quantization = 'bnb-4bit' or 'none')"
        )
    return _peft(model, config, use_dora=False)


def full(model: Any, config: GymConfig) -> Any:
    """Every weight trains."""
    if is_quantized(model):
        raise ModelError("train.adapter = 'full' cannot train a quantized base; use 'lora' or 'qlora'")
    for param in model.parameters():
        param.requires_grad = True
    return model


def decoder_layers(model: Any) -> tuple[Any, Any]:
    """``(parent module, ModuleList)`` of the decoder layers: the list as long as ``num_hidden_layers``."""
    from torch import nn

    text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    count = getattr(text_config, "num_hidden_layers", None)
    for module in model.modules():
        for child in module.children():
            if isinstance(child, nn.ModuleList) and len(child) == count:
                return module, child
    raise ModelError(
        f"cannot find the {count} decoder layers of {type(model).__name__} for adapter = 'freeze'; use 'lora' or 'full'"
    )


def freeze(model: Any, config: GymConfig) -> Any:
    """Only the last ``train.freeze.trainable_layers`` decoder layers and the final norm train.

    Embeddings (and a head tied to them) stay frozen: the lower layers' features are kept and only the
    top of the network adapts, which is cheap and forgets less than full fine-tuning.
    """
    from torch import nn

    if is_quantized(model):
        raise ModelError("train.adapter = 'freeze' cannot train a quantized base; use 'lora' or 'qlora'")
    parent, layers = decoder_layers(model)
    wanted = config.train.freeze.trainable_layers
    if wanted > len(layers):
        raise ModelError(
            f"train.freeze.trainable_layers = {wanted} but the model has only {len(layers)} decoder layers"
        )
    for param in model.parameters():
        param.requires_grad = False
    trainable = list(layers[len(layers) - wanted :])
    trainable += [
        getattr(parent, name)
        for name in FINAL_NORM_NAMES
        if isinstance(getattr(parent, name, None), nn.Module)
    ]
    for module in trainable:
        for param in module.parameters():
            param.requires_grad = True
    return model


register_adapter("lora", lora)
register_adapter("dora", dora)
register_adapter("qlora", qlora)
register_adapter("full", full)
register_adapter("freeze", freeze)
