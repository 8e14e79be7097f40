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

        self.progress = Progress(
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
