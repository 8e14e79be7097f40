"""Using a learned experience library at inference: load it, render it as a system prompt, merge it in.

Training-free GRPO (:mod:`gym.train.training_free`) shows the library inside the user turn while it
learns; at inference it goes into the system prompt (the paper samples at temperature ~0.3 there).
`gym serve --experiences FILE` and `gym eval --experiences FILE` both call :func:`with_experiences`
on every conversation, so a served or evaluated model sees exactly the same text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

INFERENCE_TEMPERATURE = 0.3


def load_experiences(path: str | Path) -> list[str]:
    """The experiences of a library file (``latest.json``, ``step_NNNN.json``, a run's ``experiences.json``),
    a library folder (its ``latest.json``) or a JSON list of strings. ValueError naming the file otherwise."""
    from gym.train.training_free.library import load_library

    return load_library(path).experiences


def render_system_prompt(experiences: list[str]) -> str:
    """The library as system-prompt text, ``[id]. text`` per line (empty for an empty library)."""
    from gym.train.training_free.prompts import APPLY_EXPERIENCES

    if not experiences:
        return ""
    lines = "\n".join(f"[{i}]. {text}" for i, text in enumerate(experiences, 1))
    return f"{APPLY_EXPERIENCES}\n{lines}"


def with_experiences(messages: list[dict[str, Any]], system_prompt: str) -> list[dict[str, Any]]:
    """``messages`` with ``system_prompt`` added: after the text of a leading system turn, else as a new one.

    Returns a new list; the caller's messages are not changed. An empty prompt returns them as they are.
    """
    if not system_prompt:
        return list(messages)
    if (
        messages
        and messages[0].get("role") in ("system", "developer")
        and isinstance(messages[0].get("content"), str)
    ):
        first = dict(messages[0])
        first["content"] = f"{first['content']}\n\n{system_prompt}" if first["content"] else system_prompt
        return [first, *messages[1:]]
    return [{"role": "system", "content": system_prompt}, *messages]
