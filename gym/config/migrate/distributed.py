"""LLaMA-Factory's and axolotl's ``deepspeed:`` / ``fsdp:`` / ``fsdp_config:`` -> ``[train.distributed]``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gym.config.migrate.convert import Conversion

DS = ("train", "distributed", "deepspeed")
FS = ("train", "distributed", "fsdp")


def carry_deepspeed(value: Any, conversion: Conversion, base: Path, key: str = "deepspeed") -> None:
    """A DeepSpeed JSON (path, read when it exists; else its ZeRO stage from a name like ds_z3_config) or dict."""
    config = value if isinstance(value, dict) else None
    if config is None and isinstance(value, str):
        path = base / value
        if path.is_file() and path.stat().st_size < 1_000_000:
            try:
                config = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                config = None
        if config is None:
            stage = re.search(r"z(?:ero)?_?([23])", Path(value).name)
            if stage is None:
                conversion.skip(key, f"{value!r} could not be read and its name gives no ZeRO stage")
                return
            config = {"zero_optimization": {"stage": int(stage.group(1))}}
    zero = (config or {}).get("zero_optimization") if isinstance(config, dict) else None
    if not isinstance(zero, dict) or zero.get("stage") not in (2, 3):
        conversion.skip(key, "Gym's DeepSpeed runs ZeRO stage 2 or 3; this config names neither")
        return
    conversion.put(("train", "distributed", "strategy"), "deepspeed", key)
    conversion.put((*DS, "stage"), zero["stage"], key)
    for source, target in (("offload_optimizer", "offload_optimizer"), ("offload_param", "offload_params")):
        offload = zero.get(source)
        if isinstance(offload, dict) and offload.get("device") in ("cpu", "nvme"):
            conversion.put((*DS, target), offload["device"], key)
            if offload["device"] == "nvme" and isinstance(offload.get("nvme_path"), str):
                conversion.put((*DS, "nvme_path"), offload["nvme_path"], key)


def carry_fsdp(data: dict[str, Any], conversion: Conversion) -> None:
    """axolotl's ``fsdp: [full_shard, auto_wrap, offload]`` and ``fsdp_config:`` (fsdp_-prefixed or not)."""
    options = data.get("fsdp") or []
    options = options.split() if isinstance(options, str) else list(options)
    settings = {str(k).removeprefix("fsdp_"): v for k, v in (data.get("fsdp_config") or {}).items()}
    if not options and not settings:
        return
    conversion.put(("train", "distributed", "strategy"), "fsdp", "fsdp")
    strategy = settings.get("sharding_strategy") or next(
        (o for o in options if o in ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard")), None
    )
    if isinstance(strategy, str) and strategy.lower() in (
        "full_shard",
        "shard_grad_op",
        "hybrid_shard",
        "no_shard",
    ):
        conversion.put((*FS, "sharding"), strategy.lower(), "fsdp_config")
    if settings.get("reshard_after_forward") is False:
        conversion.put((*FS, "sharding"), "shard_grad_op", "fsdp_config")
    if "offload" in options or settings.get("offload_params") is True or settings.get("cpu_offload") is True:
        conversion.put((*FS, "cpu_offload"), True, "fsdp")
    wrap = settings.get("auto_wrap_policy")
    if wrap == "NO_WRAP" or (options and "auto_wrap" not in options and wrap is None):
        conversion.put((*FS, "auto_wrap"), False, "fsdp")
    if settings.get("activation_checkpointing") is True:
        conversion.put((*FS, "activation_checkpointing"), True, "fsdp_config")
    state = str(settings.get("state_dict_type") or "")
    if state.upper() in ("FULL_STATE_DICT", "SHARDED_STATE_DICT"):
        conversion.put(
            (*FS, "state_dict"), "sharded" if state.upper().startswith("SHARDED") else "full", "fsdp_config"
        )
