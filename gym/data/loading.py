"""Reading a ``[[datasets]]`` entry into Examples, always through the `datasets` library.

Files are never parsed by hand: JSON/JSONL, CSV and Parquet go through ``load_dataset("json" | "csv" |
"parquet", data_files=...)`` and Hub ids through ``load_dataset(id, subset, split=, revision=)``, so what
Gym trains on is what `datasets` reads. What this module adds is the failure story: every way a
dataset cannot be read becomes a :class:`DataError` with one sentence naming the dataset and the file
(never a traceback from `datasets`), and bad rows are counted in a :class:`DataReport`. The one
exception to "never by hand": JSON Lines that `datasets` refuses as a whole are read line by line
(:mod:`gym.data.sources`), so one broken line is one bad row with its line number.
`datasets` and pyarrow are imported inside functions so that `gym validate` stays fast.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from gym.config.reading import display_path
from gym.config.root import resolve_against
from gym.config.sections import DatasetConfig
from gym.data.example import Example
from gym.data.formats import Context, get_converter
from gym.data.report import BadRow, DataError, DataReport
from gym.data.sources import (
    SalvagedRows,
    checked_files,
    file_problem,
    path_problem,
    read_small_json,
    salvage_json_lines,
)
from gym.failures import error_chain

if TYPE_CHECKING:
    from datasets import Dataset

BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
T = TypeVar("T")


def local_path(dataset: DatasetConfig, base_dir: Path) -> Path:
    """``dataset.path`` made absolute against gym.toml's folder, as GymConfig.resolve_path does."""
    assert dataset.path is not None
    written = Path(dataset.path).expanduser()
    try:  # the folder resolved as the config resolves paths; the file keeps its name (a link keeps its suffix)
        return (
            resolve_against(base_dir, written.parent) / written.name
            if written.name
            else resolve_against(base_dir, written)
        )
    except (OSError, RuntimeError, ValueError):  # a symlink loop or a NUL in the path, met by resolve()
        path = Path(base_dir) / str(dataset.path)
        raise DataError(
            f"dataset {dataset.name!r}: {display_path(path)} {path_problem(path) or 'cannot be resolved'}; "
            "check path in gym.toml"
        ) from None


def data_files(path: Path, name: str) -> tuple[str, list[str]]:
    """The `datasets` builder and the files for a file or a folder of files of one type.

    Every file-system oddity (missing, looping link, FIFO, unreadable, empty) is one DataError here,
    before any file is hashed or read.
    """
    problem = path_problem(path)
    if problem is not None:
        raise DataError(f"dataset {name!r}: {display_path(path)} {problem}; check path in gym.toml")
    files = (
        sorted(p for p in path.iterdir() if p.is_file() and p.suffix in BUILDERS) if path.is_dir() else [path]
    )
    if not files:
        raise DataError(f"dataset {name!r}: folder {path} has no .json, .jsonl, .csv or .parquet file")
    builders = {BUILDERS.get(p.suffix) for p in files}
    if None in builders:
        raise DataError(
            f"dataset {name!r}: {path} is not a .json, .jsonl, .csv or .parquet file, which are the types Gym reads"
        )
    if len(builders) > 1:
        raise DataError(
            f"dataset {name!r}: folder {path} mixes file types ({', '.join(sorted(builders))}); use one"
        )
    for file in files:
        problem = file_problem(file)
        if problem is not None:
            raise DataError(f"dataset {name!r}: file {file} {problem}")
    return builders.pop(), [str(p) for p in files]  # type: ignore[return-value]


def check_local_files(datasets: Sequence[DatasetConfig], base_dir: Path) -> None:
    """Every local dataset's file or folder checked as loading checks it (missing, empty, unreadable, of a
    type Gym does not read), before anything imports the model stack: a wrong path is one sentence in a
    second, not after ten seconds of imports (or minutes of a cloud node's set-up)."""
    for dataset in datasets:
        if dataset.path is not None:
            data_files(local_path(dataset, base_dir), str(dataset.name))


