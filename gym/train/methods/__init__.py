"""Built-in training methods; importing this package registers each one in ``gym.train.registry``."""

import gym.train.methods.ppo  # noqa: F401
from gym.train.methods import dpo, grpo, kto, reward_model, sft  # noqa: F401
