"""'Did you mean' suggestions for misspelt keys and values."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``word``, or None when nothing is close enough to help."""
    candidates = [str(candidate) for candidate in candidates]
    if not candidates or len(str(word)) > 2 * max(map(len, candidates)) + 8:
        return None  # far too long to be a misspelling (and difflib is quadratic in it)
    matches = difflib.get_close_matches(str(word), candidates, n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` or an empty string."""
    match = closest(word, candidates)
    return f" (did you mean {match!r}?)" if match else ""
