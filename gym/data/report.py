"""What happened to a dataset's rows on the way in: how many were read, kept, and why the rest were not.

Bad rows are never dropped silently. Converters raise :class:`BadRow` for a row they cannot turn into
an :class:`~gym.data.example.Example`; the loader counts them by reason in a :class:`DataReport`, keeps
a few examples of each so the user can find them in the file, and fails the run with a
:class:`DataError` only when too much of the dataset is unusable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gym.failures import printable

EXAMPLES_PER_REASON = 3
# What to do about a bad-row reason, added to the error when it is among the reasons.
HINTS = {
    "not UTF-8 text": "save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
    "broken JSON line": "each line of a .jsonl file must be one JSON object",
}


class DataError(Exception):
    """A dataset cannot be used at all; the message is one sentence naming the dataset and file."""


class BadRow(Exception):
    """One row cannot be converted.

    ``reason`` is a short category that rows are counted by ("missing field", "wrong role order", ...);
    ``detail`` says what exactly was wrong in this row, so the category counts stay readable.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass
class BadExample:
    """Where one bad row is, so the user can open the file at it."""

    file: str
    index: int
    reason: str
    detail: str = ""

    def __str__(self) -> str:
        where = f"{self.file} row {self.index}"
        return f"{where}: {self.reason}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class DataReport:
    """Counts for one dataset: rows read, rows kept, and bad rows by reason with a few examples each."""

    dataset: str
    file: str
    rows_read: int = 0
    rows_kept: int = 0
    bad: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[BadExample]] = field(default_factory=dict)
    # Rows left out for a setting rather than a data fault (longer than max_length): counted and shown,
    # but not held against max_bad_fraction.
    skipped: dict[str, int] = field(default_factory=dict)
    # The p95 of the rows' whole tokenized lengths (before any exchange was dropped), skipped rows
    # included: the max_length that would keep 95% of them whole.
    length_p95: int = 0

    @property
    def rows_bad(self) -> int:
        return sum(self.bad.values())

    @property
    def bad_fraction(self) -> float:
        return self.rows_bad / self.rows_read if self.rows_read else 0.0

    def add_bad(self, index: int, error: BadRow) -> None:
        """Count one bad row and keep it as an example while its reason has fewer than three."""
        self.bad[error.reason] = self.bad.get(error.reason, 0) + 1
        kept = self.examples.setdefault(error.reason, [])
        if len(kept) < EXAMPLES_PER_REASON:
            kept.append(BadExample(self.file, index, error.reason, error.detail))

    def add_skipped(self, index: int, reason: str, detail: str = "") -> None:
        """Count one row left out because of a setting (e.g. longer than max_length), with examples."""
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.rows_kept -= 1
        kept = self.examples.setdefault(reason, [])
        if len(kept) < EXAMPLES_PER_REASON:
            kept.append(BadExample(self.file, index, reason, detail))

    def first_example(self) -> BadExample | None:
        """The example of the most common reason, to quote in a one-sentence error."""
        if not self.bad:
            return None
        reason = max(self.bad, key=lambda r: self.bad[r])
        return self.examples[reason][0]

    def check(self, max_bad_fraction: float) -> None:
        """Raise DataError when no row survived or more than ``max_bad_fraction`` of them are bad."""
        example = self.first_example()
        hint = f"; e.g. {example}" if example else ""
        if self.rows_read and not self.rows_kept:
            skipped = ", ".join(f"{n} {reason}" for reason, n in self.skipped.items())
            raise DataError(
                f"dataset {self.dataset!r} ({self.file}): none of the {self.rows_read} rows is usable "
                f"({', '.join(filter(None, [self.reasons_text(), skipped]))}){hint}; "
                + ("raise train.max_length or " if self.skipped else "")
                + "check the format, columns and tags settings"
                + "".join(f"; {text}" for reason, text in HINTS.items() if reason in self.bad)
            )
        if self.bad_fraction > max_bad_fraction:
            advice = "".join(f"; {text}" for reason, text in HINTS.items() if reason in self.bad)
            raise DataError(
                f"dataset {self.dataset!r} ({self.file}): {self.rows_bad} of {self.rows_read} rows are bad "
                f"({self.bad_fraction:.1%} > max_bad_fraction {max_bad_fraction:.1%}; {self.reasons_text()})"
                f"{hint}{advice}"
            )

    @property
    def rows_skipped(self) -> int:
        return sum(self.skipped.values())

    @property
    def skipped_fraction(self) -> float:
        return self.rows_skipped / self.rows_read if self.rows_read else 0.0

    def check_skipped(self, max_skipped_fraction: float, limit: str, fits_p95: int | None) -> None:
        """Raise DataError when more than ``max_skipped_fraction`` of the rows would be left out as too long.

        ``limit`` names the length they exceed (``max_length = 128``); ``fits_p95`` is the length that 95%
        of the rows need whole, the value to raise it to.
        """
        if self.skipped_fraction <= max_skipped_fraction:
            return
        needed = f" (95% of its rows fit in {fits_p95} tokens)" if fits_p95 else ""
        raise DataError(
            f"dataset {self.dataset!r} ({self.file}): {self.rows_skipped} of {self.rows_read} rows "
            f"({self.skipped_fraction:.1%}) are longer than {limit} even without their older turns and "
            f"would be skipped, more than max_skipped_fraction = {max_skipped_fraction:g}; raise "
            f"train.max_length{needed}, or set max_skipped_fraction = "
            f"{min(1.0, round(self.skipped_fraction + 0.005, 2)):g} in this [[datasets]] entry to train on the "
            f"{self.rows_read - self.rows_skipped - self.rows_bad} rows that fit"
        )

    def reasons_text(self) -> str:
        return ", ".join(
            f"{count} {reason}" for reason, count in sorted(self.bad.items(), key=lambda kv: -kv[1])
        )

    def summary(self) -> str:
        """Plain-text summary: one line of counts, then one line per reason with its examples."""
        lines = [
            f"{self.dataset}: {self.rows_kept} of {self.rows_read} rows kept, {self.rows_bad} bad ({self.file})"
        ]
        for reason, count in sorted({**self.bad, **self.skipped}.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {count} x {reason}")
            lines.extend(f"    {example}" for example in self.examples.get(reason, []))
        return "\n".join(lines)

    def __rich__(self) -> object:
        """A table for `gym data preview`; rich is imported here so the report stays cheap to import."""
        from rich.table import Table
        from rich.text import Text

        title = Text(printable(f"{self.dataset}: {self.rows_kept}/{self.rows_read} rows kept"))
        table = Table(title=title, caption=Text(printable(self.file)), show_lines=False)
        table.add_column("rows left out", justify="right")
        table.add_column("reason")
        table.add_column("first examples (row: detail)")
        for reason, count in sorted({**self.bad, **self.skipped}.items(), key=lambda kv: -kv[1]):
            shown = "\n".join(
                f"{e.index}: {e.detail}" if e.detail else str(e.index) for e in self.examples[reason]
            )
            table.add_row(str(count), Text(printable(reason)), Text(printable(shown)))
        if not self.bad and not self.skipped:
            table.add_row("0", "no bad rows", "")
        return table


def summary_text(data: dict[str, Any]) -> str:
    """The one-line data summary from :meth:`~gym.data.prepare.PreparedData.summary` (also read back from train_results.json)."""
    if not data:
        return ""
    share = f" ({data.get('skipped_share', 0.0):.1%})" if data.get("rows_skipped") else ""
    held = f", {data['rows_held_out']:,} held out" if data.get("rows_held_out") else ""
    return (
        f"{data.get('rows_read', 0):,} rows read: {data.get('rows_trained', 0):,} trained{held}, "
        f"{data.get('rows_truncated', 0):,} truncated (oldest turns dropped), "
        f"{data.get('rows_skipped', 0):,} skipped as too long{share}, {data.get('rows_bad', 0):,} bad; "
        f"p95 length {data.get('length_p95', 0):,} tokens vs max_length {data.get('max_length', 0):,}"
    )
