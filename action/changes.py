"""Which gym.toml files this event is about: changed files matched against the ``config`` input.

The changed files come from the API (the PR's files, or the compare of a push), never from the
checkout's git history, which a shallow clone does not have. A config that was deleted is not run.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from action.context import ActionError


@dataclass(frozen=True)
class ChangedFile:
    filename: str
    status: str = "modified"  # added | modified | removed | renamed | ...


def matches(path: str, patterns: Sequence[str]) -> bool:
    """``path`` matches a pattern; ``**/`` at the start also matches the repository root."""
    for pattern in patterns:
        pattern = pattern[2:] if pattern.startswith("./") else pattern
        if fnmatch.fnmatchcase(path, pattern):
            return True
        if pattern.startswith("**/") and fnmatch.fnmatchcase(path, pattern[3:]):
            return True
    return False


def select_configs(changed: Iterable[ChangedFile], patterns: Sequence[str]) -> list[str]:
    """The changed (not deleted) files that are configs, in a stable order."""
    chosen = {f.filename for f in changed if f.status != "removed" and matches(f.filename, patterns)}
    return sorted(chosen)


def configs_in_workspace(workspace: Path, patterns: Sequence[str]) -> list[str]:
    """Every config in the checkout (for events without a diff, e.g. workflow_dispatch)."""
    found: set[str] = set()
    for pattern in patterns:
        for path in workspace.glob(pattern):
            if path.is_file():
                found.add(path.relative_to(workspace).as_posix())
    return sorted(found)


def workspace_path(workspace: Path, relative: str) -> Path:
    """``relative`` inside the checkout; a path (or symlink) that leads outside it is refused."""
    path = (workspace / relative).resolve()
    try:
        path.relative_to(workspace.resolve())
    except ValueError:
        raise ActionError(
            f"{relative}: resolves outside the repository checkout; refusing to read it"
        ) from None
    return path
