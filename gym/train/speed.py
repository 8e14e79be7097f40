"""GPU speed switches: ``train.liger_kernel``, ``train.cut_cross_entropy`` and GRPO's vLLM rollouts.

Each is a GPU-only package (Triton kernels, vLLM's engine), so each is refused, before the tokenizer,
data or model load, where it cannot run: on a device plan without CUDA, or without its package
installed. One sentence at the key's ``file:line:col`` says which and how to fix it.

* Liger reaches the trainer as transformers' own ``use_liger_kernel`` (every TRL trainer is a
  transformers Trainer, and TRL's GRPO loss has a fused Liger variant behind the same flag);
* Cut Cross-Entropy is applied to the loaded model through the package's own ``cce_patch``;
* vLLM reaches ``trl.GRPOConfig`` through :func:`gym.train.methods.grpo.grpo_arguments`.

PEFT 0.21 has no LoRA kernel option of its own (axolotl's ``lora_*_kernel`` are axolotl's Triton
kernels), so none is offered here.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config import GymConfig


@dataclass(frozen=True)
class Switch:
    """One GPU-only switch: where it is in gym.toml, the module it imports and the package that has it."""

    key: tuple[str, ...]
    module: str
    package: str
    why_gpu: str

    @property
    def name(self) -> str:
        return ".".join(self.key)


LIGER = Switch(
    ("train", "liger_kernel"), "liger_kernel", "liger-kernel", "Liger's kernels are Triton GPU code"
)
CCE = Switch(
    ("train", "cut_cross_entropy"),
    "cut_cross_entropy",
    "'cut-cross-entropy[transformers]'",
    "Cut Cross-Entropy's kernels are Triton GPU code",
)
VLLM = Switch(("train", "grpo", "use_vllm"), "vllm", "vllm", "vLLM samples on CUDA GPUs only")


def switches_on(config: GymConfig) -> list[Switch]:
    """The switches ``config`` turns on (vLLM only where GRPO trains weights)."""
    train = config.train
    grpo_with_weights = train.method == "grpo" and not train.grpo.training_free
    wanted = [(LIGER, train.liger_kernel), (CCE, train.cut_cross_entropy), (VLLM, grpo_with_weights and train.grpo.use_vllm)]  # fmt: skip
    return [switch for switch, on in wanted if on]


def switch_problem(
    switch: Switch, device: str, find_spec: Callable[[str], Any] = importlib.util.find_spec
) -> str | None:
    """The sentence refusing ``switch`` on ``device`` (without CUDA, or without its package), else None."""
    last = switch.key[-1]
    if device != "cuda":
        return (
            f"true needs a CUDA GPU ({switch.why_gpu}) and this run trains on {device}; set {last} = false "
            "here, or train on a GPU (gym launch --cloud)"
        )
    if find_spec(switch.module) is None:
        return f"true needs the {switch.module} package, which is not installed; pip install {switch.package}, or set {last} = false"
    return None


def check_switches(config: GymConfig, device: str) -> None:
    """Refuse the first switch ``config`` turns on that cannot run here, at its key in gym.toml."""
    from gym.train.runner import key_error

    for switch in switches_on(config):
        problem = switch_problem(switch, device)
        if problem is not None:
            raise ValueError(str(key_error(config, switch.key, problem)))  # `file:line:col: key: sentence`


def trainer_arguments(config: GymConfig) -> dict[str, Any]:
    """The TrainingArguments fields the switches set (every method's trainer gets them)."""
    return {"use_liger_kernel": config.train.liger_kernel}


def apply_cut_cross_entropy(model: Any, config: GymConfig) -> Any:
    """The model with Cut Cross-Entropy's loss, through the package's own patcher (checked: on a GPU, installed)."""
    if not config.train.cut_cross_entropy:
        return model
    from cut_cross_entropy.transformers import cce_patch

    return cce_patch(model)


def switches_record(config: GymConfig) -> dict[str, Any]:
    """What train_results.json says about the switches (a run only gets here when each could run)."""
    record: dict[str, Any] = {
        "liger_kernel": config.train.liger_kernel,
        "cut_cross_entropy": config.train.cut_cross_entropy,
    }
    return record
