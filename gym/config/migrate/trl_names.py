"""TRL's GRPO argument names as gym.toml keys: one table for TRL's own YAMLs, axolotl's ``trl:`` block and
the TRL names a LLaMA-Factory YAML may carry.

TRL, axolotl (``trl:``) and the recipes written for them name GRPO's settings after ``trl.GRPOConfig``'s
fields; ``[train.grpo]`` uses the same names (only ``num_generations`` is Gym's ``group_size``), so a
recipe's ``loss_type: dapo`` or ``use_vllm: true`` arrives as it was written.
"""

from __future__ import annotations

from typing import Any

from gym.config.grpo import TRL_FIELDS
from gym.config.migrate.convert import Conversion

GRPO_NAMES: dict[str, str] = {trl: key for key, trl in TRL_FIELDS.items()}  # TRL field -> [train.grpo] key
# Names only a GRPO config has: a TRL YAML holding one of them trains GRPO (``beta``/``loss_type`` alone do not say).
GRPO_ONLY = frozenset(GRPO_NAMES) - {"beta", "loss_type", "temperature", "max_completion_length", "epsilon"}
GRPO_ONLY |= {"reward_funcs"}
VLLM_ONLY = (
    "vllm_mode",
    "vllm_server_base_url",
    "vllm_server_host",
    "vllm_server_port",
    "vllm_gpu_memory_utilization",
)
SERVER_ONLY = ("vllm_server_base_url", "vllm_server_host", "vllm_server_port")


def is_grpo(data: dict[str, Any]) -> bool:
    """Whether a YAML's keys say it trains GRPO (TRL's names, or LLaMA-Factory's seed stage)."""
    return bool(GRPO_ONLY & set(data)) or data.get("stage") == "grpo" or data.get("finetuning_type") == "grpo"


def reward_reference(name: Any) -> str | None:
    """TRL/axolotl's ``module.function`` reward as Gym's ``module:function`` (None when it is not one)."""
    if not isinstance(name, str) or "." not in name or ":" in name:
        return name if isinstance(name, str) and ":" in name else None
    module, _, function = name.rpartition(".")
    return f"{module}:{function}"


def carry_grpo(settings: dict[str, Any], conversion: Conversion, prefix: str = "") -> set[str]:
    """Put the GRPO settings of ``settings`` into ``[train.grpo]``; the keys handled are returned.

    vLLM keys come only with ``use_vllm: true`` (they mean nothing without it), and a server's address
    implies ``vllm_mode = "server"`` (TRL's default before colocation existed).
    """
    handled: set[str] = set()
    vllm = settings.get("use_vllm") is True
    for key, value in settings.items():
        if value is None or (key not in GRPO_NAMES and key != "reward_funcs"):
            continue
        handled.add(key)
        origin = f"{prefix}{key}"
        if key == "reward_funcs":
            names = value if isinstance(value, list) else [value]
            rewards = [reward_reference(name) for name in names]
            if all(rewards) and rewards:
                conversion.put(("train", "grpo", "reward"), rewards, origin)
            else:
                conversion.skip(origin, "rewards are Gym's built-in names or 'module.path:function'")
        elif key in VLLM_ONLY and not vllm:
            conversion.skip(origin, "a vLLM setting, and use_vllm is not true")
        elif key == "vllm_gpu_memory_utilization" and _server(settings):
            conversion.skip(
                origin, "a vLLM server takes it when started (trl vllm-serve --gpu-memory-utilization)"
            )
        else:
            if key == "scale_rewards" and isinstance(value, bool):
                value = "group" if value else "none"  # TRL's true/false, as TRL reads them
            conversion.put(("train", "grpo", GRPO_NAMES[key]), value, origin)
    if vllm and _server(settings) and "vllm_mode" not in settings:
        conversion.put(("train", "grpo", "vllm_mode"), "server", f"{prefix}vllm_server_host")
    return handled


def _server(settings: dict[str, Any]) -> bool:
    return settings.get("vllm_mode") == "server" or (
        "vllm_mode" not in settings and any(settings.get(key) is not None for key in SERVER_ONLY)
    )
