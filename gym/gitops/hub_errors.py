"""How a Hub client error is named in Gym's one-sentence failures: its HTTP status, else its kind (never its
text, which may quote a URL with a token)."""

from __future__ import annotations


def how(error: BaseException) -> str:
    status = getattr(getattr(error, "response", None), "status_code", None)
    return f"HTTP {status}" if status else type(error).__name__


def status_of(error: BaseException) -> int | None:
    return getattr(getattr(error, "response", None), "status_code", None)
