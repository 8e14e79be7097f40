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


_CONTROL_PICTURES = {code: chr(0x2400 + code) for code in range(0x20) if chr(code) not in "\n\t"}
_CONTROL_PICTURES[0x7F] = "\u2421"  # ␡


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: control characters shown, never obeyed.

    Data and file names are user text: an ANSI escape in a row (``\\x1b[2J``, a title-setting OSC) or a
    carriage return would otherwise drive the terminal. C0 controls (except newline and tab) become
    their visible Unicode pictures (␛, ␍), C1 controls a ``\\x9b``-style escape, and lone surrogates
    (which no terminal encoding can write) the replacement character.
    """
    out = []
    for char in text:
        code = ord(char)
        if code in _CONTROL_PICTURES:
            out.append(_CONTROL_PICTURES[code])
        elif 0x80 <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code < 0xE000:
            out.append("\ufffd")
        else:
            out.append(char)
    return "".join(out)
