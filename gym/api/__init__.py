"""Gym's OpenAI-compatible serving layer: `gym serve`, and the same code inside a generated Space.

Nothing heavy is imported here so `gym --help` stays fast: the app factory (:mod:`gym.api.app`),
the backends (:mod:`gym.api.backend`) and the model loader (:mod:`gym.api.loading`) import torch,
transformers and fastapi only when called.
"""
