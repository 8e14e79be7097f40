"""Writing to the runner: step outputs, the job summary, annotations; every text redacted first.

``$GITHUB_OUTPUT`` values use the heredoc form with a random delimiter, so a value containing newlines
or something that looks like a delimiter cannot forge another output. Annotation text is escaped as the
runner expects (``%``, CR, LF; plus ``:`` and ``,`` in properties) so a config's text cannot inject a
workflow command.
"""

from __future__ import annotations

import secrets as _random
from collections.abc import Mapping, Sequence
from pathlib import Path

from gym.config.errors import redact


class Redactor:
    """Replaces known secret values (and anything shaped like a token) before text leaves the action."""

    def __init__(self) -> None:
        self._values: list[str] = []

    def add(self, value: str) -> None:
        if value and len(value) >= 4 and value not in self._values:
            self._values.append(value)

    def __call__(self, text: str) -> str:
        return redact(text, tuple(self._values))


def write_outputs(path: Path | None, values: Mapping[str, str], redactor: Redactor) -> None:
    if path is None:
        return
    with path.open("a", encoding="utf-8") as stream:
        for name, value in values.items():
            value = redactor(value)
            delimiter = f"ghadelimiter_{_random.token_hex(16)}"
            stream.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


def write_summary(path: Path | None, bodies: Sequence[str], redactor: Redactor) -> None:
    if path is None:
        return
    with path.open("a", encoding="utf-8") as stream:
        for body in bodies:
            stream.write(redactor(body).rstrip() + "\n\n")


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(
    level: str, message: str, *, file: str = "", line: int | None = None, col: int | None = None
) -> str:
    """A ``::error file=...,line=...::message`` workflow command (shown on the PR's changed lines)."""
    props = []
    if file:
        props.append(f"file={_escape_property(file)}")
    if line is not None:
        props.append(f"line={line}")
    if col is not None:
        props.append(f"col={col}")
    return f"::{level}{' ' + ','.join(props) if props else ''}::{_escape_data(message)}"
