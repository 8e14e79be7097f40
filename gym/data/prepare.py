"""`prepare_data`: every ``[[datasets]]`` entry loaded, converted, templated, tokenized and masked.

The one entry point trainers and `gym data preview` use. Tokenization runs through
``datasets.map(batched=True)`` on both cores for larger datasets, and the result is cached (see
:mod:`gym.data.cache`): a second run with the same data, tokenizer, template and ``max_length`` loads
the prepared rows from disk without reading or converting anything.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.data.cache import DONE, cache_key, cache_root, source_fingerprint, tokenizer_fingerprint, write_entry
from gym.data.loading import load_examples, local_path, split_eval
from gym.data.report import BadExample, BadRow, DataReport
from gym.data.templates import apply_template, probe_end_of_turn
from gym.data.tokenize import KEPT, TOO_LONG, TRUNCATED, TokenizeSettings, example_to_row, tokenize_batch

if TYPE_CHECKING:
    from datasets import Dataset

    from gym.config import GymConfig

PARALLEL_FROM_ROWS = 2000  # below this, starting worker processes costs more than it saves


@dataclass
class TokenStats:
    """Token statistics of the kept training rows."""

    rows: int = 0
    truncated: int = 0
    p50: int = 0
    p95: int = 0
    max: int = 0
    loss_tokens: int = 0
    tokens: int = 0

    @classmethod
    def of(cls, lengths: list[int], loss_tokens: int, truncated: int) -> TokenStats:
        ordered = sorted(lengths)

        def pick(q: float) -> int:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0

        return cls(
            len(ordered),
            truncated,
            pick(0.5),
            pick(0.95),
            ordered[-1] if ordered else 0,
            loss_tokens,
            sum(ordered),
        )


@dataclass
class PreparedData:
    """Tokenized train (and held-out eval) rows, with what happened to every input row."""

    train: Dataset
    eval: Dataset | None
    reports: list[DataReport]
    stats: TokenStats
    cache_dir: Path
    from_cache: bool = False
    settings: dict[str, Any] = field(default_factory=dict)


def _key_parts(config: GymConfig, tokenizer: Any, settings: TokenizeSettings) -> dict[str, Any]:
    sources = []
    for dataset in config.datasets:
        entry: dict[str, Any] = dataset.model_dump()
        if dataset.path is not None:
            entry["files"] = source_fingerprint(local_path(dataset, config.base_dir))
        sources.append(entry)
    return {
        "sources": sources,
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "settings": asdict(settings),
        "seed": config.train.seed,
    }


def _report_from_dict(data: dict[str, Any]) -> DataReport:
    examples = {k: [BadExample(**e) for e in v] for k, v in data.pop("examples").items()}
    return DataReport(**data, examples=examples)


def _load_cached(folder: Path) -> PreparedData:
    from datasets import load_from_disk

    meta = json.loads((folder / DONE).read_text())
    eval_rows = load_from_disk(str(folder / "eval")) if (folder / "eval").exists() else None
    return PreparedData(
        train=load_from_disk(str(folder / "train")),
        eval=eval_rows,
        reports=[_report_from_dict(r) for r in meta["reports"]],
        stats=TokenStats(**meta["stats"]),
        cache_dir=folder,
        from_cache=True,
        settings=meta["settings"],
    )


def _tokenize(
    rows: list[dict[str, Any]], tokenizer: Any, settings: TokenizeSettings, num_proc: int
) -> Dataset:
    from datasets import Dataset
    from datasets.utils import logging as ds_logging

    dataset = Dataset.from_list(rows)
    workers = num_proc if len(rows) >= PARALLEL_FROM_ROWS else 1
    bars = ds_logging.is_progress_bar_enabled()
    if not bars:
        ds_logging.enable_progress_bar()
    try:
        return dataset.map(
            tokenize_batch,
            batched=True,
            batch_size=256,
            num_proc=workers if workers > 1 else None,
            fn_kwargs={"tokenizer": tokenizer, "settings": settings},
            load_from_cache_file=False,
            desc=f"tokenizing {len(rows)} rows",
        )
    finally:
        if not bars:
            ds_logging.disable_progress_bar()


def _columns(dataset: Dataset, *names: str) -> list[list[Any]]:
    """Whole columns as Python lists, straight from Arrow (``dataset[name]`` formats row by row)."""
    table = dataset.with_format("arrow")[:]
    return [table.column(name).to_pylist() for name in names]


def _account(tokenized: Dataset, reports: dict[str, DataReport]) -> tuple[Dataset, int]:
    """Count skipped rows into their dataset's report; drop them; return kept rows and truncations."""
    statuses, sources, indices = _columns(tokenized, "status", "source", "index")
    truncated = 0
    for status, source, index in zip(statuses, sources, indices, strict=True):
        if status == TRUNCATED:
            truncated += 1
        elif status == TOO_LONG:
            reports[source].add_skipped(index, TOO_LONG)
        elif status not in KEPT:
            reason, _, detail = status.partition(": ")
            reports[source].add_bad(index, BadRow(reason, detail))
            reports[source].rows_kept -= 1
    keep = [i for i, status in enumerate(statuses) if status in KEPT]
    return (tokenized if len(keep) == len(statuses) else tokenized.select(keep)), truncated


