"""Read a training YAML, tell which tool wrote it, convert it, and keep only what validates."""

from __future__ import annotations

import errno
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


SHOWN_KEYS = 20  # longer lists of left-behind keys end with "… and N more"


def first_of(items: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], str]:
    """(the first :data:`SHOWN_KEYS` (key, why) pairs with keys shortened, the "… and N more" line or "")."""
    from gym.config.errors import shorten

    shown = [(shorten(key, 80), shorten(why, 200)) for key, why in items[:SHOWN_KEYS]]
    rest = len(items) - len(shown)
    return shown, (f"… and {rest:,} more" if rest > 0 else "")


def relative_to(target_dir: Path, path: str | Path) -> str:
    """``path`` as gym.toml should write it: relative to the gym.toml's folder when that is shorter."""
    absolute = Path(path).expanduser().resolve()
    try:
        relative = os.path.relpath(absolute, target_dir.resolve())
    except ValueError:
        return str(absolute)
    return relative if not relative.startswith("../../..") else str(absolute)


def read_yaml(path: Path) -> dict[str, Any]:
    """The YAML mapping at ``path``, bounded (:mod:`gym.config.migrate.bounded_yaml`); ConfigError otherwise."""
    import yaml

    from gym.config.migrate.bounded_yaml import BoundedLoader, TooLarge, read_bounded
    from gym.config.reading import display_path

    source = display_path(path)
    try:
        text = read_bounded(path)
    except UnicodeDecodeError:
        raise ConfigError.single(source, "is not UTF-8 text; save the file as UTF-8") from None
    except ValueError as error:  # not a regular file, too large (a NUL in the name is handled below)
        reason = str(error.args[0]) if "null" not in str(error) else "the path contains a NUL character"
        raise ConfigError.single(source, reason) from None
    except OSError as error:
        reason = {
            errno.ENOENT: "file not found",
            errno.ENAMETOOLONG: "the file name is too long for the file system",
            errno.ELOOP: "is a loop of symbolic links",
        }.get(error.errno or 0, "cannot be read")
        raise ConfigError.single(source, reason) from None
    try:
        data = yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except TooLarge as error:
        raise ConfigError.single(source, str(error)) from None
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


LLAMAFACTORY_ONLY = ("stage", "finetuning_type", "template", "dataset", "cutoff_len")


def detect_tool(data: dict[str, Any]) -> str:
    """'axolotl', 'trl' (a `trl grpo --config` YAML) or 'llamafactory', from keys only one of them uses."""
    from gym.config.migrate.trl_names import is_grpo

    if "base_model" in data or "micro_batch_size" in data or "sequence_len" in data:
        return "axolotl"
    if not any(key in data for key in LLAMAFACTORY_ONLY) and (is_grpo(data) or "dataset_name" in data):
        return "trl"  # TrainingArguments names as LLaMA-Factory reads them, plus TRL's own
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
    else:  # a TRL YAML uses TrainingArguments' names, as LLaMA-Factory's does
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
                    shown, more = first_of(conversion.not_carried)
                    left = [
                        ConfigIssue(str(conversion.source), key, f"not carried over: {why}")
                        for key, why in shown
                    ]
                    if more:
                        left.append(ConfigIssue(str(conversion.source), "", f"{more} not carried over"))
                    raise ConfigError([*error.issues, *left]) from None
                droppable.append((known, issue.message))
            for path, message in droppable:
                conversion.drop(path, f"gym.toml refuses it: {message}")
    raise ConfigError.single(str(conversion.source), "could not be converted into a valid gym.toml")
