"""Reward functions for GRPO and PPO, named in gym.toml by ``train.grpo.reward``.

Every reward has TRL's GRPOTrainer signature, ``fn(prompts, completions, **kwargs) -> list[float | None]``:
completions are strings or conversations (lists of ``{"role", "content"}``), and the dataset's other
columns arrive as keyword lists, the reference answer among them (``reference`` in Gym's prompt rows;
``answer``, ``solution`` and ``ground_truth`` are read too). ``None`` means "no reward for this row"
(TRL turns it into NaN and leaves it out). The same functions serve Gym's own PPO.

Built-ins live in the plain dict :data:`REWARDS` (filled by :func:`register_reward`); anything else is
``'module.path:function'``, imported by :func:`resolve_rewards`.
"""

from __future__ import annotations

import importlib
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RewardFn = Callable[..., list[float | None]]
REWARDS: dict[str, RewardFn] = {}
REFERENCE_COLUMNS = ("reference", "answer", "solution", "ground_truth")
REWARD_REFERENCE = re.compile(r"^([A-Za-z_][\w.]*):([A-Za-z_]\w*)$")
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
# A reasoning block followed by a non-empty answer: the shape reasoning models are trained to produce.
THINK_FORMAT = r"^\s*<think>(?:(?!<think>).)*?</think>\s*\S.*$"


class RewardError(Exception):
    """A reward name cannot be resolved or a reward cannot be computed; one sentence saying why."""


def register_reward(name: str, fn: RewardFn) -> RewardFn:
    """Make ``name`` usable in ``train.grpo.reward``; returns ``fn``."""
    REWARDS[name] = fn
    return fn


def completion_text(completion: Any) -> str:
    """The text of one completion: a string as is, a conversation as its assistant turns joined."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    parts = []
    for message in completion or []:
        if message.get("role", "assistant") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, list):  # multimodal content parts
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        parts.append(content or "")
    return "\n".join(parts)


def references(kwargs: dict[str, Any], reward: str, count: int) -> list[Any]:
    """The reference answers column, whichever of :data:`REFERENCE_COLUMNS` the dataset has."""
    for column in REFERENCE_COLUMNS:
        if kwargs.get(column) is not None:
            values = list(kwargs[column])
            if len(values) != count:
                raise RewardError(f"reward '{reward}': {len(values)} {column} values for {count} completions")
            return values
    raise RewardError(
        f"reward '{reward}' needs a reference answer, but the rows have none of the columns "
        f"{', '.join(REFERENCE_COLUMNS)}; use the prompt format with a reference, or alpaca rows with an output"
    )


def normalize(text: str) -> str:
    """Case-folded, whitespace-collapsed text without a trailing full stop: formatting is not the answer."""
    return " ".join(str(text).split()).casefold().rstrip(".").strip()


def exact_match(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when the completion equals the reference up to case, spacing and a trailing full stop, else 0.0."""
    refs = references(kwargs, "exact_match", len(completions))
    return [
        None if ref is None else float(normalize(completion_text(c)) == normalize(ref))
        for c, ref in zip(completions, refs, strict=True)
    ]


def last_number(text: str) -> float | None:
    r"""The answer number of a text: inside ``\boxed{}``, after ``####`` (GSM8K), else the last number."""
    for marker in (r"\\boxed\{([^{}]*)\}", r"####\s*([^\n]*)"):
        found = re.findall(marker, text)
        if found and NUMBER.search(found[-1]):
            text = found[-1]
            break
    numbers = NUMBER.findall(text)
    if not numbers:
        return None
    try:
        return float(numbers[-1].replace(",", ""))
    except ValueError:
        return None


def numeric_match(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """1.0 when the completion's answer number equals the reference's (relative tolerance 1e-6), else 0.0.

    A reference without any number gives ``None``: the row cannot be judged this way.
    """
    refs = references(kwargs, "numeric_match", len(completions))
    rewards: list[float | None] = []
    for completion, ref in zip(completions, refs, strict=True):
        expected = None if ref is None else last_number(str(ref))
        if expected is None:
            rewards.append(None)
            continue
        got = last_number(completion_text(completion))
        rewards.append(float(got is not None and math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)))
    return rewards


