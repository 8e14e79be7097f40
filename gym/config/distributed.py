"""The ``[train.distributed]`` table: how training spreads over several processes (GPUs, nodes).

One process trains alone unless ``gym train --nproc N`` (or a cloud run with several GPUs or nodes)
starts more; then every rank reads this table. DDP copies the model to every rank, FSDP shards it
(torch's ``fully_shard``), DeepSpeed ZeRO shards optimiser state (stage 2) or everything (stage 3).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from gym.config.base import Section, fail
from gym.config.messages import describe
from gym.config.suggest import did_you_mean

STRATEGIES = ("none", "ddp", "fsdp", "deepspeed")
SHARDINGS = ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard")


def _one_of(value: object, choices: tuple[str, ...], what: str) -> object:
    if isinstance(value, str) and value in choices:
        return value
    names = ", ".join(repr(choice) for choice in choices)
    hint = did_you_mean(value, choices) if isinstance(value, str) else ""
    shown = repr(value) if isinstance(value, str) else describe(value)
    raise fail(f"unknown {what} {shown}; expected one of {names}{hint}")


class FsdpConfig(Section):
    """Settings of strategy = 'fsdp' (accelerate's FSDP plugin)."""

    sharding: Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"] = Field(
        default="full_shard",
        description="full_shard: weights, gradients and optimiser state sharded (FSDP2, torch's fully_shard); "
        "shard_grad_op: weights kept whole between forward and backward (FSDP2); hybrid_shard (full_shard "
        "within a node, replicated across nodes) and no_shard use FSDP1.",
    )
    auto_wrap: bool = Field(
        default=True,
        description="Shard each decoder layer as one unit (the model's _no_split_modules classes); false: "
        "one unit for the whole model.",
    )
    cpu_offload: bool = Field(
        default=False, description="Keep sharded parameters and gradients in CPU memory between uses."
    )
    activation_checkpointing: bool = Field(
        default=False,
        description="Recompute each wrapped layer's activations in backward (FSDP's own checkpointing, used "
        "instead of train.gradient_checkpointing).",
    )
    state_dict: Literal["full", "sharded"] = Field(
        default="full",
        description="How checkpoints are written: full (rank 0 gathers the whole model) or sharded (each rank "
        "its shard; faster for large models). The final model is always consolidated on rank 0.",
    )

    @field_validator("sharding", mode="before")
    @classmethod
    def _check_sharding(cls, value: object) -> object:
        return _one_of(value, SHARDINGS, "FSDP sharding")

    @property
    def fsdp_version(self) -> int:
        """FSDP2 (torch's fully_shard) knows only full_shard and shard_grad_op."""
        return 2 if self.sharding in ("full_shard", "shard_grad_op") else 1


class DeepSpeedConfig(Section):
    """Settings of strategy = 'deepspeed' (ZeRO; needs the distributed extra)."""

    stage: Literal[2, 3] = Field(
        default=2,
        description="ZeRO stage: 2 shards gradients and optimiser state, 3 also shards the parameters.",
    )
    offload_optimizer: Literal["none", "cpu", "nvme"] = Field(
        default="none",
        description="Where the optimiser state lives: on the GPU (none), in CPU memory or on NVMe.",
    )
    offload_params: Literal["none", "cpu", "nvme"] = Field(
        default="none", description="Where stage 3 keeps the parameters between uses: none, cpu or nvme."
    )
    nvme_path: str | None = Field(
        default=None, description="Folder on a local NVMe disk, needed when an offload is 'nvme'."
    )

    @field_validator("stage", mode="before")
    @classmethod
    def _check_stage(cls, value: object) -> object:
        if value in (2, 3) and not isinstance(value, bool):
            return value
        raise fail(f"unknown ZeRO stage {describe(value)}; expected 2 or 3")

    @field_validator("offload_optimizer", "offload_params", mode="before")
    @classmethod
    def _check_offload(cls, value: object) -> object:
        return _one_of(value, ("none", "cpu", "nvme"), "offload target")


class DistributedConfig(Section):
    """How several processes train one model."""

    strategy: Literal["none", "ddp", "fsdp", "deepspeed"] = Field(
        default="none",
        description="none: one process, or DDP when several are started (gym train --nproc, several GPUs or "
        "nodes); ddp: every rank holds the whole model; fsdp: weights, gradients and optimiser state "
        "sharded across ranks; deepspeed: ZeRO (see [train.distributed.deepspeed]).",
    )
    fsdp: FsdpConfig = Field(default_factory=FsdpConfig, description="Settings of strategy = 'fsdp'.")
    deepspeed: DeepSpeedConfig = Field(
        default_factory=DeepSpeedConfig, description="Settings of strategy = 'deepspeed'."
    )

    @field_validator("strategy", mode="before")
    @classmethod
    def _check_strategy(cls, value: object) -> object:
        return _one_of(value, STRATEGIES, "strategy")


def distributed_issues(train: object) -> list[tuple[tuple[str | int, ...], str]]:
    """Combinations of [train.distributed] with the method and adapter that cannot train."""
    dist: DistributedConfig = train.distributed  # type: ignore[attr-defined]
    where = ("train", "distributed", "strategy")
    issues: list[tuple[tuple[str | int, ...], str]] = []
    if dist.strategy == "none":
        return issues
    if train.method == "ppo":  # type: ignore[attr-defined]
        issues.append((where, "PPO trains in one process (its rollout, reward and update loop is not "
                       "sharded); remove [train.distributed] or use method = 'grpo'"))  # fmt: skip
    if train.grpo.training_free:  # type: ignore[attr-defined]
        issues.append((where, "training-free GRPO trains no weights and runs in one process; remove "
                       "[train.distributed]"))  # fmt: skip
    if train.adapter == "qlora" and dist.strategy in ("fsdp", "deepspeed"):  # type: ignore[attr-defined]
        issues.append((where, f"QLoRA's 4-bit weights cannot be sharded by {dist.strategy}; use adapter "
                       "= 'lora' or strategy = 'ddp'"))  # fmt: skip
    if dist.strategy == "deepspeed":
        ds = dist.deepspeed
        if ds.offload_params != "none" and ds.stage != 3:
            issues.append((("train", "distributed", "deepspeed", "offload_params"), "parameter offload needs "
                           "ZeRO stage 3 (stage 2 keeps every parameter on every GPU); set stage = 3"))  # fmt: skip
        if "nvme" in (ds.offload_optimizer, ds.offload_params) and not ds.nvme_path:
            issues.append((("train", "distributed", "deepspeed", "nvme_path"), "an 'nvme' offload needs "
                           "nvme_path, a folder on a local NVMe disk"))  # fmt: skip
    return issues
