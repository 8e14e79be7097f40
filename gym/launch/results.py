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


def run_results(folder: Path) -> dict[str, Any] | None:
    """eval_results.json, with the promotion gates' outcome under ``"gates"`` when the run had gates."""
    path = folder / "eval_results.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    gates = folder / "gate_results.json"
    if gates.is_file():
        data["gates"] = json.loads(gates.read_text(encoding="utf-8"))
    return data


def emit_results(folder: Path, echo: Callable[[str], None] = print) -> bool:
    """Print the folder's results (see :func:`run_results`) as one marked line when ``GYM_EMIT_RESULTS=1``."""
    data = run_results(folder) if os.environ.get(ENV) == "1" else None
    if data is None:
        return False
    echo(MARKER + json.dumps(data, separators=(",", ":")))
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
