"""The evaluation result as data: ``eval_results.json``, the markdown table and the terminal table.

``eval_results.json`` (written into ``output_dir``) has this shape; every consumer (model card, PR
comment, job summary) reads it through :class:`EvalReport`::

    {
      "format": 1,
      "model": "<tuned model folder>",
      "base_model": "<model.name_or_path>" | null,      # null when eval.baseline = false
      "lm_eval_version": "0.4.x",
      "num_fewshot": 5, "limit": 0, "batch_size": 8,
      "wall_seconds": {"tuned": 12.3, "base": 11.9},
      "training_data": {"rows_read": 999, "rows_trained": 195, ...},  # train_results.json "data"
      "judge": {"model": ..., "prompt_versions": ..., "pairwise": ..., ...},  # [eval.judge], else {}
      "results": [
        {"task": "gym_reverse", "source": "gym", "metric": "exact_match", "filter": "none",
         "value": 0.35, "stderr": 0.04, "samples": 100, "base_value": 0.0, "delta": 0.35,
         "higher_is_better": true, "n_shot": 0, "chat_template": true,
         "dataset": {"id": "local:gym_reverse", "config": null, "split": "test"}}
      ]
    }

One row per task (or group) and metric. ``base_value`` and ``delta`` (tuned minus base) are null
without a baseline; ``stderr`` is null where lm-eval reports "N/A".
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gym.config.errors import shorten
from gym.markup import md_text

RESULTS_FILE = "eval_results.json"
FORMAT = 1
MAX_RESULTS_BYTES = 4_000_000  # a few hundred bytes per row: thousands of tasks stay far below it


class ResultsError(ValueError):
    """An ``eval_results.json`` that is not a report: one sentence (or, from :meth:`EvalReport.parse`, the
    phrase saying what is wrong, for the caller to say where it came from)."""


@dataclass
class TaskScore:
    """One metric of one task (or group): the tuned value, its stderr, and the base value beside it."""

    task: str
    metric: str
    value: float | None
    source: str = "lm-eval"  # "gym" | "local" | "lm-eval"
    filter: str = "none"
    stderr: float | None = None
    samples: int | None = None
    base_value: float | None = None
    delta: float | None = None
    higher_is_better: bool | None = None
    n_shot: int | None = None
    chat_template: bool = False
    dataset: dict[str, Any] = field(default_factory=dict)  # id, config, split

    @property
    def label(self) -> str:
        """``acc`` or ``exact_match (strict-match)``: the metric with its filter when there is one."""
        return self.metric if self.filter in ("none", "") else f"{self.metric} ({self.filter})"


@dataclass
class EvalReport:
    """Everything one `gym eval` measured (see the module docstring for the JSON shape)."""

    model: str
    results: list[TaskScore]
    base_model: str | None = None
    lm_eval_version: str = ""
    num_fewshot: int | None = None
    limit: int = 0
    batch_size: int | None = None
    wall_seconds: dict[str, float] = field(default_factory=dict)
    # What happened to the training rows (train_results.json "data"): shown under the table.
    training_data: dict[str, Any] = field(default_factory=dict)
    # [eval.judge]: the judge model, prompt versions, usage, intervals, examples (gym/eval/judge/run.py).
    judge: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if not data["judge"]:  # written only by a run with [eval.judge]
            del data["judge"]
        return {"format": FORMAT, **data}

    @classmethod
    def from_dict(cls, data: Any) -> EvalReport:
        """The report ``data`` describes; :class:`ResultsError` (what is wrong, where) for any other shape."""
        fields = _checked(data, REPORT_FIELDS, "")
        fields["results"] = [
            TaskScore(**_checked(row, SCORE_FIELDS, f"results[{index}]."))
            for index, row in enumerate(fields["results"])
        ]
        return cls(**fields)

    def write(self, folder: str | Path) -> Path:
        """Write ``eval_results.json`` into ``folder`` and return its path."""
        path = Path(folder) / RESULTS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: str | Path) -> EvalReport:
        """Read an ``eval_results.json`` (or the folder holding one).

        Raises :class:`ResultsError` (a ValueError) with one sentence naming the file, what is wrong with
        it and that `gym eval` rewrites it, for every file that is not such a report.
        """
        path = Path(path)
        if path.is_dir():
            path = path / RESULTS_FILE
        try:
            return cls.parse(_read_bounded(path))
        except ResultsError as error:
            from gym.config.reading import display_path

            raise ResultsError(f"{display_path(path)}: {error}; run `gym eval` again to rewrite it") from None

    @classmethod
    def parse(cls, data: bytes | str) -> EvalReport:
        """The report in ``data`` (an eval_results.json read from elsewhere, e.g. the Hub); ResultsError
        with what is wrong (no file name: the caller names where it came from)."""
        if len(data) > MAX_RESULTS_BYTES:
            raise ResultsError(
                f"is more than {MAX_RESULTS_BYTES:,} bytes; Gym writes a few kilobytes per task"
            )
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else data
        except UnicodeDecodeError:
            raise ResultsError("is not UTF-8 text") from None
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise ResultsError(
                f"is not JSON ({error.msg} at line {error.lineno}, column {error.colno})"
            ) from None
        except ValueError:  # Python refuses integers of more than 4,300 digits
            raise ResultsError("holds a number too long to be a score") from None
        except RecursionError:
            raise ResultsError("nests too deeply to be a report") from None
        return cls.from_dict(document)


# What each key of the file may hold, and whether it must be there. Gym writes exactly these; a file that
# holds anything else was damaged (or written by someone else) and is refused rather than half-used.
TEXT, NUMBER, WHOLE, FLAG, OBJECT, LIST = (
    "text",
    "a number",
    "a whole number",
    "true or false",
    "an object",
    "a list",
)
KINDS: dict[str, tuple[type, ...]] = {TEXT: (str,), NUMBER: (int, float), WHOLE: (int,), FLAG: (bool,),
                                      OBJECT: (dict,), LIST: (list,)}  # fmt: skip
Field = tuple[str, bool, bool]  # (kind, may be null, required)
SCORE_FIELDS: dict[str, Field] = {
    "task": (TEXT, False, True), "metric": (TEXT, False, True), "value": (NUMBER, True, True),
    "source": (TEXT, False, False), "filter": (TEXT, False, False), "stderr": (NUMBER, True, False),
    "samples": (WHOLE, True, False), "base_value": (NUMBER, True, False), "delta": (NUMBER, True, False),
    "higher_is_better": (FLAG, True, False), "n_shot": (WHOLE, True, False),
    "chat_template": (FLAG, False, False), "dataset": (OBJECT, False, False),
}  # fmt: skip
REPORT_FIELDS: dict[str, Field] = {
    "model": (TEXT, False, True), "results": (LIST, False, True), "base_model": (TEXT, True, False),
    "lm_eval_version": (TEXT, False, False), "num_fewshot": (WHOLE, True, False), "limit": (WHOLE, False, False),
    "batch_size": (WHOLE, True, False), "wall_seconds": (OBJECT, False, False),
    "training_data": (OBJECT, False, False), "judge": (OBJECT, False, False),
}  # fmt: skip
TABLE_VALUES = {"wall_seconds": NUMBER, "training_data": NUMBER, "dataset": TEXT}  # each value, or null


def _kind(value: Any) -> str:
    """What a JSON value is, in the words of the sentence (``true`` is no number to Gym)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return FLAG
    return next((kind for kind, types in KINDS.items() if isinstance(value, types)), type(value).__name__)


