"""Rows as Python columns on their way to one Arrow table: the in-process path of `prepare_data`.

Why not ``datasets.map`` for every size: in one process, ``map`` pays per batch for an Arrow
conversion of its inputs back into Python objects, a cache writer and a fingerprint, and the
result is then read back column by column to count skipped rows and filtered with an index mapping
that ``save_to_disk`` has to flatten. Here the converted examples stay Python lists, are tokenized
in large batches (each one fast-tokenizer call, parallel in Rust), the skipped rows are counted and
dropped while still lists, and the kept rows become one Arrow table in a single step (token ids as
one flat int32 buffer plus offsets, never a Python int per token).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gym.data.example import Example
from gym.data.report import BadRow, DataReport
from gym.data.tokenize import KEPT, SKIPPED, TRUNCATED, example_to_row

if TYPE_CHECKING:
    from datasets import Dataset

Columns = dict[str, list[Any]]
TOKEN_COLUMNS = ("input_ids", "labels")
ROW_COLUMNS = tuple(example_to_row(Example()))


def examples_to_columns(examples: Iterable[Example]) -> Columns:
    """The examples as flat, Arrow-friendly columns (see :func:`example_to_row`)."""
    columns: Columns = {name: [] for name in ROW_COLUMNS}
    appends = [columns[name].append for name in ROW_COLUMNS]
    for example in examples:
        for append, value in zip(appends, example_to_row(example).values(), strict=True):
            append(value)
    return columns


def row_count(columns: Columns) -> int:
    return len(next(iter(columns.values()), []))


def map_batches(
    columns: Columns,
    function: Callable[[Columns], Columns],
    batch_size: int,
    progress: Callable[[int], None] | None = None,
    mapper: Callable[..., Iterable[Columns]] = map,
) -> Columns:
    """``function`` applied to consecutive slices of ``columns``; its outputs concatenated in order.

    ``mapper`` runs it over the slices, in order: ``map`` in this thread, a thread pool's ``map`` (worth
    it when ``function`` spends much of its time outside the GIL, as the fast tokenizer does, so one
    batch renders in Python while another is tokenized in Rust) or a process pool's ``imap``.
    """
    out: Columns = {}
    total = row_count(columns)
    starts = range(0, total, batch_size)
    batches = (
        {name: values[start : start + batch_size] for name, values in columns.items()} for start in starts
    )
    for start, result in zip(starts, mapper(function, batches), strict=True):
        for name, values in result.items():
            out.setdefault(name, []).extend(values)
        if progress is not None:
            progress(min(batch_size, total - start))
    return out


def take(columns: Columns, keep: list[int]) -> Columns:
    """The rows at ``keep`` (in order); the same object when every row is kept."""
    if len(keep) == row_count(columns):
        return columns
    return {name: [values[i] for i in keep] for name, values in columns.items()}


def _token_array(values: list[Any]) -> Any:
    """A list<int32> Arrow array from per-row int32 NumPy arrays: one concatenation, no Python ints."""
    import numpy as np
    import pyarrow as pa

    lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(values).astype(np.int32, copy=False) if values else np.zeros(0, np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=pa.int32()))


def to_dataset(columns: Columns, fingerprint: str) -> Dataset:
    """One in-memory `datasets.Dataset` from the columns (types inferred by Arrow as `datasets` does).

    ``fingerprint`` names the rows for `datasets`' own caching; given, it spares hashing every value.
    """
    import pyarrow as pa
    from datasets import Dataset
    from datasets.table import InMemoryTable

    arrays = {
        name: _token_array(values) if name in TOKEN_COLUMNS else pa.array(values)
        for name, values in columns.items()
    }
    return Dataset(InMemoryTable(pa.table(arrays)), fingerprint=fingerprint)


def arrow_columns(dataset: Dataset, *names: str) -> list[list[Any]]:
    """Whole columns as Python lists, straight from Arrow (``dataset[name]`` formats row by row)."""
    table = dataset.with_format("arrow")[:]
    return [table.column(name).to_pylist() for name in names]


def account(
    statuses: list[str],
    sources: list[str],
    indices: list[int],
    full: list[int],
    reports: dict[str, DataReport],
) -> tuple[list[int], int, dict[str, list[int]]]:
    """Count skipped and bad rows into their dataset's report (``sources`` name the dataset of each row).

    Returns the positions of the kept rows, how many were truncated, and per dataset the whole length
    of every row measured (kept or skipped as too long): what ``max_length`` would need to be to keep
    them whole.
    """
    truncated = 0
    lengths: dict[str, list[int]] = {}
    keep: list[int] = []
    for position, (status, source, index, length) in enumerate(
        zip(statuses, sources, indices, full, strict=True)
    ):
        if status in KEPT:
            keep.append(position)
            lengths.setdefault(source, []).append(length)
            truncated += status == TRUNCATED
        elif status in SKIPPED:
            lengths.setdefault(source, []).append(length)
            reports[source].add_skipped(index, status)
        else:
            reason, _, detail = status.partition(": ")
            reports[source].add_bad(index, BadRow(reason, detail))
            reports[source].rows_kept -= 1
    return keep, truncated, lengths


def kept_rows(
    tokenized: Columns | Dataset, reports: dict[str, DataReport], fingerprint: str
) -> tuple[Dataset, int, dict[str, list[int]]]:
    """The kept rows as one Dataset, how many were truncated, and the measured lengths (see :func:`account`)."""
    names = ("status", "source", "index", "full_length")
    if isinstance(tokenized, dict):
        keep, truncated, lengths = account(*(tokenized[name] for name in names), reports)
        return to_dataset(take(tokenized, keep), fingerprint), truncated, lengths
    keep, truncated, lengths = account(*arrow_columns(tokenized, *names), reports)
    return (tokenized if len(keep) == len(tokenized) else tokenized.select(keep)), truncated, lengths
