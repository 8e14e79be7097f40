"""The built-in reversal dataset: deterministic, well-formed alpaca rows, and a test split never trained on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gym.data.builtin_datasets import is_held_out, reverse_rows, write_reverse_dataset


def word_of(row: dict[str, str]) -> str:
    return row["instruction"].removeprefix("Reverse: ").replace(" ", "")


def test_rows_are_alpaca_reversals_of_3_to_8_letters() -> None:
    rows = reverse_rows("train", 300)
    assert len(rows) == 300
    for row in rows:
        assert set(row) == {"instruction", "input", "output"} and row["input"] == ""
        letters = row["instruction"].removeprefix("Reverse: ").split(" ")
        assert 3 <= len(letters) <= 8 and all(len(c) == 1 and c.islower() for c in letters)
        assert row["output"].split(" ") == letters[::-1]
    assert {len(word_of(r)) for r in rows} == set(range(3, 9))
    assert len({word_of(r) for r in rows}) == len(rows)


def test_deterministic_per_seed_and_across_processes() -> None:
    assert reverse_rows("train", 50, seed=1) == reverse_rows("train", 50, seed=1)
    assert reverse_rows("train", 50, seed=1) != reverse_rows("train", 50, seed=2)
    assert reverse_rows("train", 50)[:20] == reverse_rows("train", 20)  # more rows extend, never reshuffle
    code = "from gym.data.builtin_datasets import reverse_rows; import json; print(json.dumps(reverse_rows('test', 5)))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "123"},
    )
    assert json.loads(out.stdout) == reverse_rows("test", 5)


def test_splits_never_overlap_whatever_the_seed() -> None:
    test_words = {word_of(r) for seed in range(3) for r in reverse_rows("test", 300, seed=seed)}
    train_words = {word_of(r) for seed in range(3) for r in reverse_rows("train", 2000, seed=seed)}
    assert test_words and train_words and not test_words & train_words
    assert all(is_held_out(w) for w in test_words) and not any(is_held_out(w) for w in train_words)


def test_custom_lengths_and_bad_arguments() -> None:
    assert {len(word_of(r)) for r in reverse_rows("train", 40, min_len=2, max_len=2)} == {2}
    with pytest.raises(ValueError, match="expected split 'train' or 'test'"):
        reverse_rows("validation", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot draw 1000 distinct test words of 1-1 letters"):
        reverse_rows("test", 1000, min_len=1, max_len=1)


def test_write_reverse_dataset(tmp_path: Path) -> None:
    paths = write_reverse_dataset(tmp_path / "reverse", n_train=30, n_test=10, seed=3)
    assert paths == {
        "train": tmp_path / "reverse" / "train.jsonl",
        "test": tmp_path / "reverse" / "test.jsonl",
    }
    train = [json.loads(line) for line in paths["train"].read_text().splitlines()]
    test = [json.loads(line) for line in paths["test"].read_text().splitlines()]
    assert train == reverse_rows("train", 30, seed=3) and test == reverse_rows("test", 10, seed=3)
    first = paths["train"].read_bytes()
    write_reverse_dataset(tmp_path / "reverse", n_train=30, n_test=10, seed=3)
    assert paths["train"].read_bytes() == first


def test_written_files_load_through_the_data_layer_as_alpaca(tmp_path: Path) -> None:
    from gym.config.sections import DatasetConfig
    from gym.data.loading import load_examples

    write_reverse_dataset(tmp_path, n_train=20, n_test=5)
    examples, report = load_examples(DatasetConfig(path="train.jsonl", format="alpaca"), tmp_path)
    assert report.rows_kept == report.rows_read == 20
    first = reverse_rows("train", 1)[0]
    assert [m.content for m in examples[0].messages] == [first["instruction"], first["output"]]
