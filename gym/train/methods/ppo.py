"""PPO (``method = 'ppo'``) on Gym's own trainer, :class:`gym.train.ppo.PPOTrainer`: TRL no longer has one."""

from __future__ import annotations

from typing import Any

from gym.train.registry import TrainContext, register_trainer


def build_ppo(ctx: TrainContext) -> Any:
    from gym.train.ppo import PPOTrainer

    return PPOTrainer(ctx)


register_trainer("ppo", build_ppo)