@contextmanager
def quiet_datasets() -> Iterator[None]:
    """No progress bars or logged errors from `datasets` while loading: failures become one DataError."""
    from datasets.utils import logging as ds_logging
    from huggingface_hub.utils import logging as hub_logging

    verbosity, hub_verbosity = ds_logging.get_verbosity(), hub_logging.get_verbosity()
    bars = ds_logging.is_progress_bar_enabled()
    ds_logging.set_verbosity(ds_logging.CRITICAL + 10)
    hub_logging.set_verbosity(hub_logging.CRITICAL + 10)
    ds_logging.disable_progress_bar()
    try:
        yield
    finally:
        ds_logging.set_verbosity(verbosity)
        hub_logging.set_verbosity(hub_verbosity)
        if bars:
            ds_logging.enable_progress_bar()


def root_cause(error: BaseException) -> str:
    """The innermost message of an exception chain: `datasets` wraps pyarrow's useful one."""
    innermost = error_chain(error)[-1]
    text = " ".join(str(innermost).split())  # one line: pyarrow's messages carry whole schemas
    return (text[:300] + "…" if len(text) > 300 else text) or type(innermost).__name__


def load_local(dataset: DatasetConfig, base_dir: Path) -> Dataset | SalvagedRows:
    """A local file or folder through `datasets` (small JSON with the json module); JSON Lines it refuses
    are read line by line instead."""
    import datasets

    name = str(dataset.name)
    builder, files = data_files(local_path(dataset, base_dir), name)
    where = files[0] if len(files) == 1 else f"{local_path(dataset, base_dir)} ({len(files)} files)"
    lines = builder == "json" and all(f.endswith(".jsonl") for f in files)
    if checked_files(name, builder, [Path(f) for f in files]):  # lines in another encoding: bad rows
        return salvage_json_lines(files)
    small = read_small_json(files) if builder == "json" else None
    if small is not None:
        return small
    try:
        with quiet_datasets():
            return datasets.load_dataset(builder, data_files=files, split="train")
    except FileNotFoundError:
        raise DataError(f"dataset {name!r}: {where} does not exist; check path in gym.toml") from None
    except Exception as error:  # `datasets` wraps pyarrow/pandas errors in several types
        if lines:  # one broken line must not cost the whole file: count it as a bad row instead
            return salvage_json_lines(files)
        if isinstance(error, StopIteration) or "corresponds to no data" in str(error):
            raise DataError(f"dataset {name!r}: file {where} has no rows") from None
        raise DataError(
            f"dataset {name!r}: cannot read {builder.upper()} file {where}: {root_cause(error)}"
        ) from None