def prepare_data(
    config: GymConfig, tokenizer: Any, *, num_proc: int | None = None, use_cache: bool = True
) -> PreparedData:
    """Load, convert, template, tokenize and mask every dataset of ``config`` (cached)."""
    if config.train.method == "pt":  # plain text: no chat template involved
        template, end_of_turn = "", ""
    else:
        template = apply_template(tokenizer, config.model.template, config.base_dir)
        end_of_turn = probe_end_of_turn(tokenizer, template)
    settings = TokenizeSettings(
        method=config.train.method,
        max_length=config.train.max_length,
        template=template,
        end_of_turn=end_of_turn,
    )
    folder = cache_root() / cache_key(_key_parts(config, tokenizer, settings))
    if use_cache and (folder / DONE).is_file():
        return _load_cached(folder)

    reports: dict[str, DataReport] = {}
    train_rows: list[dict[str, Any]] = []
    eval_rows: list[dict[str, Any]] = []
    for dataset in config.datasets:
        examples, report = load_examples(dataset, config.base_dir)
        reports[str(dataset.name)] = report
        train_part, eval_part = split_eval(examples, dataset.eval_fraction, config.train.seed)
        train_rows.extend(example_to_row(e) for e in train_part)
        eval_rows.extend(example_to_row(e) for e in eval_part)

    workers = num_proc or min(2, os.cpu_count() or 1)
    train, truncated = _account(_tokenize(train_rows, tokenizer, settings, workers), reports)
    evaluation = (
        _account(_tokenize(eval_rows, tokenizer, settings, workers), reports)[0] if eval_rows else None
    )
    for dataset in config.datasets:
        reports[str(dataset.name)].check(dataset.max_bad_fraction)
    lengths, loss_tokens = _columns(train, "length", "loss_tokens")
    stats = TokenStats.of(lengths, sum(loss_tokens), truncated)
    meta = {
        "reports": [asdict(r) for r in reports.values()],
        "stats": asdict(stats),
        "settings": asdict(settings),
    }

    def fill(staging: Path) -> None:
        from datasets.utils import logging as ds_logging

        bars = ds_logging.is_progress_bar_enabled()
        ds_logging.disable_progress_bar()  # saving a few MB needs no progress bar
        try:
            train.save_to_disk(str(staging / "train"))
            if evaluation is not None:
                evaluation.save_to_disk(str(staging / "eval"))
        finally:
            if bars:
                ds_logging.enable_progress_bar()
        (staging / DONE).write_text(json.dumps(meta, indent=2, default=str))

    if use_cache:
        write_entry(folder, fill)
        return _load_cached(folder)
    return PreparedData(train, evaluation, list(reports.values()), stats, folder, False, meta["settings"])
