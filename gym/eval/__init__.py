"""Evaluation with lm-eval: the tuned model (and its base) on lm-eval, local and Gym tasks.

Importing this package is cheap; torch, transformers and lm-eval load only inside :func:`evaluate`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gym.eval.errors import EvalError
from gym.eval.report import (
    RESULTS_FILE,
    EvalReport,
    TaskScore,
    results_table_markdown,
    results_table_rich,
)

if TYPE_CHECKING:
    from pathlib import Path

    from gym.config.root import GymConfig

__all__ = [
    "RESULTS_FILE",
    "EvalError",
    "EvalReport",
    "TaskScore",
    "evaluate",
    "results_table_markdown",
    "results_table_rich",
]


def evaluate(config: GymConfig, model_path: str | Path | None = None, **kwargs: Any) -> EvalReport:
    """See :func:`gym.eval.runner.evaluate` (imported lazily: it pulls in lm-eval)."""
    from gym.eval.runner import evaluate as run

    return run(config, model_path, **kwargs)