def hub_offline() -> bool:
    """Offline mode as the user set it: the env vars now, or huggingface_hub's value read at import."""
    from huggingface_hub import constants

    flags = (os.environ.get(var, "").strip().lower() for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any(flag in ("1", "true", "yes", "on") for flag in flags)


NETWORK_HINTS = ("couldn't reach", "not cached", "name or service not known", "name resolution", "offline")


def network_failure(error: BaseException | None) -> bool:
    """Whether a `datasets` error chain comes from not reaching the Hub (its types vary by version)."""
    for link in error_chain(error):
        kind = type(link).__name__
        if isinstance(link, (ConnectionError, TimeoutError)) or "Connect" in kind or "Timeout" in kind:
            return True
        if any(hint in str(link).lower() for hint in NETWORK_HINTS):
            return True
    return False


def load_hub(dataset: DatasetConfig) -> Dataset:
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    name, hub = str(dataset.name), str(dataset.hub)
    try:
        with quiet_datasets():
            return datasets.load_dataset(hub, dataset.subset, split=dataset.split, revision=dataset.revision)
    except Exception as error:
        offline = hub_offline()
        if network_failure(error) or (offline and isinstance(error, DatasetNotFoundError)):
            reason = (
                "offline mode is on: HF_HUB_OFFLINE/HF_DATASETS_OFFLINE"
                if offline
                else "no network connection"
            )
            raise DataError(unreachable(name, hub, reason)) from None
        if isinstance(error, DatasetNotFoundError):
            raise DataError(
                f"dataset {name!r}: Hub dataset {hub!r} was not found (or is private/gated without a token)"
            ) from None
        raise DataError(f"dataset {name!r}: cannot load Hub dataset {hub!r}: {root_cause(error)}") from None


def unreachable(name: str, hub: str, reason: str) -> str:
    return (
        f"dataset {name!r}: the Hugging Face Hub is unreachable ({reason}), so Hub dataset {hub!r} "
        "cannot be downloaded; download it to a local file and set path instead of hub"
    )


def load_rows(dataset: DatasetConfig, base_dir: Path) -> Dataset | SalvagedRows:
    """The raw rows of a dataset, cut to ``max_samples``; DataError on failure."""
    rows = load_local(dataset, base_dir) if dataset.path is not None else load_hub(dataset)
    if len(rows) == 0:
        raise DataError(f"dataset {dataset.name!r}: {dataset.path or dataset.hub} has no rows")
    if dataset.max_samples is not None and dataset.max_samples < len(rows):
        rows = (
            rows.head(dataset.max_samples)
            if isinstance(rows, SalvagedRows)
            else rows.select(range(dataset.max_samples))
        )
    return rows


def media_folder(dataset: DatasetConfig, base_dir: Path) -> Path:
    """Where the dataset's relative image paths resolve: its folder (a file's parent), else gym.toml's."""
    if dataset.path is None:
        return base_dir
    path = local_path(dataset, base_dir)
    return path if path.is_dir() else path.parent


def load_examples(dataset: DatasetConfig, base_dir: Path) -> tuple[list[Example], DataReport]:
    """Every row converted with the dataset's format; bad rows skipped and reported.

    Raises DataError when the dataset cannot be read, when every row is bad, or when the bad fraction
    exceeds ``dataset.max_bad_fraction``.
    """
    name = str(dataset.name)
    rows = load_rows(dataset, base_dir)  # first: every path problem is one sentence from here
    media_dir = media_folder(dataset, base_dir)
    source = str(local_path(dataset, base_dir)) if dataset.path is not None else f"hub:{dataset.hub}"
    ctx = Context(
        columns=dict(dataset.columns),
        tags=dict(dataset.tags),
        placeholders=dict(dataset.placeholders),
        media_dir=media_dir,
        source=name,
    )
    convert = get_converter(dataset.format)
    report = DataReport(dataset=name, file=source)
    examples: list[Example] = []
    if isinstance(rows, SalvagedRows):
        for index, bad in rows.bad:
            report.rows_read += 1
            report.add_bad(index, bad)
        numbered: Iterator[tuple[int, dict]] = iter(rows.rows)
    else:
        numbered = enumerate(_iter_rows(rows))
    try:
        for index, row in numbered:
            report.rows_read += 1
            try:
                example = convert(row, ctx)
            except BadRow as bad:
                report.add_bad(index, bad)
                continue
            example.source, example.index = name, index
            examples.append(example)
    except DataError:
        raise
    except Exception as error:  # pyarrow decodes lazily: a value it accepted may fail when read
        raise DataError(
            f"dataset {name!r}: cannot read row {report.rows_read - 1} of {source}: {root_cause(error)}"
        ) from None
    report.rows_kept = len(examples)
    report.check(dataset.max_bad_fraction)
    return examples, report


def _iter_rows(rows: Dataset, batch_size: int = 1000) -> Iterator[dict]:
    """The rows as dicts, read a batch at a time: indexing a Dataset row by row costs far more.

    ``Dataset.iter`` formats (and decodes features, e.g. images) exactly as row access does.
    """
    if not rows.column_names:
        yield from rows
        return
    for batch in rows.iter(batch_size=batch_size):
        names = list(batch)
        for values in zip(*(batch[name] for name in names), strict=True):
            yield dict(zip(names, values, strict=True))


def split_eval(examples: Sequence[T], eval_fraction: float, seed: int = 0) -> tuple[list[T], list[T]]:
    """A deterministic held-out split: the same seed and rows give the same eval set, order preserved.

    At least one example is held out whenever ``eval_fraction > 0`` and there are two or more rows,
    and at least one is always left to train on.
    """
    if not 0.0 <= eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    count = len(examples)
    n_eval = min(max(round(count * eval_fraction), 1), count - 1) if eval_fraction > 0 and count > 1 else 0
    held = set(random.Random(seed).sample(range(count), n_eval))
    train = [e for i, e in enumerate(examples) if i not in held]
    return train, [e for i, e in enumerate(examples) if i in held]