def _fits(value: Any, kind: str, nullable: bool) -> bool:
    if value is None:
        return nullable
    if isinstance(value, bool) and kind != FLAG:
        return False
    return isinstance(value, KINDS[kind])


def _shown(value: Any) -> str:
    return shorten(json.dumps(value), 40) if isinstance(value, (str, int, float)) else _kind(value)


def _checked(data: Any, fields: dict[str, Field], where: str) -> dict[str, Any]:
    """``data``'s known keys, each of the kind Gym writes; ResultsError naming the first that is not.

    Unknown keys (a newer Gym's) are left out.
    """
    subject = where.rstrip(".") + " " if where else ""  # "results[2] " for a row, "" for the file itself
    if not isinstance(data, dict):
        raise ResultsError(f"{subject}is {_kind(data)}, not an object")
    kept: dict[str, Any] = {}
    for key, (kind, nullable, required) in fields.items():
        if key not in data:
            if required:
                raise ResultsError(f"{subject}has no {key!r}")
            continue
        value = data[key]
        if not _fits(value, kind, nullable):
            raise ResultsError(
                f"{where}{key} is {_shown(value)}, not {kind}" + (" or null" if nullable else "")
            )
        if key == "stderr" and isinstance(value, float) and not math.isfinite(value):
            # an infinite stderr would turn `>= champion - 2*stderr` into a gate that always passes
            raise ResultsError(f"{where}{key} is {_shown(value)}, not a finite number")
        if key in TABLE_VALUES:
            for name, item in value.items():
                if not _fits(item, TABLE_VALUES[key], True):
                    raise ResultsError(
                        f"{where}{key}.{shorten(name, 40)} is {_shown(item)}, not {TABLE_VALUES[key]} or null"
                    )
        kept[key] = value
    return kept


