"""Gym's OpenAI-compatible HTTP face: `gym serve`, and the same code inside a generated Space.

Routes, request intake, schemas, responses, tool calls and the Space's chat page live here; whatever
generates the tokens is a :class:`gym.engine.backend.Backend`. Nothing heavy is imported here so
`gym --help` stays fast: the app factory (:mod:`gym.api.app`) imports fastapi only when called.
"""
