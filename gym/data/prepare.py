"""`prepare_data`: every ``[[datasets]]`` entry loaded, converted, templated, tokenized and masked.

The one entry point trainers and `gym data preview` use. Rows travel as Python columns
(:mod:`gym.data.columns`): below ``PARALLEL_FROM_ROWS`` they are tokenized in this process by two
threads (one renders while the other is in the Rust tokenizer), above it in ``num_proc`` worker
processes (:mod:`gym.data.workers`); skipped rows are counted and dropped, and the kept ones become
one Arrow table. The result is cached (see :mod:`gym.data.cache`): a second run with the same data,
tokenizer, template and ``max_length`` loads the prepared rows from disk without reading or
converting anything.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.data.cache import (
    DONE,
    EVAL_FILE,
    TRAIN_FILE,
    cache_key,
    cache_root,
    source_fingerprint,
    tokenizer_fingerprint,
    write_entry,
)
from gym.data.columns import (
    Columns,
    arrow_columns,
    examples_to_columns,
    kept_rows,
    map_batches,
    to_dataset,
)
from gym.data.loading import data_files, load_examples, local_path, media_folder, split_eval
from gym.data.report import BadExample, DataReport, summary_text
from gym.data.templates import apply_template, probe_end_of_turn
from gym.data.tokenize import (
    PROMPT_METHODS,
    TokenizeSettings,
    tokenize_batch,
)
from gym.data.workers import tokenize_in_workers

if TYPE_CHECKING:
    from datasets import Dataset

    from gym.config import GymConfig
    from gym.data.vision_model import ImageTokens, VisionModel

PARALLEL_FROM_ROWS = 2000  # below this, starting worker processes costs more than it saves
SHARD_ROWS = 1024  # rows per task sent to a worker process


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
    # The p95 of the rows' whole lengths before any exchange was dropped (skipped rows included), and
    # the limit they are held to: max_length, less max_completion_length for GRPO/PPO prompts.
    full_p95: int = 0
    limit: int = 0

    @classmethod
    def of(
        cls, lengths: list[int], loss_tokens: int, truncated: int, full: list[int], limit: int
    ) -> TokenStats:
        ordered = sorted(lengths)
        return cls(
            len(ordered),
            truncated,
            percentile(ordered, 0.5),
            percentile(ordered, 0.95),
            ordered[-1] if ordered else 0,
            loss_tokens,
            sum(ordered),
            percentile(sorted(full), 0.95),
            limit,
        )


def percentile(ordered: list[int], q: float) -> int:
    """The ``q`` quantile of an ascending list (nearest rank), 0 for none."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0


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

    @property
    def fingerprint(self) -> str:
        """The cache key: a hash of the data files' contents, the tokenizer, the template and the settings."""
        return self.cache_dir.name

    def summary(self) -> dict[str, Any]:
        """What happened to the rows, for train_results.json, the model card and the PR comment."""
        read = sum(r.rows_read for r in self.reports)
        skipped = sum(r.rows_skipped for r in self.reports)

        def rows(split: Dataset | None) -> int:
            if split is None or len(split) == 0:
                return 0
            return len(
                set(zip(split["source"], split["index"], strict=True))
            )  # pt: blocks of one row count once

        return {
            "rows_read": read,
            "rows_trained": rows(self.train),
            "rows_held_out": rows(self.eval),
            "rows_truncated": self.stats.truncated,
            "rows_skipped": skipped,
            "skipped_share": round(skipped / read, 4) if read else 0.0,
            "rows_bad": sum(r.rows_bad for r in self.reports),
            "length_p95": self.stats.full_p95,
            "max_length": int(self.settings.get("max_length", 0)),
            "length_limit": self.stats.limit,
        }

    def summary_line(self) -> str:
        """One line for `gym train` and `gym launch`: rows read, trained, truncated and skipped."""
        return summary_text(self.summary())


def _key_parts(config: GymConfig, tokenizer: Any, settings: TokenizeSettings) -> dict[str, Any]:
    sources = []
    for dataset in config.datasets:
        # Thresholds decide whether a run may start, not what the rows are: checked on cached rows too.
        entry: dict[str, Any] = dataset.model_dump(exclude={"max_bad_fraction", "max_skipped_fraction"})
        if dataset.path is not None:
            path = local_path(dataset, config.base_dir)
            data_files(path, str(dataset.name))  # a path that cannot be read is one sentence, before hashing
            entry["files"] = source_fingerprint(path)
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


