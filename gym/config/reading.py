"""gym.toml from disk to plain data plus positions, every failure as a ConfigError at ``file:line:col``.

Parsing uses the standard library's ``tomllib`` (``tomli`` before Python 3.11): it is strict TOML 1.0,
about 200 times faster than tomlkit on long strings (a 1 MB value parses in a tenth of a second
instead of half a minute), and every one of its errors carries a position, including a key or table
defined twice. Its terse messages are rewritten here into sentences naming the key.

Nothing here may raise anything but :class:`ConfigError`: unreadable paths (NUL characters, names too
long, symlink loops), nesting deep enough to exhaust the interpreter's stack, and syntax errors all
become one line each.
"""

from __future__ import annotations

import ast
import errno
import os
import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from gym.config.errors import ConfigError, ConfigIssue, shorten
from gym.config.positions import Positions, scan

KeyPath = tuple[str | int, ...]
MAX_DEPTH = 64
"""Deepest nesting of tables/arrays accepted; a real gym.toml needs four levels."""

AT = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)$")
NAMED_KEY = re.compile(r"^(Cannot declare|Cannot mutate immutable namespace) (\(.*\))(?: twice)?$")
# Tokens of TOML text that matter for nesting: strings and comments are skipped whole.
NESTING_TOKENS = re.compile(
    r'"""[^"\\]*(?:(?:\\[\s\S]|"(?!""))[^"\\]*)*(?:"""|$)'
    r"|'''[\s\S]*?(?:'''|$)"
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"?'
    r"|'[^'\n]*'?"
    r"|#[^\n]*"
    r"|[\[\]{}]"
)


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as error messages show it: relative when under the cwd, control characters escaped,
    at most ~120 characters (a 5,000-character name is shortened in the middle)."""
    text = os.fspath(path)
    try:
        relative = os.path.relpath(text)
        text = text if relative.startswith("..") else relative
    except ValueError:  # a NUL byte, or another drive on Windows
        pass
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return text if len(text) <= 120 else text[:58] + "…" + text[-58:]


def _dotted(path: KeyPath) -> str:
    return ".".join(shorten(str(part), 60) for part in path)


def read_toml(path: Path) -> tuple[dict[str, Any], Positions, str]:
    """Parse a TOML file into plain Python data plus the positions of its keys."""
    source = display_path(path)
    try:
        raw = Path(path).read_bytes()
        text = raw.decode("utf-8-sig")  # a BOM (some Windows editors write one) is not content
    except FileNotFoundError:
        raise ConfigError.single(source, "file not found (create one with `gym init`)") from None
    except IsADirectoryError:
        raise ConfigError.single(source, "is a folder, not a gym.toml file") from None
    except PermissionError:
        raise ConfigError.single(source, "cannot be read (permission denied)") from None
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        column = error.start - (raw.rfind(b"\n", 0, error.start) + 1) + 1
        raise ConfigError.single(
            source,
            f"byte 0x{raw[error.start]:02x} is not UTF-8 text; save the file as UTF-8",
            line=line,
            column=column,
        ) from None
    except ValueError:  # "embedded null byte"
        raise ConfigError.single(
            source, "the path contains a NUL character; no file can have that name"
        ) from None
    except OSError as error:  # symlink loop, name too long, I/O error...
        reason = {
            errno.ELOOP: "is a loop of symbolic links (each link points back to another)",
            errno.ENAMETOOLONG: "the file name is too long for the file system",
        }.get(error.errno or 0, f"cannot be read ({(error.strerror or str(error)).lower()})")
        raise ConfigError.single(source, reason) from None
    return parse_toml(text, source)


def parse_toml(text: str, source: str) -> tuple[dict[str, Any], Positions, str]:
    """Parse TOML text; syntax errors become a ConfigError at their line and column."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError([_syntax_issue(str(error), text, source)]) from None
    except RecursionError:
        line, column = _too_deep_in_text(text)
        statement = scan(text).statement_before(line, column)
        key = _dotted(statement[1]) if statement else ""
        raise ConfigError.single(source, too_deep_message(), key=key, line=line, column=column) from None
    positions = scan(text)
    deep = too_deep_in_data(data)
    if deep is not None:
        line, column = positions.find(deep)
        raise ConfigError.single(
            source, too_deep_message(), key=_dotted(deep[:3]) + "...", line=line, column=column
        )
    return data, positions, source


def too_deep_message() -> str:
    return f"values are nested more than {MAX_DEPTH} levels deep; a gym.toml needs only a few"


def _syntax_issue(raw: str, text: str, source: str) -> ConfigIssue:
    """One tomllib error as a sentence at its position, naming the key when the error is about one."""
    match = AT.search(raw)
    message = raw[: match.start()] if match else raw
    if match and match.group(1):
        line, column = int(match.group(1)), int(match.group(2))
    else:  # at the end of the document
        line = text.count("\n") + 1
        column = len(text) - (text.rfind("\n") + 1) + 1
    positions = scan(text)
    statement = positions.statement_before(line, column)
    named = NAMED_KEY.match(message)
    if message == "Cannot overwrite a value" and statement is not None:
        (line, column), path = statement
        first = positions.keys.get(path) or positions.tables.get(path)
        where = f" at line {first[0]}" if first and first[0] != line else ""
        return ConfigIssue(
            source, _dotted(path), f"is set twice (first{where}); set each key once", line, column
        )
    if named is not None:
        try:
            path = tuple(ast.literal_eval(named.group(2)))
        except (ValueError, SyntaxError):
            path = ()
        if statement is not None:
            line, column = statement[0]
        first = positions.keys.get(path) or positions.tables.get(path)
        where = f"line {first[0]}" if first else "earlier"
        if named.group(1) == "Cannot declare":
            sentence = (
                f"table [{_dotted(path)}] is declared twice (first at {where}); declare each table once"
            )
        else:
            sentence = (
                f"is already set at {where} as a value (an array or inline table), so this table header cannot "
                "add to it; write it one way only"
            )
        return ConfigIssue(source, _dotted(path), sentence, line, column)
    return ConfigIssue(source, "", f"TOML syntax error: {message[:1].lower()}{message[1:]}", line, column)


def _too_deep_in_text(text: str) -> tuple[int, int]:
    """Where bracket nesting first passes MAX_DEPTH (strings and comments skipped)."""
    depth = 0
    for token in NESTING_TOKENS.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, token.start()) + 1
                return line, token.start() - (text.rfind("\n", 0, token.start()) + 1) + 1
        elif char in "]}":
            depth = max(depth - 1, 0)
    return 1, 1


def too_deep_in_data(data: Any) -> KeyPath | None:
    """The path of the first value nested deeper than MAX_DEPTH (dotted keys can nest without brackets)."""
    stack: list[tuple[KeyPath, Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if len(path) > MAX_DEPTH:
            return path
        if isinstance(value, dict):
            stack.extend(((*path, key), item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend(((*path, index), item) for index, item in enumerate(value))
    return None
