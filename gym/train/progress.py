"""A live progress bar for training (loss, tokens/s, ETA) and the numbers that go into train_results.json.

The Trainer's own tqdm bar knows steps but not tokens; Gym counts the tokens that carry loss and the
non-pad tokens of every batch, which is what throughput means for fine-tuning.

The same numbers are appended, one JSON object a line, to ``progress.jsonl`` in the checkpoint folder,
so anything watching a run from outside (`gym webui`) reads them from the run's own files. A file
``stop_requested`` there asks the run to save a checkpoint and stop at the end of the current step:
a stop never lands in the middle of a checkpoint.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback


@dataclass
class TrainLog:
    """What happened during training, saved in train_results.json."""

    losses: list[tuple[int, float]] = field(default_factory=list)
    tokens: int = 0  # non-pad tokens seen
    started: float = field(default_factory=time.perf_counter)
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0  # process CPU time (user + system, all threads) over the same window
    cpu_started: float = field(default_factory=time.process_time)
    steps: int = 0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.wall_seconds if self.wall_seconds else 0.0


def eval_text(logs: dict[str, Any]) -> str:
    """``eval loss 1.2345 acc 0.750 margin 0.41`` from one evaluation's logs (what the method reports)."""
    from gym.train.history import headline

    point = headline({key[len("eval_") :]: value for key, value in logs.items() if key.startswith("eval_")})
    names = {"loss": "loss", "accuracy": "acc", "margin": "margin", "reward": "reward"}
    return "eval " + " ".join(f"{names[key]} {value:.4f}" for key, value in point.items())


class LineProgress:
    """What a live bar says, as whole lines, for a log file or a pipe (CI, ``tee``).

    rich redraws a bar in place on a terminal; elsewhere it prints the last frame cut to 80 columns
    (``600/6…``, ``0:00:…``). Here each line is written whole when there is news: a field in ``news``
    was given (the loss of a logged step, an evaluation), or, without ``news``, a task finished; and
    once more at the end if the last line is stale. Same calls as ``rich.progress.Progress``.
    """

    def __init__(self, describe: Any, news: tuple[str, ...] = (), console: Any = None) -> None:
        from rich.console import Console

        self.describe, self.news = describe, news
        self.console = console or Console(soft_wrap=True)
        self.tasks: dict[int, dict[str, Any]] = {}
        self.started = time.perf_counter()

    def start(self) -> None:
        self.started = time.perf_counter()

    def add_task(
        self, description: str, total: float | None = None, completed: float = 0, **fields: Any
    ) -> int:
        self.tasks[len(self.tasks)] = {"description": description, "total": total, "completed": completed,
                                       "fields": fields, "said": None}  # fmt: skip
        return len(self.tasks) - 1

    def update(
        self, task_id: int, completed: float | None = None, advance: float | None = None, **fields: Any
    ) -> None:
        task = self.tasks[task_id]
        if completed is not None:
            task["completed"] = completed
        if advance is not None:
            task["completed"] += advance
        task["fields"].update(fields)
        told = any(key in self.news for key in fields)  # a log event (the loss, an evaluation) came in
        finished = not self.news and task["total"] is not None and task["completed"] >= task["total"]
        if told or finished:
            self._say(task)

    def stop(self) -> None:
        for task in self.tasks.values():
            self._say(task)

    def _say(self, task: dict[str, Any]) -> None:
        said = (task["completed"], tuple(sorted(task["fields"].items(), key=lambda kv: kv[0])))
        if said == task["said"]:
            return  # nothing new since the last line
        task["said"] = said
        elapsed = int(time.perf_counter() - self.started)
        clock = f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}"
        self.console.print(f"{self.describe(task)} {clock}", markup=False, highlight=False, soft_wrap=True)


def live_or_lines(make_live: Any, describe: Any, news: tuple[str, ...] = ()) -> Any:
    """``make_live()`` (a rich Progress) on a terminal, else a :class:`LineProgress` with the same calls."""
    from rich.console import Console

    if Console().is_terminal:
        return make_live()
    return LineProgress(describe, news)


def describe_training(task: dict[str, Any]) -> str:
    """``train 40/600 loss 1.2345 1,234 tok/s eval loss 1.1000``: one whole line of the training bar."""
    fields, total = task["fields"], task["total"]
    steps = f"{int(task['completed'])}/{int(total)}" if total else f"{int(task['completed'])}"
    line = f"train {steps} loss {fields.get('loss', '-')} {fields.get('speed', '-')} tok/s"
    return f"{line} {fields['eval']}" if fields.get("eval") else line


EVENTS_FILE = "progress.jsonl"
STOP_FILE = "stop_requested"


def _append_event(folder: str | None, **event: Any) -> None:
    if not folder:
        return
    path = Path(folder) / EVENTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"time": time.time(), **event}) + "\n")


class ProgressCallback(TrainerCallback):
    """Rich progress bar with loss and tokens/s; collects :class:`TrainLog`."""

    def __init__(self, log: TrainLog, show: bool = True) -> None:
        self.log = log
        self.show = show
        self.progress: Any = None
        self.task: Any = None
        self.token_source: Any = None  # set by the runner: a callable returning tokens trained so far

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.log.started = time.perf_counter()
        self.log.cpu_started = time.process_time()
        if state.is_world_process_zero:
            Path(args.output_dir, STOP_FILE).unlink(missing_ok=True)  # a stale request from a stopped run
            _append_event(args.output_dir, event="begin", step=state.global_step, max_steps=state.max_steps,
                          pid=os.getpid())  # fmt: skip
        if not (self.show and state.is_world_process_zero):
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = live_or_lines(
            lambda: Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[speed]} tok/s"),
                TextColumn("{task.fields[eval]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                transient=False,
            ),
            describe_training,
            news=("loss", "eval"),
        )
        self.progress.start()
        self.task = self.progress.add_task(
            "train", total=state.max_steps, completed=state.global_step, loss="-", speed="-", eval=""
        )

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.log.steps = state.global_step
        if self.token_source is not None:
            self.log.tokens = self.token_source()
        self.log.wall_seconds = time.perf_counter() - self.log.started
        if state.is_world_process_zero:
            _append_event(args.output_dir, event="step", step=state.global_step, max_steps=state.max_steps,
                          tokens=self.log.tokens, seconds=round(self.log.wall_seconds, 3))  # fmt: skip
        if Path(args.output_dir, STOP_FILE).is_file():  # asked to stop: checkpoint this step, then end
            control.should_save = True
            control.should_training_stop = True
        if self.progress is not None:
            self.progress.update(
                self.task, completed=state.global_step, speed=f"{self.log.tokens_per_second:,.0f}"
            )

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any
    ) -> None:
        if logs and state.is_world_process_zero:
            numbers = {k: v for k, v in logs.items() if isinstance(v, int | float)}
            _append_event(args.output_dir, event="log", step=state.global_step, **numbers)
        if logs and "loss" in logs:
            self.log.losses.append((state.global_step, float(logs["loss"])))
            if self.progress is not None:
                self.progress.update(self.task, loss=f"{logs['loss']:.4f}")
        if logs and self.progress is not None and any(key.startswith("eval_") for key in logs):
            self.progress.update(self.task, eval=eval_text(logs))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.log.wall_seconds = time.perf_counter() - self.log.started
        self.log.cpu_seconds = time.process_time() - self.log.cpu_started
        if state.is_world_process_zero:
            stopped = Path(args.output_dir, STOP_FILE).is_file() and state.global_step < state.max_steps
            _append_event(args.output_dir, event="end", step=state.global_step, max_steps=state.max_steps,
                          stopped=stopped)  # fmt: skip
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
