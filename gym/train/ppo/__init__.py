"""PPO, Gym's own trainer (TRL no longer ships one): the trainer, its arithmetic, rollouts, rewards, checkpoints.

``PPOTrainer`` is loaded on first access so that importing ``gym.train.ppo.core`` stays free of torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.train.ppo.trainer import PPOTrainer

__all__ = ["PPOTrainer"]


def __getattr__(name: str) -> Any:
    if name == "PPOTrainer":
        from gym.train.ppo.trainer import PPOTrainer

        return PPOTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
