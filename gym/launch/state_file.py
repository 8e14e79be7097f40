"""``gym_state.json``: the record of what `gym launch` did in an output folder, read or refused whole.

A damaged state file (not UTF-8 or JSON, JSON of another type than the object Gym writes, a ``stages``
table or a stage record of the wrong type, nested too deeply, larger than any Gym writes) stops the run
with exit 1 and one sentence naming the file and what is wrong, and leaves the file as it is. Gym cannot
tell from it which stages finished or what it pushed; guessing could push a second time past the gates,
or throw a paid training run away. Deleting the file (or ``gym launch --force``) runs every stage again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gym.config.reading import display_path

STATE_FILE = "gym_state.json"
STATE_LIMIT = 16 * 2**20  # Gym's own state is a few kilobytes; a larger file is not one it wrote


class StateError(ValueError):
    """``gym_state.json`` cannot be trusted: one sentence naming it and what is wrong."""


def _kind(value: object) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def load_state(folder: Path) -> dict[str, Any]:
    """The state file of ``folder`` ({} when there is none); :class:`StateError` when it is damaged."""
    path = folder / STATE_FILE
    where = display_path(path)
    fix = "delete it to run every stage again (or rerun with --force)"
    try:
        if path.stat().st_size > STATE_LIMIT:
            raise StateError(f"{where} is larger than 16 MiB, not the state gym launch writes; {fix}")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError:
        raise StateError(
            f"{where} is not UTF-8 text, so Gym cannot tell which stages finished; {fix}"
        ) from None
    except OSError as error:
        raise StateError(
            f"{where} cannot be read ({error.strerror or type(error).__name__}); fix its permissions, or {fix}"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise StateError(
            f"{where} is not JSON ({error.msg} at line {error.lineno}), so Gym cannot tell which stages "
            f"finished; {fix}"
        ) from None
    except RecursionError:
        raise StateError(f"{where} is nested too deeply to be the state gym launch writes; {fix}") from None
    if not isinstance(data, dict):
        raise StateError(f"{where} holds a JSON {_kind(data)}, not the object gym launch writes; {fix}")
    stages = data.get("stages", {})
    if not isinstance(stages, dict):
        raise StateError(
            f"{where}: 'stages' is a JSON {_kind(stages)}, not an object of stage records; {fix}"
        )
    for name, record in stages.items():
        if not isinstance(record, dict):
            raise StateError(
                f"{where}: the record of stage {name[:40]!r} is a JSON {_kind(record)}, not an object; {fix}"
            )
    return data