def regex_reward(pattern: str, name: str = "regex_format") -> RewardFn:
    """A reward of 1.0 for completions that fully match ``pattern`` (DOTALL), else 0.0."""
    compiled = re.compile(pattern, re.DOTALL)

    def reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        return [float(compiled.fullmatch(completion_text(c)) is not None) for c in completions]

    reward.__name__ = name  # TRL logs each reward under its function name
    reward.__doc__ = f"1.0 when the completion matches {pattern!r}, else 0.0."
    return reward


regex_format = regex_reward(THINK_FORMAT, "regex_format")


def length_penalty(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """Kimi k1.5's length reward: within each group of completions of one prompt, shorter is better.

    ``lambda = 0.5 - (len - min_len) / (max_len - min_len)`` in [-0.5, 0.5]; a wrong answer (when the rows
    have a reference) gets ``min(0, lambda)``, so brevity is never rewarded for being wrong. Lengths are
    in tokens when TRL passes ``completion_ids``, else in characters; a group of equal lengths gets 0.
    """
    texts = [completion_text(c) for c in completions]
    ids = kwargs.get("completion_ids")
    lengths = [len(i) for i in ids] if ids is not None and len(ids) == len(texts) else [len(t) for t in texts]
    correct: list[bool | None] = [None] * len(texts)
    if any(kwargs.get(column) is not None for column in REFERENCE_COLUMNS):
        refs = references(kwargs, "length_penalty", len(texts))
        correct = [
            None if r is None else normalize(t) == normalize(r) for t, r in zip(texts, refs, strict=True)
        ]
    groups: dict[str, list[int]] = {}
    for index, prompt in enumerate(prompts):
        groups.setdefault(repr(prompt), []).append(index)
    rewards: list[float | None] = [0.0] * len(texts)
    for members in groups.values():
        low, high = min(lengths[i] for i in members), max(lengths[i] for i in members)
        if high == low:
            continue
        for i in members:
            value = 0.5 - (lengths[i] - low) / (high - low)
            rewards[i] = min(0.0, value) if correct[i] is False else value
    return rewards


def _import_reward(name: str, base_dir: Path | None) -> RewardFn:
    module_name, function_name = REWARD_REFERENCE.match(name).groups()  # type: ignore[union-attr]
    if base_dir is not None and str(base_dir) not in sys.path:
        sys.path.insert(0, str(base_dir))  # a rewards.py next to gym.toml imports as 'rewards:fn'
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
            raise RewardError(
                f"reward '{name}': module '{module_name}' was not found; check the name and that its folder "
                "is importable (the folder of gym.toml is)"
            ) from error
        raise RewardError(f"reward '{name}': importing module '{module_name}' failed: {error}") from error
    except Exception as error:  # the module itself raised while importing
        raise RewardError(
            f"reward '{name}': importing module '{module_name}' failed: {type(error).__name__}: {error}"
        ) from error
    function = getattr(module, function_name, None)
    if function is None:
        from gym.config.suggest import did_you_mean

        public = [n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n])]
        raise RewardError(
            f"reward '{name}': module '{module_name}' has no function '{function_name}'"
            f"{did_you_mean(function_name, public)}"
        )
    if not callable(function):
        raise RewardError(f"reward '{name}': '{function_name}' in module '{module_name}' is not a function")
    return function


def resolve_rewards(names: Sequence[str], base_dir: str | Path | None = None) -> list[RewardFn]:
    """The reward functions for ``names``: built-in names or ``'module.path:function'``.

    ``base_dir`` (gym.toml's folder) is put on ``sys.path`` so a project's own reward module is found.
    """
    functions = []
    for name in names:
        if name in REWARDS:
            functions.append(REWARDS[name])
        elif REWARD_REFERENCE.match(name):
            functions.append(_import_reward(name, Path(base_dir) if base_dir is not None else None))
        else:
            from gym.config.suggest import did_you_mean

            raise RewardError(
                f"unknown reward '{name}'{did_you_mean(name, REWARDS)}; built-in rewards: {', '.join(REWARDS)}, "
                "or 'module.path:function'"
            )
    return functions


register_reward("exact_match", exact_match)
register_reward("numeric_match", numeric_match)
register_reward("regex_format", regex_format)
register_reward("length_penalty", length_penalty)
