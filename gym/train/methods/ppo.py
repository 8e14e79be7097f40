"""PPO (``method = 'ppo'``) registered from its family, :mod:`gym.train.ppo` (Gym's own trainer: TRL has none)."""

from __future__ import annotations

from typing import Any

from gym.train.registry import TrainContext, register_trainer


def build_ppo(ctx: TrainContext) -> Any:
    from gym.train.ppo.trainer import PPOTrainer

    return PPOTrainer(ctx)


register_trainer("ppo", build_ppo)
