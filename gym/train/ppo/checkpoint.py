"""PPO checkpoints in the same ``checkpoint-N`` layout and completeness rule as every other Gym method.

A checkpoint holds what an exact resume needs: the trainable policy weights (adapters, or every weight
under full fine-tuning), the value head, the optimizer and scheduler, the RNG states and
``trainer_state.json`` (step and log history; its name lets ``train.resume = <path>`` accept the folder).
The ``gym_complete.json`` marker (with every file's size and hash) is written last and atomically, as
:mod:`gym.train.checkpoints` does, so a run killed while saving leaves a folder that resume ignores and
removes, and one damaged afterwards is detected.

Prompt order needs no saved state: the batch of step ``n`` is a pure function of the seed and ``n``.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from gym.model.device import cuda_available
from gym.train.checkpoints import checkpoints, training_fingerprint, write_marker

if TYPE_CHECKING:
    from gym.train.ppo.trainer import PPOTrainer

POLICY, VALUE_HEAD, OPTIMIZER, SCHEDULER, RNG, STATE = (
    "policy.safetensors",
    "value_head.safetensors",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "trainer_state.json",
)


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """The parameters that train (tied weights once), detached on the CPU for safetensors."""
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def rng_state() -> dict[str, Any]:
    import numpy

    state = {"python": random.getstate(), "numpy": numpy.random.get_state(), "cpu": torch.get_rng_state()}
    if cuda_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    import numpy

    random.setstate(state["python"])
    numpy.random.set_state(state["numpy"])
    torch.set_rng_state(state["cpu"])
    if cuda_available() and "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(trainer: PPOTrainer) -> Path:
    """Write ``checkpoint-<step>`` under the trainer's checkpoint folder; the marker goes last."""
    from safetensors.torch import save_file

    folder = Path(trainer.args.output_dir) / f"checkpoint-{trainer.state.global_step}"
    if folder.exists():  # a leftover of an earlier run at the same step: never mix two runs' files
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    save_file(trainable_state(trainer.model), str(folder / POLICY))
    save_file(trainable_state(trainer.value_head), str(folder / VALUE_HEAD))
    torch.save(trainer.optimizer.state_dict(), folder / OPTIMIZER)
    torch.save(trainer.scheduler.state_dict(), folder / SCHEDULER)
    torch.save(rng_state(), folder / RNG)
    trainer.state.save_to_json(str(folder / STATE))
    write_marker(
        folder, trainer.state.global_step, training_fingerprint(trainer.config, trainer.data_fingerprint)
    )
    prune(folder.parent, trainer.args.save_total_limit)
    return folder


def prune(folder: Path, keep: int) -> None:
    """Remove the oldest complete checkpoints beyond ``keep`` (``train.save_total_limit``)."""
    complete = [path for _, path, done in checkpoints(folder) if done]
    for path in complete[: max(0, len(complete) - keep)]:
        shutil.rmtree(path, ignore_errors=True)


def load_checkpoint(trainer: PPOTrainer, folder: Path) -> None:
    """Restore everything :func:`save_checkpoint` wrote into ``trainer``, for an exact continuation."""
    from safetensors.torch import load_file
    from transformers import TrainerState

    for module, name in ((trainer.model, POLICY), (trainer.value_head, VALUE_HEAD)):
        weights = load_file(str(folder / name))
        unexpected = module.load_state_dict(weights, strict=False).unexpected_keys
        if unexpected:
            raise ValueError(
                f"checkpoint '{folder}' does not match this model ({len(unexpected)} unknown weights, "
                f"e.g. {unexpected[0]}); resume it with the configuration it was trained with"
            )
    trainer.optimizer.load_state_dict(torch.load(folder / OPTIMIZER, weights_only=True))
    trainer.scheduler.load_state_dict(torch.load(folder / SCHEDULER, weights_only=True))
    restore_rng(torch.load(folder / RNG, weights_only=False))
    saved = TrainerState.load_from_json(str(folder / STATE))
    trainer.state.global_step = saved.global_step
    trainer.state.epoch = saved.epoch
    trainer.state.log_history = saved.log_history
