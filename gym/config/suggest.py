"""'Did you mean' suggestions for misspelt keys and values."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``word``, or None when nothing is close enough to help."""
    matches = nearest(word, candidates, 1)
    return matches[0] if matches else None


def nearest(word: str, candidates: Iterable[str], count: int) -> list[str]:
    """Up to ``count`` candidates most like ``word``, the closest first (none when nothing is close)."""
    candidates = [str(candidate) for candidate in candidates]
    if not candidates or len(str(word)) > 2 * max(map(len, candidates)) + 8:
        return []  # far too long to be a misspelling (and difflib is quadratic in it)
    return difflib.get_close_matches(str(word), candidates, n=count, cutoff=0.6)


def did_you_mean(word: str, candidates: Iterable[str], count: int = 1) -> str:
    """`` (did you mean 'x'?)``, with ``count`` > 1 `` (did you mean 'x', 'y' or 'z'?)``, or an empty string."""
    matches = [repr(match) for match in nearest(word, candidates, count)]
    if not matches:
        return ""
    listed = matches[0] if len(matches) == 1 else f"{', '.join(matches[:-1])} or {matches[-1]}"
    return f" (did you mean {listed}?)"
