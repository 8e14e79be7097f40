"""A config from an optional gym.toml plus command-line flags: what every `gym` command reads."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from gym.config.flags import parse_flags
from gym.config.loader import Override, load_config
from gym.config.root import GymConfig


def derived_project_name(overrides: Sequence[Override]) -> str:
    """A project name for flag-only runs: the output folder's name, else '<model>-<method>'."""
    values = {override.path: override.value for override in overrides}
    output_dir = values.get(("project", "output_dir"))
    if isinstance(output_dir, str) and output_dir.strip("/"):
        base = Path(output_dir).name
    else:
        model = str(values.get(("model", "name_or_path"), "model")).rstrip("/")
        base = f"{model.split('/')[-1].split(':')[-1]}-{values.get(('train', 'method'), 'sft')}"
    return re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")[:64] or "gym-run"


def config_from_args(
    path: str | Path | None,
    argv: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    notes: list[str] | None = None,
) -> GymConfig:
    """Load ``path`` (None: flags only) with ``argv`` flags overriding its keys.

    ``notes`` receives one line per LLaMA-Factory flag that means nothing in Gym and was ignored.
    """
    overrides = parse_flags(argv, notes=notes)
    if path is None and not any(o.path == ("project", "name") for o in overrides):
        overrides.insert(0, Override(("project", "name"), derived_project_name(overrides), "--project_name"))
    return load_config(path, overrides=overrides, env=env)


def split_config_and_flags(args: Sequence[str]) -> tuple[Path | None, list[str]]:
    """``[gym.toml] [--key value ...]`` -> (config path or None, flags).

    The config path is the first argument when it is not a flag. Without one, ``./gym.toml`` is used
    when it exists; otherwise flags alone describe the run (and with no flags either, the missing
    ``gym.toml`` is reported).
    """
    args = list(args)
    if args and not args[0].startswith("-"):
        return Path(args[0]), args[1:]
    default = Path("gym.toml")
    if default.exists() or not args:
        return default, args
    return None, args