def _write_split(dataset: Dataset, path: Path) -> None:
    """``dataset`` as one Arrow stream file, the format of `datasets`' own cache files.

    ``save_to_disk`` writes the same rows through `datasets`' shard writer, with its state and info
    files, several times slower (docs/performance.md). The features travel in the schema's metadata,
    as `datasets` stores them, so image or class columns read back as they were written.
    """
    import pyarrow as pa

    table = dataset.with_format("arrow")[:]  # the rows in order (an index mapping applied)
    table = table.replace_schema_metadata(dataset.features.arrow_schema.metadata)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def _load_cached(folder: Path) -> PreparedData:
    from datasets import Dataset

    meta = json.loads((folder / DONE).read_text())
    evaluation = folder / EVAL_FILE
    eval_rows = Dataset.from_file(str(evaluation)) if evaluation.exists() else None
    return PreparedData(
        train=Dataset.from_file(str(folder / TRAIN_FILE)),  # memory-mapped, as load_from_disk reads it
        eval=eval_rows,
        reports=[_report_from_dict(r) for r in meta["reports"]],
        stats=TokenStats(**meta["stats"]),
        cache_dir=folder,
        from_cache=True,
        settings=meta["settings"],
    )


def _progress(total: int, desc: str) -> Any:
    """The tokenizing bar, drawn as `datasets` draws its own (shown even where its bars are off)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=" examples")


@contextmanager
def _rust_on_one_thread(pipelined: bool) -> Iterator[None]:
    """The fast tokenizer without its own thread pool while Python renders the next batch beside it.

    The rendering thread (GIL-bound) is the critical path; with the tokenizer's pool on every core it
    shares its core with a Rust worker, so one Rust thread beside it is faster (docs/performance.md).
    A user's ``TOKENIZERS_PARALLELISM`` is left as it is.
    """
    if not pipelined or "TOKENIZERS_PARALLELISM" in os.environ:
        yield
        return
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # read by the tokenizer on every batch call
    try:
        yield
    finally:
        os.environ.pop("TOKENIZERS_PARALLELISM", None)


def _tokenize(examples: list[Any], tokenizer: Any, settings: TokenizeSettings, num_proc: int) -> Columns:
    """Tokenized rows as Python columns, in this process or in ``num_proc`` worker processes."""
    count = len(examples)
    workers = num_proc if count >= PARALLEL_FROM_ROWS else 1
    with _progress(count, f"tokenizing {count} rows") as bar:
        if workers > 1:
            columns = examples_to_columns(examples)
            return tokenize_in_workers(columns, tokenizer, settings, workers, SHARD_ROWS, bar.update)
        # Two threads: one batch is made into columns and rendered (Python, GIL) while the other is
        # tokenized (Rust, GIL released). Batches of 16-1024 rows, a 32nd of all: Rust starts soon and the
        # last batch leaves one thread alone briefly (docs/performance.md compares larger batches).
        threads = min(2, os.cpu_count() or 1)
        with ThreadPoolExecutor(threads) as pool, _rust_on_one_thread(threads > 1):
            return map_batches(
                {"example": examples},
                lambda batch: tokenize_batch(
                    examples_to_columns(batch["example"]), tokenizer=tokenizer, settings=settings
                ),
                max(16, min(1024, -(-count // 32))),
                bar.update,
                pool.map if threads > 1 else map,
            )


def _vision_tokens(config: GymConfig, tokenizer: Any, vision: VisionModel | None) -> ImageTokens | None:
    """The processor of a vision-language base (its image token counts decide the rows), else None."""
    if config.train.method == "pt" or vision is None:
        return None
    return vision.tokens(tokenizer) if vision.known() else None


def _vision_examples(
    examples: list[Any],
    reports: dict[str, DataReport],
    config: GymConfig,
    tokens: ImageTokens | None,
    tokenizer: Any,
    vision: VisionModel | None,
) -> ImageTokens | None:
    """Image rows: refused on a text-only model; their markers become the model's own placeholder."""
    from gym.data.vision import refuse_text_only, use_placeholder

    if tokens is None and vision is not None and any(e.images for e in examples) and vision.confirmed():
        tokens = vision.tokens(tokenizer)  # a Hub model not cached when the key was made
    if tokens is None:
        refuse_text_only(examples, reports, config.model.name_or_path)
    else:
        use_placeholder(examples, tokens.placeholder())
    return tokens


def _vision_settings(tokens: ImageTokens | None) -> dict[str, Any]:
    """What `gym data preview` needs to describe image rows (the image token and its id)."""
    if tokens is None:
        return {}
    return {"image_token": tokens.image_token(), "image_token_id": tokens.image_token_id()}


