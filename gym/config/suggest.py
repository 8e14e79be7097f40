"""'Did you mean' suggestions for misspelt keys and values."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``word``, or None when nothing is close enough to help."""
    matches = difflib.get_close_matches(str(word), list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` or an empty string."""
    match = closest(word, candidates)
    return f" (did you mean {match!r}?)" if match else ""
