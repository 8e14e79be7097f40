"""Reading exceptions from libraries so a user gets one sentence: the chain behind an error, its first line.

Standard library only, usable from every layer.
"""

from __future__ import annotations


def error_chain(error: BaseException | None) -> list[BaseException]:
    """``error`` and everything it was raised from (``__cause__``, else ``__context__``), outermost first.

    Libraries wrap the useful failure (a DNS error, pyarrow's message) several layers down.
    """
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def first_line(error: BaseException) -> str:
    """The first line of an exception's message, without its full stop: what a one-sentence error quotes."""
    text = str(error).strip().splitlines()
    return text[0].rstrip(".") if text else type(error).__name__