def _read_bounded(path: Path) -> str:
    """The text of ``path``, a regular file of at most :data:`MAX_RESULTS_BYTES` (read as `gym init --from`
    reads a YAML: never blocking on a FIFO); ResultsError otherwise."""
    from gym.config.migrate.bounded_yaml import read_bounded

    try:
        return read_bounded(path, MAX_RESULTS_BYTES, what="an eval_results.json", kind="a JSON file")
    except UnicodeDecodeError:
        raise ResultsError("is not UTF-8 text") from None
    except ValueError as error:  # a folder, a FIFO or device, too large
        raise ResultsError(str(error.args[0])) from None
    except OSError as error:
        raise ResultsError(f"cannot be read ({error.strerror or type(error).__name__})") from None


HELD_OUT_METRICS = (("loss", "eval_loss", False), ("accuracy", "reward_accuracy", True),
                    ("margin", "reward_margin", True), ("reward", "reward", True))  # fmt: skip


def held_out_scores(train_results: dict[str, Any]) -> list[TaskScore]:
    """The held-out rows' evaluation recorded by training (``train_results.json`` ``eval``) as table rows.

    Task ``held-out``, source ``train``: the value after the last step, the base value before the first,
    so the card and the PR show them beside lm-eval's scores.
    """
    held = train_results.get("eval") if isinstance(train_results, dict) else None
    if not isinstance(held, dict) or not isinstance(held.get("final"), dict):
        return []
    initial = held.get("initial") or {}
    scores = []
    for key, metric, higher in HELD_OUT_METRICS:
        value = held["final"].get(key)
        if not isinstance(value, (int, float)):
            continue
        base = initial.get(key)
        base = float(base) if isinstance(base, (int, float)) else None
        scores.append(
            TaskScore(task="held-out", metric=metric, value=float(value), source="train",
                      samples=held.get("rows"), base_value=base,
                      delta=None if base is None else float(value) - base, higher_is_better=higher,
                      dataset={"id": "local:held-out", "config": None, "split": "eval"})
        )  # fmt: skip
    return scores


def fmt(value: float | None, *, signed: bool = False) -> str:
    """A score as text: four decimals, '—' when absent, '+' on positive deltas."""
    if value is None:
        return "—"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def table_rows(report: EvalReport) -> tuple[list[str], list[list[str]]]:
    """Header and rows shared by the markdown and terminal tables (base columns only with a baseline)."""
    baseline = report.base_model is not None
    header = ["task", "metric", "n", *(["base"] if baseline else []), "tuned", "± stderr",
              *(["Δ"] if baseline else [])]  # fmt: skip
    rows = []
    for row in report.results:
        cells = [row.task, row.label, "—" if row.samples is None else str(row.samples)]
        if baseline:
            cells.append(fmt(row.base_value))
        cells += [fmt(row.value), fmt(row.stderr)]
        if baseline:
            cells.append(fmt(row.delta, signed=True))
        rows.append(cells)
    return header, rows


def results_table_markdown(report: EvalReport) -> str:
    """The base → tuned table as GitHub markdown: used by the model card, the PR comment and the job summary."""
    header, rows = table_rows(report)

    def line(cells: list[str]) -> str:  # names come from task YAML a PR can change: never rendered raw
        return "| " + " | ".join(md_text(cell) for cell in cells) + " |"

    align = ["---", "---", "---:", *["---:"] * (len(header) - 3)]
    return "\n".join([line(header), "| " + " | ".join(align) + " |", *(line(r) for r in rows)]) + "\n"


def training_data_markdown(data: dict[str, Any]) -> str:
    """One line on the training rows (read, trained, truncated, skipped, p95 length), or '' without data."""
    from gym.data.report import summary_text

    text = summary_text(data)
    return f"**Training data:** {text}.\n" if text else ""


def results_table_rich(report: EvalReport) -> Any:
    """The same table for the terminal (a rich Table): deltas coloured by whether they are improvements."""
    from rich.table import Table

    header, rows = table_rows(report)
    title = f"{Path(report.model).name}" + (f" vs {report.base_model}" if report.base_model else "")
    table = Table(title=title, title_justify="left")
    for index, name in enumerate(header):
        table.add_column(name, justify="left" if index < 2 else "right")
    for score, cells in zip(report.results, rows, strict=True):
        if report.base_model is not None and score.delta is not None and score.delta != 0:
            better = (score.delta > 0) == (score.higher_is_better is not False)
            cells[-1] = f"[{'green' if better else 'red'}]{cells[-1]}[/]"
        table.add_row(*cells)
    return table
