"""Local data files checked before `datasets` reads them, and JSON Lines salvaged line by line when it cannot.

`datasets` reads every file Gym trains on; this module only makes its failures speak. Everything a
file system can hand over instead of a readable file (a path that loops through symbolic links, a
FIFO, a name too long, a file without read permission) becomes one sentence naming the file before
any reading starts. Text files are checked to be UTF-8 (pyarrow accepts other bytes and fails later,
deep inside row access). Parquet files are checked to be Parquet, and to hold rows, from their footer.

Small JSON and JSON Lines files (:data:`SMALL_JSON_BYTES` in all) are read with the json module
instead (:func:`read_small_json`): `datasets` would build and cache an Arrow table first, which costs
more than the whole of tokenizing a thousand rows; the rows then reach the same converters.

A JSON Lines file that `datasets` refuses as a whole (one broken line, one line in another encoding)
is read again line by line here, so that each line that is not a JSON object counts as one bad row
with its line number, and the rest of the file is still trained on, within ``max_bad_fraction``.
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym.data.report import BadRow, DataError

TEXT_BUILDERS = ("json", "csv")
# Up to this many bytes of JSON are parsed by the json module (a few times their size in Python objects);
# larger data goes through `datasets`, memory-mapped from its Arrow cache.
SMALL_JSON_BYTES = 16 << 20
BLOCK = 1 << 20


def path_problem(path: Path) -> str | None:
    """Why ``path`` cannot be opened as a dataset (does not exist, loops, too long...), or None."""
    try:
        os.stat(path)
    except ValueError:  # an embedded NUL character
        return "is not a valid path (it contains a NUL character)"
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "is a symbolic link that loops back on itself (a symlink loop)"
        if error.errno == errno.ENAMETOOLONG:
            return "is too long a path for this file system"
        if error.errno == errno.ENOENT and os.path.islink(path):
            return f"is a broken symbolic link (to {os.readlink(path)}, which does not exist)"
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            return "does not exist"
        return f"cannot be opened ({error.strerror or error})"
    return None


def file_problem(path: Path) -> str | None:
    """Why the dataset file ``path`` cannot be read (not a regular file, unreadable, empty), or None."""
    problem = path_problem(path)
    if problem is not None:
        return problem
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        return f"is {kind}, not a regular file"
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if os.stat(path).st_size == 0:
        return "is empty"
    return None


def utf8_problem(path: Path) -> str | None:
    """Where ``path`` stops being UTF-8 text (line and column of the first bad byte), or None."""
    with open(path, "rb") as handle:
        head = handle.read(4)
        if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            return "is UTF-16 text (it starts with a UTF-16 byte-order mark), not UTF-8"
        handle.seek(0)
        decoder = codecs.getincrementaldecoder("utf-8")()
        line, column = 1, 1
        for block in iter(lambda: handle.read(BLOCK), b""):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as error:
                where = block[: max(0, error.start)]
                newline = where.rfind(b"\n")
                line += where.count(b"\n")
                column = len(where) - newline if newline >= 0 else column + len(where)
                bad = block[error.start] if 0 <= error.start < len(block) else 0
                return f"is not UTF-8 text (byte 0x{bad:02x} at line {line}, column {column})"
            newline = block.rfind(b"\n")
            line += block.count(b"\n")
            column = len(block) - newline if newline >= 0 else column + len(block)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return "is not UTF-8 text (it ends in the middle of a character)"
    return None


def check_parquet(path: Path) -> int:
    """The row count in a Parquet file's footer; DataError-ready text when it is not Parquet."""
    import pyarrow.parquet as pq

    try:
        return int(pq.read_metadata(path).num_rows)
    except Exception as error:  # pyarrow raises ArrowInvalid / OSError for a damaged footer
        raise ValueError(
            f"is not a readable Parquet file ({str(error).strip() or type(error).__name__})"
        ) from None


@dataclass
class SalvagedRows:
    """The rows of JSON Lines files read line by line: (row index, object) and (row index, BadRow)."""

    rows: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    bad: list[tuple[int, BadRow]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows) + len(self.bad)

    def head(self, count: int) -> SalvagedRows:
        """The first ``count`` rows of the file(s), good and bad, as ``max_samples`` reads them."""
        return SalvagedRows([r for r in self.rows if r[0] < count], [b for b in self.bad if b[0] < count])


def _line_row(raw: bytes, number: int) -> dict[str, Any] | BadRow:
    """One JSON Lines line as an object, or the BadRow saying why it is not one (with its line number)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return BadRow(
            "not UTF-8 text", f"line {number}: byte 0x{raw[error.start]:02x} at column {error.start + 1}"
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return BadRow("broken JSON line", f"line {number}: {error.msg} (column {error.colno})")
    except RecursionError:
        return BadRow("broken JSON line", f"line {number}: nested too deeply")
    if not isinstance(value, dict):
        return BadRow("not a JSON object", f"line {number} is a JSON {type(value).__name__}, not an object")
    return value


def salvage_json_lines(files: list[str]) -> SalvagedRows:
    """Every non-blank line of ``files`` as an object or a bad row; row indices count non-blank lines."""
    salvaged = SalvagedRows()
    index = 0
    for file in files:
        with open(file, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if number == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8) :]
                if not raw.strip():
                    continue
                result = _line_row(raw.strip(), number)
                if isinstance(result, BadRow):
                    if len(files) > 1:
                        result.detail = f"{Path(file).name} {result.detail}"
                    salvaged.bad.append((index, result))
                else:
                    salvaged.rows.append((index, result))
                index += 1
    return salvaged


def read_small_json(files: list[str]) -> SalvagedRows | None:
    """The rows of small JSON / JSON Lines files, or None: let `datasets` read them (too big, or not an
    array of objects, whose errors `datasets` then words as for any file)."""
    if sum(os.path.getsize(file) for file in files) > SMALL_JSON_BYTES:
        return None
    if all(file.endswith(".jsonl") for file in files):
        return salvage_json_lines(files)
    rows: list[tuple[int, dict[str, Any]]] = []
    for file in files:
        try:
            with open(file, encoding="utf-8-sig") as handle:
                values = json.load(handle)
        except (ValueError, RecursionError):  # not one JSON document (perhaps JSON Lines named .json)
            return None
        if not isinstance(values, list) or not all(isinstance(value, dict) for value in values):
            return None
        rows += [(len(rows) + i, value) for i, value in enumerate(values)]
    return SalvagedRows(rows)


def checked_files(name: str, builder: str, files: list[Path]) -> bool:
    """Raise a one-sentence DataError when a file is not what its builder reads (encoding, Parquet).

    Returns whether JSON Lines files hold lines that are not UTF-8: those are then read line by line,
    each such line a bad row, rather than failing the whole file.
    """
    salvage = False
    for file in files:
        if builder in TEXT_BUILDERS:
            problem = utf8_problem(file)
            if problem is not None and file.suffix == ".jsonl" and "UTF-16" not in problem:
                salvage = True
            elif problem is not None:
                raise DataError(
                    f"dataset {name!r}: file {file} {problem}; save it as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
                )
        if builder == "parquet":
            try:
                check_parquet(file)
            except ValueError as error:
                raise DataError(f"dataset {name!r}: file {file} {error}") from None
    if builder == "parquet" and sum(check_parquet(file) for file in files) == 0:
        where = files[0] if len(files) == 1 else f"{files[0].parent} ({len(files)} files)"
        raise DataError(f"dataset {name!r}: file {where} has no rows")
    return salvage and all(file.suffix == ".jsonl" for file in files)