def prepare_data(
    config: GymConfig,
    tokenizer: Any,
    *,
    num_proc: int | None = None,
    use_cache: bool = True,
    check: bool = True,
    vision: VisionModel | None = None,
) -> PreparedData:
    """Load, convert, template, tokenize and mask every dataset of ``config`` (cached).

    ``check``: raise DataError when a dataset has more bad or skipped rows than its thresholds allow
    (what training needs); `gym data preview` passes False to show such data and say so instead.
    ``vision``: the model layer's answer for image rows (``gym.model.vision.model_vision(config)``);
    without it image rows are refused as headed for a text-only model.
    """
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
        reserve=config.train.completion_tokens if config.train.method in PROMPT_METHODS else 0,
    )
    parts = _key_parts(config, tokenizer, settings)
    tokens = _vision_tokens(config, tokenizer, vision)
    if tokens is not None:
        parts["vision"] = tokens.fingerprint()
        # the prepared rows hold absolute image paths: a copy of the project elsewhere (or one whose
        # earlier folder is gone) must not reuse rows that point into another folder
        parts["media"] = [
            str(media_folder(dataset, config.base_dir).resolve()) for dataset in config.datasets
        ]
    folder = cache_root() / cache_key(parts)
    if use_cache and (folder / DONE).is_file():
        return checked(_load_cached(folder), config, check)

    reports: dict[str, DataReport] = {}
    train_examples: list[Any] = []
    eval_examples: list[Any] = []
    for dataset in config.datasets:
        examples, report = load_examples(dataset, config.base_dir)
        reports[str(dataset.name)] = report
        tokens = _vision_examples(examples, reports, config, tokens, tokenizer, vision)
        train_part, eval_part = split_eval(examples, dataset.eval_fraction, config.train.seed)
        train_examples.extend(train_part)
        eval_examples.extend(eval_part)

    workers = num_proc or min(2, os.cpu_count() or 1)

    def tokenized(examples: list[Any], split: str) -> tuple[Dataset, int, dict[str, list[int]]]:
        fingerprint = f"{folder.name}-{split}"
        rows = _tokenize(examples, tokenizer, settings, workers)
        if tokens is not None:
            from gym.data.vision import expand_images

            dataset = to_dataset(rows, fingerprint + "-text") if isinstance(rows, dict) else rows
            rows = expand_images(dataset, tokens, settings.max_length)
        return kept_rows(rows, reports, fingerprint)

    train, truncated, lengths = tokenized(train_examples, "train")
    measured = [length for values in lengths.values() for length in values]  # skipped rows included
    evaluation = None
    if eval_examples:
        evaluation, _, held_out = tokenized(eval_examples, "eval")
        for source, values in held_out.items():
            lengths.setdefault(source, []).extend(values)
        if len(evaluation) == 0:  # every held-out row skipped: `datasets` cannot read back an empty split
            evaluation = None
    for name, report in reports.items():
        report.length_p95 = percentile(sorted(lengths.get(name, [])), 0.95)
    kept_lengths, loss_tokens = arrow_columns(train, "length", "loss_tokens")
    stats = TokenStats.of(kept_lengths, sum(loss_tokens), truncated, measured, settings.limit)
    meta = {
        "reports": [asdict(r) for r in reports.values()],
        "stats": asdict(stats),
        "settings": {**asdict(settings), **_vision_settings(tokens)},
    }

    def fill(staging: Path) -> None:
        _write_split(train, staging / TRAIN_FILE)
        if evaluation is not None:
            _write_split(evaluation, staging / EVAL_FILE)
        (staging / DONE).write_text(json.dumps(meta, indent=2, default=str))

    prepared = PreparedData(train, evaluation, list(reports.values()), stats, folder, False, meta["settings"])
    if not use_cache or len(train) == 0:  # (`datasets` cannot read back a saved empty split)
        if len(train) == 0 or check:
            return checked(prepared, config, True)
        return prepared
    write_entry(folder, fill)  # before the checks: raising a threshold then reuses the tokenized rows
    return checked(_load_cached(folder), config, check)


def checked(prepared: PreparedData, config: GymConfig, check: bool = True) -> PreparedData:
    """``prepared``, once every dataset is within its ``max_bad_fraction`` and ``max_skipped_fraction``.

    Raises DataError (one sentence: how many rows, why, and what to change) before any training starts.
    """
    if not check:
        return prepared
    limits = {str(d.name): d for d in config.datasets}
    limit = prepared.stats.limit or config.train.max_length
    what = (
        f"max_length - {'.'.join(config.train.completion_key[1:])} = {limit}"
        if prepared.settings.get("reserve")
        else f"max_length = {limit}"
    )
    for report in prepared.reports:
        dataset = limits.get(report.dataset)
        if dataset is None:
            continue
        report.check(dataset.max_bad_fraction)
        report.check_skipped(
            dataset.max_skipped_fraction, what, report.length_p95 + (prepared.settings.get("reserve") or 0)
        )
    return prepared
