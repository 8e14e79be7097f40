"""A live progress bar for training (loss, tokens/s, ETA) and the numbers that go into train_results.json.

The Trainer's own tqdm bar knows steps but not tokens; Gym counts the tokens that carry loss and the
non-pad tokens of every batch, which is what throughput means for fine-tuning.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback


@dataclass
class TrainLog:
    """What happened during training, saved in train_results.json."""

    losses: list[tuple[int, float]] = field(default_factory=list)
    tokens: int = 0  # non-pad tokens seen
    started: float = field(default_factory=time.perf_counter)
    wall_seconds: float = 0.0
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
        if self.progress is not None:
            self.progress.update(
                self.task, completed=state.global_step, speed=f"{self.log.tokens_per_second:,.0f}"
            )

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any
    ) -> None:
        if logs and "loss" in logs:
            self.log.losses.append((state.global_step, float(logs["loss"])))
            if self.progress is not None:
                self.progress.update(self.task, loss=f"{logs['loss']:.4f}")
        if logs and self.progress is not None and any(key.startswith("eval_") for key in logs):
            self.progress.update(self.task, eval=eval_text(logs))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.log.wall_seconds = time.perf_counter() - self.log.started
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
