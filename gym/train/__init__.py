"""Training layer: trainers per method, built on ``gym.model.loading`` (base model, tokenizer) and
``gym.model.adapters`` (what trains), with GRPO/PPO rewards in ``gym.train.rewards``.

Kept import-light (a docstring only): ``gym validate`` and ``gym --help`` never load torch."""
