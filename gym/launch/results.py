"""Eval results travelling back from a remote run through its log: one marked line, read by the caller.

A cloud job's files stay on the cloud, but its log streams back through SkyPilot. With
``GYM_EMIT_RESULTS=1`` (set by the cloud task), `gym launch` ends by printing ``eval_results.json`` as
one marked line; :func:`results_from_lines` finds it in the streamed log, so the GitHub Action can post
the table on the pull request when the run finishes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

MARKER = "gym-eval-results: "
ENV = "GYM_EMIT_RESULTS"


def emit_results(folder: Path, echo: Callable[[str], None] = print) -> bool:
    """Print the folder's eval_results.json as one marked line when ``GYM_EMIT_RESULTS=1``."""
    path = folder / "eval_results.json"
    if os.environ.get(ENV) != "1" or not path.is_file():
        return False
    echo(MARKER + json.dumps(json.loads(path.read_text(encoding="utf-8")), separators=(",", ":")))
    return True


def results_from_lines(lines: Iterable[str | None]) -> dict[str, Any] | None:
    """The last marked results in a streamed log (lines may hold several log lines, or be None)."""
    found = None
    for chunk in lines:
        for line in (chunk or "").splitlines():
            start = line.find(MARKER)
            if start >= 0:
                try:
                    found = json.loads(line[start + len(MARKER) :])
                except json.JSONDecodeError:
                    continue
    return found
