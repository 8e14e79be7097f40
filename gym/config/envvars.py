"""``${ENV_VAR}`` expansion in string values of gym.toml.

``${NAME}`` is replaced by the variable's value, ``${NAME:-default}`` falls back to a default, and
``$${`` writes a literal ``${``. Expanded values are remembered so that error messages can show the
placeholder instead of the value: a secret expanded into a wrong key must never be printed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

PLACEHOLDER = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

Path = tuple[str | int, ...]


class Expansion:
    """Result of expanding a raw config: the new data, what was expanded, and what was missing."""

    def __init__(self) -> None:
        self.expanded: dict[Path, str] = {}  # path -> original text with placeholders
        self.values: list[str] = []  # expanded values, to scrub from messages
        self.missing: list[tuple[Path, str]] = []  # (path, variable name)


def expand_env(data: Any, env: Mapping[str, str]) -> tuple[Any, Expansion]:
    """A copy of ``data`` with placeholders in every string expanded from ``env``."""
    result = Expansion()

    def substitute(path: Path, text: str) -> str:
        def replace(match: re.Match[str]) -> str:
            escaped, name, default = match.groups()
            if escaped:
                return match.group(0)[1:]
            if name in env:
                result.values.append(env[name])
                return env[name]
            if default is not None:
                return default
            result.missing.append((path, name))
            return match.group(0)

        new = PLACEHOLDER.sub(replace, text)
        if new != text:
            result.expanded[path] = text
        return new

    def walk(path: Path, value: Any) -> Any:
        if isinstance(value, str):
            return substitute(path, value)
        if isinstance(value, dict):
            return {key: walk((*path, key), item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk((*path, index), item) for index, item in enumerate(value)]
        return value

    return walk((), data), result
