"""Where each key and value of a TOML document sits (line, column), for error messages.

The TOML parser (``tomllib``) does not record positions, so this small scanner walks the same text
and records, for every dotted path
(``("datasets", 0, "format")``), where its key and its value start. Array elements and inline-table
entries are recorded too, so ``accelerators = ["A100:1", "A100:x"]`` points at the second item.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

Path = tuple[str | int, ...]
BASIC_BODY = re.compile(r'[^"\\\n]*(?:\\.[^"\\\n]*)*')  # up to the closing quote, escapes skipped
LITERAL_BODY = re.compile(r"[^'\n]*")
BARE_KEY = re.compile(r"[A-Za-z0-9_-]*")


@dataclass
class Positions:
    """1-based (line, column) of keys, values and table headers, by path."""

    keys: dict[Path, tuple[int, int]] = field(default_factory=dict)
    values: dict[Path, tuple[int, int]] = field(default_factory=dict)
    tables: dict[Path, tuple[int, int]] = field(default_factory=dict)
    statements: list[tuple[tuple[int, int], Path]] = field(default_factory=list)
    """Every key/value and table header in document order: (position, path), repeats included."""

    def find(self, path: Path) -> tuple[int, int]:
        """Position of the value at ``path``, else of its key, else of the nearest enclosing table."""
        probe = tuple(path)
        while probe:
            for table in (self.values, self.keys, self.tables):
                if probe in table:
                    return table[probe]
            probe = probe[:-1]
        return (1, 1)

    def find_key(self, path: Path) -> tuple[int, int]:
        """Position of the key itself (for 'unknown key' errors), falling back to :meth:`find`."""
        return self.keys.get(tuple(path)) or self.tables.get(tuple(path)) or self.find(path)

    def statement_before(self, line: int, column: int) -> tuple[tuple[int, int], Path] | None:
        """The last key/value or table header starting at or before (line, column), if any."""
        index = bisect.bisect_right(self.statements, (line, column), key=lambda statement: statement[0]) - 1
        return self.statements[index] if index >= 0 else None


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.line_starts = [0] + [match.end() for match in re.finditer("\n", text)]
        self.out = Positions()
        self.array_tables: dict[Path, int] = {}
        self.table: Path = ()

    # -- helpers -------------------------------------------------------------------------------
    def at(self, index: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, index) - 1
        return line + 1, index - self.line_starts[line] + 1

    def peek(self, n: int = 1) -> str:
        return self.text[self.i : self.i + n]

    def skip_space(self, newlines: bool = False) -> None:
        while self.i < len(self.text):
            ch = self.text[self.i]
            if ch in " \t\r" or (newlines and ch == "\n"):
                self.i += 1
            elif ch == "#":
                while self.i < len(self.text) and self.text[self.i] != "\n":
                    self.i += 1
            else:
                return

    def skip_line(self) -> None:
        while self.i < len(self.text) and self.text[self.i] != "\n":
            self.i += 1

    # -- keys ----------------------------------------------------------------------------------
    def read_key(self) -> list[tuple[str, int]]:
        parts: list[tuple[str, int]] = []
        while True:
            self.skip_space()
            start = self.i
            ch = self.peek()
            if ch in ('"', "'"):
                parts.append((self.read_string(), start))
            else:
                self.i = BARE_KEY.match(self.text, self.i).end()
                parts.append((self.text[start : self.i], start))
            self.skip_space()
            if self.peek() != ".":
                return parts
            self.i += 1

    def read_string(self) -> str:
        quote = self.peek()
        if self.peek(3) == quote * 3:
            self.i += 3
            end = self.text.find(quote * 3, self.i)
            while quote == '"' and end > 0 and self._escaped(end):
                end = self.text.find(quote * 3, end + 1)
            end = len(self.text) if end < 0 else end
            while self.text[end + 3 : end + 4] == quote:  # up to two quotes may close the body
                end += 1
            value, self.i = self.text[self.i : end], end + 3
            return value
        self.i += 1
        start = self.i
        self.i = (BASIC_BODY if quote == '"' else LITERAL_BODY).match(self.text, self.i).end()
        value = self.text[start : self.i]
        self.i += 1
        return (
            value.encode().decode("unicode_escape", errors="ignore")
            if quote == '"' and "\\" in value
            else value
        )

    def _escaped(self, index: int) -> bool:
        backslashes = 0
        while index - backslashes - 1 >= 0 and self.text[index - backslashes - 1] == "\\":
            backslashes += 1
        return backslashes % 2 == 1

    # -- values --------------------------------------------------------------------------------
    def read_value(self, path: Path) -> None:
        self.out.values.setdefault(path, self.at(self.i))
        ch = self.peek()
        if ch in ('"', "'"):
            self.read_string()
        elif ch == "[":
            self.i += 1
            index = 0
            while True:
                self.skip_space(newlines=True)
                if self.peek() in ("]", ""):
                    self.i += 1
                    return
                before = self.i
                self.read_value((*path, index))
                index += 1
                self.skip_space(newlines=True)
                if self.peek() == "," or self.i == before:
                    self.i += 1
        elif ch == "{":
            self.i += 1
            while True:
                self.skip_space()
                if self.peek() in ("}", "", "\n"):
                    self.i += 1
                    return
                before = self.i
                self.read_keyval(path)
                self.skip_space()
                if self.peek() == "," or self.i == before:
                    self.i += 1
        else:
            while self.i < len(self.text) and self.text[self.i] not in ",]}\n#":
                self.i += 1

    def read_keyval(self, prefix: Path) -> None:
        parts = self.read_key()
        path = prefix
        for name, start in parts:
            path = (*path, name)
            self.out.keys.setdefault(path, self.at(start))
        if not prefix or prefix == self.table:  # a statement, not a key inside an inline table
            self.out.statements.append((self.at(parts[0][1]), path))
        self.skip_space()
        if self.peek() == "=":
            self.i += 1
            self.skip_space()
            self.read_value(path)

    # -- tables --------------------------------------------------------------------------------
    def resolve(self, parts: list[tuple[str, int]]) -> Path:
        path: Path = ()
        for name, _ in parts:
            path = (*path, name)
            if path in self.array_tables:
                path = (*path, self.array_tables[path])
        return path

    def read_header(self) -> Path:
        start = self.i
        is_array = self.peek(2) == "[["
        self.i += 2 if is_array else 1
        parts = self.read_key()
        self.i += 2 if is_array else 1
        if is_array:
            base = self.resolve(parts[:-1]) + (parts[-1][0],)
            index = self.array_tables.get(base, -1) + 1
            self.array_tables[base] = index
            self.out.tables.setdefault(base, self.at(start))
            path: Path = (*base, index)
        else:
            path = self.resolve(parts)
        self.out.tables.setdefault(path, self.at(start))
        self.out.statements.append((self.at(start), path))
        for depth in range(1, len(path)):
            self.out.tables.setdefault(path[:depth], self.at(start))
        return path

    def run(self) -> Positions:
        prefix: Path = ()
        while True:
            self.skip_space(newlines=True)
            if self.i >= len(self.text):
                return self.out
            if self.peek() == "[":
                prefix = self.table = self.read_header()
            else:
                self.read_keyval(prefix)
            self.skip_line()


def scan(text: str) -> Positions:
    """Positions of every key/value in ``text`` (best effort on text that is not valid TOML)."""
    scanner = _Scanner(text)
    try:
        return scanner.run()
    except (IndexError, ValueError, RecursionError):  # never let a locator problem hide the real error
        return scanner.out
