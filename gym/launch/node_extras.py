"""Which of Gym's extras a training node installs, read from the config it will run.

A node installs ``zoo-gym[train,eval]`` by default, which carries neither bitsandbytes (QLoRA and
``bnb-*`` bases), GPTQModel (GPTQ/AWQ bases), DeepSpeed (``strategy = "deepspeed"``) nor the Triton
kernels of the speed switches: a config that needs one of them would fail on the node, after the
machine was paid for, with an import error. The extras are therefore derived from the config, the one
place that says what the run loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gym.config import GymConfig

BASE_EXTRAS = ("train", "eval")


def node_extras(config: GymConfig, *, report_back: bool = False) -> list[str]:
    """The extras, in a stable order, a node needs to run ``config`` (``report_back``: PyGithub too)."""
    extras = list(BASE_EXTRAS)
    quantization = config.model.quantization
    if config.train.adapter == "qlora" or quantization in ("bnb-4bit", "bnb-8bit"):
        extras.append("qlora")
    if quantization in ("gptq", "awq"):
        extras.append("quantize")
    if config.train.distributed.strategy == "deepspeed":
        extras.append("distributed")
    if config.train.liger_kernel or config.train.cut_cross_entropy:
        extras.append("kernels")
    if report_back:
        extras.append("action")
    return extras
