"""`GymConfig` -> the keyword arguments every TRL config (a transformers TrainingArguments) shares.

One function, so SFT, DPO, KTO, RM and GRPO train with the same schedule, checkpointing, precision
and logging, and a key added to gym.toml reaches every method at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config import GymConfig

TRACKERS_OFF = ["none"]


def bf16_supported() -> bool:
    """bf16 only where the hardware really runs it: a CUDA GPU that supports it (never on CPU here)."""
    from gym.model.device import auto_dtype_name

    return auto_dtype_name() == "bfloat16"


def checkpointing_argument(on: bool) -> dict[str, bool]:
    """Activation checkpointing under the name the installed transformers declares: ``activation_checkpointing``
    since 5.23 (``gradient_checkpointing`` stays as an alias that warns on every run until v6), the old one
    before."""
    import dataclasses

    from transformers import TrainingArguments

    names = {field.name for field in dataclasses.fields(TrainingArguments)}
    return {
        "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": on
    }


def common_arguments(
    config: GymConfig, checkpoint_dir: Path, *, evaluate: bool = False, model: Any = None
) -> dict[str, Any]:
    """TrainingArguments fields shared by all methods.

    ``model``: the model trained, when the builder has it: DDP searches for unused parameters only when it
    needs to (:func:`gym.train.distributed.needs_unused_parameter_search`).

    ``evaluate``: there are held-out rows (``datasets.eval_fraction``); they are evaluated before the first
    step (the base, for the before/after in train_results.json), every ``train.eval_steps`` steps and, by
    the runner, at the end.
    """
    from gym.model.adapters import gradient_checkpointing
    from gym.model.device import plan_device
    from gym.train.distributed import distributed_arguments, needs_unused_parameter_search
    from gym.train.speed import trainer_arguments

    train, plan = config.train, plan_device(config)
    use_bf16 = bf16_supported() and config.model.dtype in ("auto", "bfloat16")
    return {
        **distributed_arguments(train.distributed, bf16=use_bf16),
        "output_dir": str(checkpoint_dir),
        "per_device_train_batch_size": train.batch_size,
        "per_device_eval_batch_size": train.batch_size,
        "gradient_accumulation_steps": train.gradient_accumulation_steps,
        "learning_rate": train.learning_rate,
        "lr_scheduler_type": train.lr_scheduler,
        "warmup_steps": train.warmup_ratio,  # a float < 1 is a fraction of the steps in transformers 5
        "weight_decay": train.weight_decay,
        "num_train_epochs": train.epochs,
        "max_steps": train.max_steps,
        "logging_steps": train.logging_steps,
        "save_strategy": "steps",
        "save_steps": train.save_steps,
        "save_total_limit": train.save_total_limit,
        "seed": train.seed,
        "data_seed": train.seed,
        "report_to": list(train.report_to) or TRACKERS_OFF,
        "bf16": use_bf16,
        "fp16": bool(plan.device == "cuda" and not use_bf16 and config.model.dtype == "float16"),
        **checkpointing_argument(gradient_checkpointing(config)),
        "disable_tqdm": True,  # Gym's own progress bar shows loss and tokens/s
        "remove_unused_columns": False,
        "dataloader_num_workers": 0,
        "use_cpu": plan.device == "cpu",
        "save_only_model": False,
        "eval_strategy": "steps" if evaluate else "no",
        "eval_steps": train.eval_steps or train.save_steps,
        "eval_on_start": evaluate,
        "logging_first_step": True,
        "logging_nan_inf_filter": False,  # a NaN loss must show, so Gym's guard stops the run
        "ddp_find_unused_parameters": model is not None and needs_unused_parameter_search(model),
        **trainer_arguments(config),  # GPU speed switches (train.liger_kernel)
    }
