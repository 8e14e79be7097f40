"""Guess a local dataset file's row format from its first record, without importing `datasets`.

Used when a dataset is named only by path on the command line (``--dataset data/rows.jsonl``).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

SNIFFABLE = (".json", ".jsonl", ".csv")


class SniffError(ValueError):
    """The format could not be told from the file; the message says what to do instead."""


def first_record(path: Path) -> dict[str, Any]:
    """The first row of a .json/.jsonl/.csv file (or of the first such file in a folder)."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SNIFFABLE)
        if not files:
            raise SniffError(f"{path} has no .json, .jsonl or .csv file to detect the format from")
        path = files[0]
    if path.suffix not in SNIFFABLE:
        raise SniffError(f"cannot detect the row format of {path.name}; set format in gym.toml")
    with path.open(encoding="utf-8") as handle:
        if path.suffix == ".csv":
            row = next(csv.DictReader(handle), None)
        elif path.suffix == ".jsonl":
            line = next((line for line in handle if line.strip()), "")
            row = json.loads(line) if line else None
        else:
            data = json.load(handle)
            row = data[0] if isinstance(data, list) and data else data if isinstance(data, dict) else None
    if not isinstance(row, dict):
        raise SniffError(f"{path.name} has no rows (expected JSON objects) to detect the format from")
    return row


def format_of(row: dict[str, Any]) -> str:
    """The gym.toml ``format`` name that fits a row's keys."""
    keys = set(row)
    if {"chosen", "rejected"} <= keys:
        return "preference"
    if "label" in keys and isinstance(row["label"], bool):
        return "kto"
    for column in ("conversations", "messages"):
        turns = row.get(column)
        if isinstance(turns, list) and turns and isinstance(turns[0], dict):
            return "openai" if "role" in turns[0] else "sharegpt"
    if {"instruction", "output"} <= keys:
        return "alpaca"
    if "prompt" in keys and keys & {"answer", "solution", "reference", "completion"}:
        return "prompt"
    if "text" in keys:
        return "text"
    raise SniffError(f"cannot tell the row format from its keys {sorted(keys)}; set format in gym.toml")


def sniff_format(path: Path) -> str:
    """Format name of the dataset at ``path``; raises SniffError with a clear sentence otherwise."""
    try:
        return format_of(first_record(path))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SniffError(f"cannot read {path}: {error}") from None
