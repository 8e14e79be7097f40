"""The built-in string-reversal dataset: a task the tiny model can visibly learn in minutes on a CPU.

Rows are alpaca (``Reverse: g a e`` -> ``e a g``), with letters spaced so each is its own token for
the built-in tokenizer. The held-out split is fixed by a hash of the word, not by the seed, so no
seed, size or order of calls can ever put a test word into the training rows: an evaluation on
``test`` measures generalisation, not recall.
"""

from __future__ import annotations

import hashlib
import json
import random
import string
from pathlib import Path
from typing import Literal

Split = Literal["train", "test"]
HELD_OUT_BUCKETS = 10  # one word in ten belongs to the test split
MAX_ATTEMPTS_PER_ROW = 200


def is_held_out(word: str) -> bool:
    """Whether ``word`` belongs to the test split (about 1 in :data:`HELD_OUT_BUCKETS`), by its SHA-256."""
    return int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % HELD_OUT_BUCKETS == 0


def reverse_row(word: str) -> dict[str, str]:
    """The alpaca row that asks to reverse ``word``."""
    return {"instruction": "Reverse: " + " ".join(word), "input": "", "output": " ".join(reversed(word))}


def reverse_rows(
    split: Split = "train",
    n: int = 1000,
    seed: int = 0,
    min_len: int = 3,
    max_len: int = 8,
) -> list[dict[str, str]]:
    """``n`` distinct reversal rows of ``split``, the same for the same arguments on every machine."""
    if split not in ("train", "test"):
        raise ValueError(f"expected split 'train' or 'test', got {split!r}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"expected 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    # A separate stream per split, so asking for more test rows never changes the training rows.
    rng = random.Random(f"gym-reverse:{split}:{seed}")
    want_held_out = split == "test"
    seen: set[str] = set()
    rows: list[dict[str, str]] = []
    attempts = 0
    while len(rows) < n:
        attempts += 1
        if attempts > MAX_ATTEMPTS_PER_ROW * max(n, 1):
            raise ValueError(
                f"cannot draw {n} distinct {split} words of {min_len}-{max_len} letters; ask for fewer rows"
            )
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(min_len, max_len)))
        if word in seen or is_held_out(word) != want_held_out:
            continue
        seen.add(word)
        rows.append(reverse_row(word))
    return rows


def write_reverse_dataset(
    folder: str | Path, n_train: int = 1000, n_test: int = 100, seed: int = 0
) -> dict[str, Path]:
    """Write ``train.jsonl`` and ``test.jsonl`` into ``folder``; returns ``{"train": path, "test": path}``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, n in (("train", n_train), ("test", n_test)):
        path = folder / f"{split}.jsonl"
        lines = [json.dumps(row, ensure_ascii=False) for row in reverse_rows(split, n, seed)]  # type: ignore[arg-type]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        paths[split] = path
    return paths
