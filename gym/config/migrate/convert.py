"""Read a training YAML, tell which tool wrote it, convert it, and keep only what validates."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym.config.errors import ConfigError, ConfigIssue

KeyPath = tuple[str | int, ...]


@dataclass
class Conversion:
    """A gym.toml in the making: its data, where each value came from, and what was left behind."""

    tool: str
    source: Path
    data: dict[str, Any] = field(default_factory=dict)
    origins: dict[KeyPath, str] = field(default_factory=dict)  # gym.toml path -> source key
    not_carried: list[tuple[str, str]] = field(default_factory=list)  # (source key, why)
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (source key, why it means nothing here)

    def put(self, path: KeyPath, value: Any, origin: str) -> None:
        """Set ``path`` (``"*"`` = every dataset) in the data, remembering the source key."""
        if path and path[0] == "datasets" and len(path) > 1 and path[1] == "*":
            for index, dataset in enumerate(self.data.get("datasets", [])):
                dataset[path[2]] = value
                self.origins[("datasets", index, path[2])] = origin
            return
        node = self.data
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
        self.origins[path] = origin

    def drop(self, path: KeyPath, reason: str) -> None:
        """Remove ``path`` again (it did not validate), listing its source key as not carried over."""
        node: Any = self.data
        try:
            for part in path[:-1]:
                node = node[part]
            del node[path[-1]]
        except (KeyError, IndexError, TypeError):
            return
        origin = self.origins.pop(path, ".".join(map(str, path)))
        self.not_carried.append((origin, reason))

    def skip(self, key: str, reason: str) -> None:
        self.not_carried.append((key, reason))


def relative_to(target_dir: Path, path: str | Path) -> str:
    """``path`` as gym.toml should write it: relative to the gym.toml's folder when that is shorter."""
    absolute = Path(path).expanduser().resolve()
    try:
        relative = os.path.relpath(absolute, target_dir.resolve())
    except ValueError:
        return str(absolute)
    return relative if not relative.startswith("../../..") else str(absolute)


def read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    from gym.config.reading import display_path

    source = display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as error:
        reason = "file not found" if isinstance(error, FileNotFoundError) else "cannot be read"
        raise ConfigError.single(source, reason) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError.single(source, f"YAML syntax error: {problem}", line=line, column=column) from None
    except RecursionError:
        raise ConfigError.single(source, "YAML nested too deeply to be a training config") from None
    if not isinstance(data, dict):
        raise ConfigError.single(source, "expected a YAML mapping of training arguments (key: value)")
    return data


def detect_tool(data: dict[str, Any]) -> str:
    """'axolotl' or 'llamafactory', from keys only one of them uses."""
    if "base_model" in data or "micro_batch_size" in data or "sequence_len" in data:
        return "axolotl"
    return "llamafactory"


def convert_file(path: Path, target: Path, dataset_dir: str | None = None) -> tuple[Conversion, str]:
    """(conversion, gym.toml text) for the YAML at ``path``; ConfigError when nothing runnable results."""
    from gym.config.migrate import axolotl, llamafactory_yaml
    from gym.config.migrate.render import render

    data = read_yaml(path)
    tool = detect_tool(data)
    conversion = Conversion(tool=tool, source=path)
    if tool == "axolotl":
        axolotl.convert(data, conversion, target.parent)
    else:
        llamafactory_yaml.convert(data, conversion, target.parent, dataset_dir)
    _keep_what_validates(conversion, target)
    return conversion, render(conversion)


def _keep_what_validates(conversion: Conversion, target: Path) -> None:
    """Validate; a converted value gym.toml refuses is dropped and listed, unless the run needs it."""
    from gym.config.loader import build_config

    essential = {("project", "name"), ("model", "name_or_path")}
    for _ in range(20):
        try:
            build_config(conversion.data, source=str(target), env={})
            return
        except ConfigError as error:
            droppable = []
            for issue in error.issues:
                path = tuple(int(p) if p.isdigit() else p for p in issue.key.split(".")) if issue.key else ()
                known = next((p for p in conversion.origins if p == path[: len(p)]), None)
                if known is None or known in essential or known[-1] in ("path", "hub", "format"):
                    # Nothing runnable: say what is missing, and what was left behind that may be why.
                    left = [
                        ConfigIssue(str(conversion.source), key, f"not carried over: {why}")
                        for key, why in conversion.not_carried
                    ]
                    raise ConfigError([*error.issues, *left]) from None
                droppable.append((known, issue.message))
            for path, message in droppable:
                conversion.drop(path, f"gym.toml refuses it: {message}")
    raise ConfigError.single(str(conversion.source), "could not be converted into a valid gym.toml")
