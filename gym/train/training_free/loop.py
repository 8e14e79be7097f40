"""The training-free GRPO loop: epochs of shuffled batches; per query G rollouts, rewards, and learning.

Per step (one batch of queries): every query is rolled out ``group_size`` times with the current
library in its prompt, scored with the reward registry, and, when the rewards differ, learned from
(summaries -> experiences -> operations). The batch's operations are consolidated in one call, held
to the rules, applied, and the library is saved as the next step file. Queries of a batch run
concurrently (bounded by the client's semaphore), all against the library as it was when the step
began, as in the paper.

A step file records where the run stands (epoch and next batch; the order of an epoch is a seeded
shuffle, so it is the same on rerun), so a rerun continues with the batch after the last saved step.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym.train.training_free import prompts
from gym.train.training_free.client import PolicyClient, add_totals
from gym.train.training_free.learner import Group, Learner
from gym.train.training_free.library import Library, enforce_rules, resume_library, save_step

log = logging.getLogger("gym.train.training_free")


@dataclass
class LoopOptions:
    """The knobs of one run (filled from gym.toml by the trainer)."""

    group_size: int = 5
    k: int = 2
    batch_size: int = 50
    epochs: int = 3
    max_steps: int = -1
    seed: int = 42
    temperature: float = 0.7
    max_completion_length: int = 256
    learner_temperature: float = 0.3
    learner_max_tokens: int = 2048
    json_retries: int = 3
    resume: bool = True
    show_progress: bool = True


@dataclass
class LoopResult:
    library: Library
    steps: list[dict[str, Any]] = field(default_factory=list)  # the steps run by this call
    wall_seconds: float = 0.0
    resumed_from_step: int = 0


def score(rewards: list[Any], group: Group) -> list[float | None]:
    """Sum of the reward functions per completion (TRL's conversational call); None when none judged it."""
    from gym.train.rewards import RewardError

    valid = [i for i, c in enumerate(group.completions) if c is not None]
    totals: list[float | None] = [None] * len(group.completions)
    if not valid:
        return totals
    completions = [[{"role": "assistant", "content": group.completions[i]}] for i in valid]
    for fn in rewards:
        try:
            values = fn([group.problem] * len(valid), completions, reference=[group.reference] * len(valid))
        except RewardError as error:
            raise ValueError(str(error)) from error
        for i, value in zip(valid, values, strict=True):
            if value is not None and not math.isnan(value):
                totals[i] = (totals[i] or 0.0) + float(value)
    return totals


class TrainingFreeLoop:
    """Runs the epochs over ``rows`` (``{"prompt": messages, "reference": str | None}``)."""

    def __init__(self, rows: list[dict[str, Any]], rewards: list[Any], client: PolicyClient, folder: Path,
                 options: LoopOptions, model: str, learner: PolicyClient | None = None) -> None:  # fmt: skip
        """``learner``: the learner's own endpoint, sharing ``client``'s meter; default: ``client`` itself."""
        self.rows, self.rewards, self.client = rows, rewards, client
        self.folder, self.options, self.model = folder, options, model
        self.learner = Learner(learner or client, options.k, options.learner_temperature,
                               options.learner_max_tokens, options.json_retries)  # fmt: skip

    def batches(self, epoch: int) -> list[list[int]]:
        order = list(range(len(self.rows)))
        random.Random(self.options.seed + epoch).shuffle(order)
        size = max(1, self.options.batch_size)
        return [order[i : i + size] for i in range(0, len(order), size)]

    def start(self) -> Library:
        library = resume_library(self.folder) if self.options.resume else None
        if library is None:
            return Library(model=self.model)
        if library.model and library.model != self.model:
            log.warning(
                "the library in %s was learned with %s; continuing with %s",
                self.folder,
                library.model,
                self.model,
            )
        log.info("resuming from step %d (%d experiences)", library.step, len(library.experiences))
        return library

    async def run(self) -> LoopResult:
        started = time.perf_counter()
        library = self.start()
        result = LoopResult(library, resumed_from_step=library.step)
        with _progress(self.options.show_progress) as bar:
            while library.epoch < self.options.epochs:
                batches = self.batches(library.epoch)
                if library.batch >= len(batches):
                    library.epoch, library.batch = library.epoch + 1, 0
                    continue
                if 0 < self.options.max_steps <= library.step:
                    break
                library, stats = await self.step(library, [self.rows[i] for i in batches[library.batch]], bar)
                library.epoch, library.batch = (
                    (library.epoch, library.batch + 1)
                    if library.batch + 1 < len(batches)
                    else (library.epoch + 1, 0)
                )
                save_step(self.folder, library)
                result.steps.append(stats)
                log.info("step %d: %s", library.step, _line(stats))
        result.library, result.wall_seconds = library, time.perf_counter() - started
        return result

    async def step(
        self, library: Library, rows: list[dict[str, Any]], bar: Any
    ) -> tuple[Library, dict[str, Any]]:
        started, before = time.perf_counter(), self.client.meter.snapshot()
        task = (
            bar.add_task(f"step {library.step + 1}", total=len(rows), req=0, tin=0, tout=0)
            if bar is not None
            else None
        )

        async def one(row: dict[str, Any]) -> tuple[Group, list[Any]]:
            group = await self.rollouts(library, row)
            operations = await self.learner.learn(library, group) if group.informative else []
            if bar is not None:
                usage = self.client.meter.since(before)
                bar.update(
                    task, advance=1, req=usage["requests"], tin=usage["tokens_in"], tout=usage["tokens_out"]
                )
            return group, operations

        done = await asyncio.gather(*(one(row) for row in rows))
        if all(c is None for group, _ in done for c in group.completions):
            raise ValueError(
                f"every rollout of step {library.step + 1} failed (see the warnings above); the endpoint is down "
                "or rejects the requests. The library is saved up to the previous step: rerun to continue"
            )
        proposed = [op for _, operations in done for op in operations]
        merged = await self.learner.consolidate(library, proposed)
        applied = enforce_rules(merged, proposed, len(library.experiences))
        updated = library.apply(applied)
        updated.step = library.step + 1
        rewards = [r for group, _ in done for r in group.rewards if r is not None]
        stats = {
            "step": updated.step,
            "epoch": library.epoch,
            "queries": len(rows),
            "groups_kept": sum(group.informative for group, _ in done),
            "failed_rollouts": sum(c is None for group, _ in done for c in group.completions),
            "mean_reward": round(sum(rewards) / len(rewards), 6) if rewards else None,
            "proposed": dict(Counter(op.kind for op in proposed)),
            "applied": dict(Counter(op.kind for op in applied)),
            "experiences": len(updated.experiences),
            "seconds": round(time.perf_counter() - started, 3),
            **self.client.meter.since(before),
        }
        updated.stats, updated.totals = stats, add_totals(library.totals, stats)
        return updated, stats

    async def rollouts(self, library: Library, row: dict[str, Any]) -> Group:
        messages = prompts.rollout_messages(row["prompt"], library.experiences)
        completions = await asyncio.gather(
            *(self.client.chat(messages, temperature=self.options.temperature,
                               max_tokens=self.options.max_completion_length) for _ in range(self.options.group_size))
        )  # fmt: skip
        group = Group(row["prompt"], row.get("reference"), list(completions), [])
        group.rewards = score(self.rewards, group)
        return group


def _line(stats: dict[str, Any]) -> str:
    return (
        f"{stats['groups_kept']}/{stats['queries']} groups kept, applied {stats['applied'] or 'nothing'}, "
        f"{stats['experiences']} experiences, {stats['requests']} requests ({stats['failed']} failed), "
        f"tokens in/out {stats['tokens_in']}/{stats['tokens_out']}"
    )


def _describe_step(task: dict[str, Any]) -> str:
    """``step 3 8/8 queries, 24 req, tok in/out 1200/800``: one whole line when a step's queries are done."""
    fields, total = task["fields"], task["total"]
    return (f"{task['description']} {int(task['completed'])}/{int(total)} queries, {fields['req']} req, "
            f"tok in/out {fields['tin']}/{fields['tout']}")  # fmt: skip


class _progress:
    """A rich bar per step (queries done, requests, tokens in/out), or nothing when progress is off."""

    def __init__(self, show: bool) -> None:
        self.show, self.bar = show, None

    def __enter__(self) -> Any:
        if self.show:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            from gym.train.progress import live_or_lines

            self.bar = live_or_lines(lambda: Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[req]} req"), TextColumn("tok in/out {task.fields[tin]}/{task.fields[tout]}"),
                TimeElapsedColumn(),
            ), _describe_step)  # fmt: skip
            self.bar.start()
        return self.bar

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
