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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gym.markup import md_text

RESULTS_FILE = "eval_results.json"
FORMAT = 1


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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {"format": FORMAT, **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalReport:
        data = {k: v for k, v in data.items() if k != "format"}
        data["results"] = [TaskScore(**row) for row in data.get("results", [])]
        return cls(**data)

    def write(self, folder: str | Path) -> Path:
        """Write ``eval_results.json`` into ``folder`` and return its path."""
        path = Path(folder) / RESULTS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: str | Path) -> EvalReport:
        """Read an ``eval_results.json`` (or the folder holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / RESULTS_FILE
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))


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
