"""Reading the files of a model folder as untrusted input: bounded in size, regular files only, one sentence.

A model folder handed to `gym export` may come from anywhere (a download, a half-finished copy, a hostile
upload), so nothing in it is trusted before it is read: a symbolic link loop, a FIFO, a 0-byte or
multi-gigabyte ``config.json`` and invalid JSON are each refused with :class:`ExportError`, whose message is
the one sentence the user sees, naming the file.
"""

from __future__ import annotations

import errno
import json
import os
import reprlib
import stat
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 1_000_000  # config.json, generation_config.json: a few kilobytes in practice
MAX_TOKENIZER_BYTES = 64_000_000  # tokenizer.json: Gemma 3's is 33 MB, Llama 3's 9 MB


LOOP = "is a symbolic link loop; replace the link with the file it should point to"


class ExportError(ValueError):
    """What `gym export` reads or writes is not usable; the message is the one sentence the user sees."""


def missing_reason(path: Path) -> str:
    """Why ``path`` cannot be opened, phrased for the user: a link loop, a dangling link, or absent."""
    if path.is_symlink():
        try:
            path.resolve(strict=True)
        except RuntimeError:  # Python < 3.13 reports a loop this way
            return LOOP
        except OSError as error:
            return (
                LOOP if error.errno == errno.ELOOP else "is a symbolic link to nothing; link the file itself"
            )
    return "does not exist"


def _open_regular(path: Path, limit: int) -> tuple[int, int]:
    """An open descriptor of ``path`` and its size, refused unless it is a regular file of at most ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO opens at once, unread
    except OSError as error:
        raise ExportError(f"{path}: {os_reason(path, error)}") from None
    info = os.fstat(fd)
    reason = None
    if stat.S_ISDIR(info.st_mode):
        reason = "is a folder, not a file"
    elif not stat.S_ISREG(info.st_mode):
        reason = "is not a regular file (a pipe, socket or device)"
    elif info.st_size > limit:
        reason = f"is {info.st_size:,} bytes, more than the {limit:,} such a file can sensibly hold"
    if reason is not None:
        os.close(fd)
        raise ExportError(f"{path}: {reason}")
    return fd, info.st_size


def os_reason(path: Path, error: OSError) -> str:
    """An OSError on ``path`` as the user-facing half of a sentence."""
    if error.errno in (errno.ELOOP, errno.ENOENT):
        return missing_reason(path)
    if error.errno == errno.EACCES:
        return "cannot be read (permission denied)"
    return f"cannot be read ({error.strerror or error})"


def read_bytes(path: Path, limit: int, start: int = 0, count: int | None = None) -> tuple[bytes, int]:
    """``count`` bytes of the regular file ``path`` from ``start`` (all of it by default) and its size."""
    fd, size = _open_regular(path, limit)
    try:
        os.lseek(fd, start, os.SEEK_SET)
        want = size - start if count is None else count
        chunks, got = [], 0
        while got < want:
            chunk = os.read(fd, min(want - got, 16 * 1024 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as error:
        raise ExportError(f"{path}: {os_reason(path, error)}") from None
    finally:
        os.close(fd)
    return b"".join(chunks), size


def parse_json(path: Path, data: bytes, what: str = "a JSON object") -> Any:
    """``data`` (the bytes of ``path``) parsed as JSON, or the sentence saying why it is not JSON."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ExportError(f"{path}: is not UTF-8 text; it should hold {what}") from None
    except json.JSONDecodeError as error:
        raise ExportError(
            f"{path}: is not valid JSON ({error.msg} at line {error.lineno} column {error.colno}); "
            f"it should hold {what}"
        ) from None
    except RecursionError:
        raise ExportError(f"{path}: nests its JSON too deeply to read; it should hold {what}") from None


def read_json_object(path: Path, limit: int = MAX_CONFIG_BYTES) -> dict[str, Any]:
    """The JSON object in ``path``: a regular UTF-8 file of at most ``limit`` bytes."""
    data, size = read_bytes(path, limit)
    if size == 0:
        raise ExportError(f"{path}: is empty (0 bytes); it should hold a JSON object")
    value = parse_json(path, data)
    if not isinstance(value, dict):
        raise ExportError(f"{path}: holds a JSON {json_type(value)} where an object is expected")
    return value


def read_optional_json_object(path: Path, limit: int = MAX_CONFIG_BYTES) -> dict[str, Any] | None:
    """:func:`read_json_object`, or None when no such file (nor a link by that name) exists."""
    if not path.exists() and not path.is_symlink():
        return None
    return read_json_object(path, limit)


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for sentences: object, array, string, number, ..."""
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", int: "number", float: "number"}[type(value)]


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 60
_SHOWN.maxlist = _SHOWN.maxdict = 4
_SHOWN.maxlevel = 2


def shown(value: Any) -> str:
    """A value read from a file, quoted for a sentence and cut short: however long or nested it is."""
    return _SHOWN.repr(value)
