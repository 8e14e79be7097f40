"""The one exception the evaluation stage raises for anything a user can fix."""

from __future__ import annotations


class EvalError(Exception):
    """Evaluation cannot run; the message is one sentence saying why and what to do."""
