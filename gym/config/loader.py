"""Read gym.toml (plus command-line overrides) into a validated :class:`GymConfig`.

Everything that can be wrong is collected and raised together as one :class:`ConfigError`, each
problem with file, line, column and dotted key. Nothing else escapes: a user never sees a traceback
for a config mistake.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gym.config.envvars import expand_env
from gym.config.errors import (
    ConfigError,
    ConfigIssue,
    redact,
    remember_secret_variables,
    secret_env_names,
    shorten,
)
from gym.config.messages import clean_loc, sentence
from gym.config.positions import Positions
from gym.config.reading import (  # noqa: F401 - parse_toml re-exported for callers
    MAX_DEPTH,
    parse_toml,
    read_toml,
    too_deep_in_data,
    too_deep_message,
)
from gym.config.root import DEFER_CROSS_CHECKS, GymConfig, cross_field_issues, deprecation_notes

KeyPath = tuple[str | int, ...]
COMMAND_LINE = "command line"


@dataclass(frozen=True)
class Override:
    """One key set from the command line. ``"*"`` in ``path`` means every item of a list."""

    path: KeyPath
    value: Any
    flag: str  # the flag as typed, for error messages


def _set(node: Any, path: KeyPath, value: Any) -> None:
    """Set ``path`` in nested dicts/lists, creating tables on the way; ``"*"`` fans out over a list.

    Raises KeyError naming the part of the path that does not exist (a list index out of range).
    """
    head, rest = path[0], path[1:]
    if head == "*":
        for item in node if isinstance(node, list) else []:
            if isinstance(item, dict) and rest:
                _set(item, rest, value)
        return
    if isinstance(node, list):
        if not isinstance(head, int) or not 0 <= head < len(node):
            raise KeyError(f"there is no item {head} (the array has {len(node)})")
    elif isinstance(head, int):
        raise KeyError(f"{head} is an index, but the value there is not an array")
    if not rest:
        node[head] = value
        return
    if isinstance(node, dict) and not isinstance(node.get(head), dict | list):
        node[head] = {}
    _set(node[head], rest, value)


def _matches(pattern: KeyPath, loc: KeyPath) -> bool:
    return len(loc) >= len(pattern) and all(p == "*" or p == q for p, q in zip(pattern, loc, strict=False))


def build_config(
    data: Mapping[str, Any],
    *,
    source: str = COMMAND_LINE,
    positions: Positions | None = None,
    overrides: Sequence[Override] = (),
    env: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> GymConfig:
    """Validate raw config data (already parsed) with overrides applied; raise ConfigError on any problem."""
    for override in overrides:  # checked first: applying them recurses along the path
        if len(override.path) > MAX_DEPTH or too_deep_in_data(override.value) is not None:
            key = shorten(
                ".".join(map(str, override.path[:3])) + ("..." if len(override.path) > 3 else ""), 60
            )
            raise ConfigError.single(COMMAND_LINE, too_deep_message(), f"{key} ({override.flag})")
    raw = copy.deepcopy(dict(data))
    for override in overrides:
        try:
            _set(raw, override.path, copy.deepcopy(override.value))
        except KeyError as error:
            key = ".".join(map(str, override.path))
            raise ConfigError.single(
                COMMAND_LINE, f"cannot set it: {error.args[0]}", f"{key} ({override.flag})"
            ) from None
    remember_secret_variables(
        secret_env_names(raw)
    )  # their values are redacted from every output from now on
    raw, expansion = expand_env(raw, os.environ if env is None else env)
    # Expanded values never appear in messages, nor the lower-cased or slugged forms a hint could make.
    secrets = tuple(
        {
            form
            for value in expansion.values
            for form in (value, value.lower(), re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-"))
            if len(form) >= 4
        }
    )

    def issue(loc: KeyPath, message: str, at_key: bool = False) -> ConfigIssue:
        key = redact(".".join(map(str, loc)), secrets)
        for override in reversed(overrides):
            if _matches(override.path, loc) or _matches(loc, override.path):
                return ConfigIssue(COMMAND_LINE, f"{key} ({override.flag})", redact(message, secrets))
        for path, original in expansion.expanded.items():
            expanded = _get(raw, path)
            if (
                isinstance(expanded, str)
                and expanded
                and (path[: len(loc)] == loc or loc[: len(path)] == path)
            ):
                message = message.replace(expanded, original)  # show ${VAR}, never the value
        line, column = (None, None)
        if positions is not None:
            line, column = positions.find_key(loc) if at_key else positions.find(loc)
        return ConfigIssue(source, key, redact(message, secrets), line, column)

    issues = [
        issue(path, f"environment variable {name} is not set (write ${{{name}:-default}} for a fallback)")
        for path, name in expansion.missing
    ]
    config: GymConfig | None = None
    try:
        config = GymConfig.model_validate(raw, context={DEFER_CROSS_CHECKS: True})
    except ValidationError as error:
        for item in error.errors(include_url=False):
            loc, _ = clean_loc(item["loc"])
            issues.append(issue(loc, sentence(item, GymConfig), at_key=item["type"] == "extra_forbidden"))
    if config is not None:
        if config_path is not None:  # before the cross checks: some read files relative to gym.toml
            config._source = config_path.resolve()
        issues.extend(issue(loc, message) for loc, message in cross_field_issues(config))
    if issues:
        raise ConfigError(issues)
    assert config is not None
    config._placeholders = {path: text for path, text in expansion.expanded.items() if path}
    config._notes = [str(issue(loc, message)) for loc, message in deprecation_notes(config)]
    return config


def _get(data: Any, path: KeyPath) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def load_config(
    path: str | Path | None = "gym.toml",
    *,
    overrides: Sequence[Override] = (),
    env: Mapping[str, str] | None = None,
) -> GymConfig:
    """Load and validate ``path`` (or only ``overrides`` when ``path`` is None)."""
    if path is None:
        return build_config({}, overrides=overrides, env=env)
    file = Path(path)
    data, positions, source = read_toml(file)
    return build_config(
        data, source=source, positions=positions, overrides=overrides, env=env, config_path=file
    )
