"""Tokenizing in worker processes (``num_proc``): shards of columns out, tokenized columns back.

Why not ``datasets.map(num_proc=...)``: it turns the rows into an Arrow table for the workers, each
worker writes its shard to an Arrow cache file, the parent reads and concatenates those files and
then filters and saves them again, which made 2 workers slower than one process on alpaca x4. Here each worker receives a slice of the Python columns (a few MB of JSON text), runs the
same :func:`~gym.data.tokenize.tokenize_batch` as the in-process path, and sends back the tokenized
columns with token ids as int32 NumPy arrays (pickled as raw buffers). The parent keeps the order,
counts the rows and builds one Arrow table, exactly as in one process, so the result does not
depend on the number of workers.

Each worker tokenizes with one Rust thread (``TOKENIZERS_PARALLELISM=false`` in the worker): the
processes already fill the cores, and more threads than cores only add switching.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from typing import Any

from gym.data.columns import Columns, map_batches
from gym.data.tokenize import TokenizeSettings, tokenize_batch

_STATE: dict[str, Any] = {}


def _start(tokenizer: Any, settings: TokenizeSettings) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _STATE.update(tokenizer=tokenizer, settings=settings)


def _tokenize_shard(shard: Columns) -> Columns:
    return tokenize_batch(shard, tokenizer=_STATE["tokenizer"], settings=_STATE["settings"])


def tokenize_in_workers(
    columns: Columns,
    tokenizer: Any,
    settings: TokenizeSettings,
    workers: int,
    shard_size: int,
    progress: Callable[[int], None] | None = None,
) -> Columns:
    """:func:`tokenize_batch` over ``columns`` in ``workers`` processes; outputs in input order."""
    with multiprocessing.get_context().Pool(workers, _start, (tokenizer, settings)) as pool:
        return map_batches(columns, _tokenize_shard, shard_size, progress, pool.imap)
