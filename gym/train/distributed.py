"""[train.distributed] -> the TrainingArguments keys accelerate builds its FSDP / DeepSpeed plugin from.

transformers turns ``fsdp``/``fsdp_config`` into accelerate's FullyShardedDataParallelPlugin and a
``deepspeed`` dict into its DeepSpeed plugin, so every TRL trainer (SFT, DPO, KTO, RM, GRPO), LoRA and
full fine-tuning alike, gets the same sharding from the same gym.toml keys.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from gym.config.distributed import DeepSpeedConfig, DistributedConfig, FsdpConfig

DEEPSPEED_MISSING = (
    "train.distributed.strategy = 'deepspeed' needs the deepspeed package; install the distributed extra "
    "(pip install 'zoo-gym[distributed]') on the machine that trains"
)


def distributed_arguments(
    dist: DistributedConfig, *, bf16: bool, launched: bool | None = None
) -> dict[str, Any]:
    """The TrainingArguments fields for this strategy (empty for none/ddp: accelerate's DDP is the default).

    Empty too in a process no launcher started (``launched`` defaults to LOCAL_RANK being set): plain
    ``gym train`` is one process, which transformers refuses to run under FSDP.
    """
    if dist.strategy == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        raise ValueError(DEEPSPEED_MISSING)
    if not ("LOCAL_RANK" in os.environ if launched is None else launched):
        return {}
    if dist.strategy == "fsdp":
        return {"fsdp": True, "fsdp_config": fsdp_config(dist.fsdp)}
    if dist.strategy == "deepspeed":
        return {"deepspeed": deepspeed_config(dist.deepspeed, bf16=bf16)}
    return {}


EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


def needs_unused_parameter_search(model: Any) -> bool:
    """Whether DDP must look for parameters a step leaves without a gradient (``find_unused_parameters``).

    Only a model that can skip trainable weights in a forward pass needs the search: a mixture of experts
    (the router leaves experts unused) or a vision-language model (a text-only batch never reaches the
    vision tower). Everywhere else the search costs a graph traversal per step and makes every rank warn
    that it found nothing, so it stays off; transformers would otherwise turn it on whenever gradient
    checkpointing is off, as on every CPU run.
    """
    config = getattr(model, "config", None)
    if config is None:
        return False
    text = getattr(config, "text_config", None) or config
    experts = [getattr(part, name, None) for part in (config, text) for name in EXPERT_COUNTS]
    moe = any(isinstance(count, int) and count > 1 for count in experts)
    return moe or getattr(config, "vision_config", None) is not None


def fsdp_config(fsdp: FsdpConfig) -> dict[str, Any]:
    """transformers' ``fsdp_config``: FSDP2 (fully_shard) for full_shard/shard_grad_op, FSDP1 otherwise.

    Auto-wrap leaves ``transformer_layer_cls_to_wrap`` unset: accelerate then wraps the classes the model
    names in ``_no_split_modules`` (its decoder layers), whatever the architecture.
    """
    version = fsdp.fsdp_version
    reshard: bool | str = fsdp.sharding == "full_shard" if version == 2 else fsdp.sharding
    return {
        "version": version,
        "reshard_after_forward": reshard,
        "cpu_offload": fsdp.cpu_offload,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP" if fsdp.auto_wrap else "NO_WRAP",
        "activation_checkpointing": fsdp.activation_checkpointing,
        "state_dict_type": "SHARDED_STATE_DICT" if fsdp.state_dict == "sharded" else "FULL_STATE_DICT",
    }


def deepspeed_config(ds: DeepSpeedConfig, *, bf16: bool) -> dict[str, Any]:
    """A DeepSpeed JSON config; "auto" values are filled by transformers from TrainingArguments."""
    zero: dict[str, Any] = {
        "stage": ds.stage,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": "auto",
    }
    if ds.stage == 3:
        zero.update({
            "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto",
            "stage3_gather_16bit_weights_on_model_save": True,  # rank 0 saves one consolidated model
        })  # fmt: skip
    for key, target in (("offload_optimizer", ds.offload_optimizer), ("offload_param", ds.offload_params)):
        if target != "none":
            zero[key] = {"device": target, "pin_memory": True}
            if target == "nvme":
                zero[key]["nvme_path"] = ds.nvme_path
    return {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "train_batch_size": "auto",
        "bf16": {"enabled": bf16},
        "zero_optimization": zero,
    }


def fsdp_wrap_issue(model: Any, fsdp: FsdpConfig) -> str | None:
    """FSDP's auto-wrap needs decoder-layer classes; a model that names none cannot be wrapped layer by layer."""
    if fsdp.auto_wrap and not getattr(model, "_no_split_modules", None):
        return (f"train.distributed.fsdp.auto_wrap: {type(model).__name__} names no decoder-layer classes "
                "(_no_split_modules) to shard one by one; set auto_wrap = false")  # fmt: skip
    return None


def one_process_only(config: Any, nproc: int) -> str | None:
    """``gym train --nproc N`` on a method that trains in one process: the sentence at its key."""
    if nproc <= 1:
        return None
    if config.train.method == "ppo":
        return located(config, ("train", "method"), f"PPO trains in one process (its rollout, reward and "
                       f"update loop is not sharded); run gym train without --nproc {nproc} or use method = 'grpo'")  # fmt: skip
    if config.train.grpo.training_free:
        return located(config, ("train", "grpo", "training_free"), "training-free GRPO trains no weights and "
                       f"runs in one process; run gym train without --nproc {nproc}")  # fmt: skip
    return None


def check_fsdp_wrap(config: Any, model: Any) -> None:
    """Refuse, at ``train.distributed.fsdp.auto_wrap``'s file:line:col, an FSDP model it cannot wrap.

    Called right after the model is loaded (its class is known only then), before any training step.
    """
    if config.train.distributed.strategy != "fsdp":
        return
    issue = fsdp_wrap_issue(model, config.train.distributed.fsdp)
    if issue is not None:
        raise ValueError(located(config, ("train", "distributed", "fsdp", "auto_wrap"), issue))


def located(config: Any, path: tuple[str, ...], message: str) -> str:
    """``gym.toml:12:1: <message>`` at the key (or its nearest table) in the file the config came from."""
    from gym.config.errors import ConfigIssue
    from gym.config.positions import scan
    from gym.config.reading import display_path

    source = config.source
    if source is None or not source.is_file():
        return message
    line, column = scan(source.read_text(encoding="utf-8")).find(path)
    return str(ConfigIssue(display_path(source), "", message, line, column))


def cpu_ranks_setup(config: Any, accelerator: Any) -> str | None:
    """Ready several CPU ranks to resume; a note when accelerate cannot honour the strategy on CPU.

    Under gloo, TrainingArguments' device is ``cpu:<rank>`` and the Trainer restores the optimiser with
    ``torch.load(map_location=args.device)``, which torch cannot place (it knows only ``cpu``): torch's
    own ``register_package`` teaches it that ``cpu:N`` is the CPU. accelerate builds its FSDP plugin only
    for GPU-type backends (``AcceleratorState`` keeps ``MULTI_CPU`` and ``prepare_model`` wraps a CPU
    model in DDP), so FSDP ranks on CPU train as DDP: the same loss curve, the whole model on every rank.
    """
    strategy = config.train.distributed.strategy
    if strategy != "none" and "LOCAL_RANK" not in os.environ:
        return (f"train.distributed.strategy = {strategy!r} applies when several ranks train "
                "(gym train --nproc N, several GPUs or nodes); this run is one process")  # fmt: skip
    if not str(getattr(accelerator, "distributed_type", "")).endswith("MULTI_CPU"):
        return None
    _accept_indexed_cpu_locations()
    if strategy in ("fsdp", "deepspeed"):
        return (f"train.distributed.strategy = {strategy!r} shards only on GPUs (accelerate); these "
                f"{accelerator.num_processes} CPU ranks train with DDP, each holding the whole model")  # fmt: skip
    return None


def _cpu_at_index(storage: Any, location: str) -> Any:
    return storage if location.startswith("cpu:") and location[4:].isdigit() else None


def _accept_indexed_cpu_locations() -> None:
    import torch.serialization

    if not getattr(_cpu_at_index, "registered", False):
        torch.serialization.register_package(99, lambda storage: None, _cpu_at_index)
        _cpu_at_index.registered = True  # type: ignore[attr-defined]
