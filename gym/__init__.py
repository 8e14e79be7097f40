"""Gym: GitOps for fine-tuning language models.

One ``gym.toml`` describes a whole run; :class:`gym.config.GymConfig` is the typed object every
layer receives. This module stays import-light on purpose: ``gym --help`` and ``gym validate``
must not pay for torch.
"""

__version__ = "0.1.0"
