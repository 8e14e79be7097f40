"""Torch threads for CPU training: ``train.cpu_threads``, and what ``"auto"`` and ``"fastest"`` do.

Reductions inside torch's CPU kernels are split by thread count, so two thread counts give weights that
differ in the last bits. ``"auto"`` is therefore a rule, not a timing: one thread per core this process
may run on (:func:`usable_cores`), or ``OMP_NUM_THREADS``; same machine, config, data and seed give the
same weights, resumed or not. ``"fastest"`` (opt-in, not reproducible) measures: the first steps time
each candidate's forward per trained token (forward and backward scale alike with threads), judge each by
its fastest trial (another process only slows a step down), drop a candidate :data:`CLEAR_MARGIN` slower
after a round or :data:`DROP_FACTOR` slower after any step, and leave torch's default only after
:data:`MIN_ROUNDS` steps unless one step was :data:`LOADED_FACTOR` slower (a loaded machine). Under
``train.cpu_kernels`` off, 'auto' and 'fastest' leave torch's default. Measurements in docs/cpu-kernels.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config import GymConfig

WARMUP_STEPS = 1  # the first step pays for lazy initialisation and allocation: never measured
TRIALS_PER_CANDIDATE = 3
MIN_STEPS_TO_TUNE = 12  # shorter runs keep one thread per core: measuring would cost more than it saves
DROP_FACTOR = 2.0  # a candidate this much slower per token than the best other is not tried again
CLEAR_MARGIN = 1.25  # after each round, a candidate this much slower than the best other is out
MIN_ROUNDS = 2  # steps of the default count before it is dropped: one disturbed step must not decide the run
LOADED_FACTOR = 4.0  # ...unless that one step was this much slower than the best other (a loaded machine)


def _input_tokens(inputs: tuple, kwargs: dict[str, Any]) -> int:
    """The tokens a forward computes: its attention mask's ones, else its ``input_ids``' count."""
    mask = kwargs.get("attention_mask")
    if mask is not None and hasattr(mask, "sum"):
        return int(mask.sum())
    ids = kwargs.get("input_ids", inputs[0] if inputs else None)
    return int(ids.numel()) if hasattr(ids, "numel") else 0


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask), else the machine's: never the load on them."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity call (macOS, Windows)
        return os.cpu_count() or 1


def candidates() -> list[int]:
    return sorted({1, usable_cores()})


def fixed_threads(config: GymConfig) -> int | None:
    """The thread count to set now, or None: leave torch as it is (a GPU, OMP_NUM_THREADS set, or the CPU
    kernels off: a number in ``train.cpu_threads`` still applies there, 'auto' and 'fastest' do not)."""
    from gym.model.device import plan_device

    plan = plan_device(config)
    if plan.device != "cpu":
        return None
    wanted = config.train.cpu_threads
    if wanted not in ("auto", "fastest"):
        return int(wanted)
    if not plan.cpu_kernels or os.environ.get("OMP_NUM_THREADS"):
        return None
    return usable_cores()  # 'fastest' starts here too: its trials leave every step but one forward on it


def header_note(config: GymConfig) -> str | None:
    """The line a run starts with when its weights will not be reproducible (``cpu_threads = 'fastest'``)."""
    if config.train.cpu_threads != "fastest" or make_tuner_skips(config, None):
        return None
    return (
        "train.cpu_threads = 'fastest': the thread count is measured on the first steps, so two runs of "
        "this config can end with weights that differ in the last bits ('auto' or a number is reproducible)"
    )


def make_tuner_skips(config: GymConfig, total_steps: int | None) -> bool:
    """Whether there is nothing to measure: a GPU or the CPU kernels off, a fixed count, OMP_NUM_THREADS,
    one core, a short run."""
    from gym.model.device import plan_device

    plan = plan_device(config)
    return (
        plan.device != "cpu"
        or not plan.cpu_kernels
        or config.train.cpu_threads != "fastest"
        or bool(os.environ.get("OMP_NUM_THREADS"))
        or len(candidates()) == 1
        or (total_steps is not None and 0 < total_steps < MIN_STEPS_TO_TUNE)
    )


def make_tuner(
    config: GymConfig,
    total_steps: int,
    tokens: Callable[[], int],
    report: Callable[[str], None],
    clock: Callable[[], float] = time.perf_counter,
) -> Any | None:
    """For ``cpu_threads = 'fastest'``: a callback that measures the thread counts on the first steps, or None
    when there is nothing to tune.

    ``report`` gets the one line that says what was chosen; the callback's ``measured`` (thread count ->
    seconds per token, and ``chosen``) goes into train_results.json.
    """
    import torch

    if make_tuner_skips(config, total_steps):
        return None
    from transformers import TrainerCallback

    class ThreadTuner(TrainerCallback):
        """Alternates the candidates over the first steps; keeps the fastest per token (or per step)."""

        def __init__(self) -> None:
            self.pending = [c for _ in range(TRIALS_PER_CANDIDATE) for c in candidates()]
            self.seconds: dict[int, list[float]] = {c: [] for c in candidates()}
            self.step = 0
            self.current: int | None = None
            self.started = 0.0
            self.tokens_before = 0
            self.spent: float | None = None  # the timed part of this step: its first forward, else the step
            self.trained = 0  # the tokens of that part
            self.armed = self.timing = False
            self.hooks: list[Any] = []  # on the trained model's forward (see on_train_begin)
            self.chosen: int | None = None
            self.dropped: set[int] = set()
            self.measured: dict[str, Any] = {}

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            model = kwargs.get("model")
            if model is not None and self.chosen is None:
                self.hooks = [model.register_forward_pre_hook(self._forward_begins, with_kwargs=True),
                              model.register_forward_hook(self._forward_ends)]  # fmt: skip

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.chosen is not None:
                return
            self.current = self.pending[0] if self.step >= WARMUP_STEPS and self.pending else None
            self.spent = None
            self.armed = self.current is not None and bool(self.hooks)
            if self.current is not None and not self.hooks:  # no model to hook: the whole step is timed
                torch.set_num_threads(self.current)
                self.started, self.tokens_before = clock(), tokens()

        def _forward_begins(self, module: Any, inputs: tuple, kwargs: dict[str, Any]) -> None:
            """The step's first forward runs on the candidate (its backward stays on the default count)."""
            if not self.armed:
                return
            self.armed, self.timing = False, True
            torch.set_num_threads(self.current)
            self.trained = _input_tokens(inputs, kwargs)
            self.started = clock()

        def _forward_ends(self, module: Any, inputs: tuple, output: Any) -> None:
            if not self.timing:
                return
            self.timing = False
            self.spent = clock() - self.started
            torch.set_num_threads(max(candidates()))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.chosen is not None:
                return
            self.step += 1
            if self.current is not None and not self.hooks:
                self.spent, self.trained = clock() - self.started, tokens() - self.tokens_before
            if self.current is not None and self.spent is not None:
                self.seconds[self.current].append(
                    self.spent / self.trained if self.trained > 0 else self.spent
                )
                self.pending.pop(0)
                self._drop_slow(DROP_FACTOR)
                if self._round_complete():
                    self._drop_slow(CLEAR_MARGIN)
            if self.step > WARMUP_STEPS and (not self.pending or len(self._running()) == 1):
                self._choose()

        def _running(self) -> list[int]:
            """The candidates not dropped for being slower."""
            return [c for c in candidates() if c not in self.dropped]

        def _round_complete(self) -> bool:
            """Whether every candidate still running has been measured, all of them equally often."""
            counts = {len(self.seconds[c]) for c in self._running()}
            return len(counts) == 1 and 0 not in counts

        def _costs(self) -> dict[int, float]:
            """Seconds per trained token of every candidate measured so far, at its fastest step."""
            return {c: min(v) for c, v in self.seconds.items() if v}

        def _drop_slow(self, factor: float) -> None:
            """No more trials for a candidate ``factor`` times slower per token than the best other.

            torch's default (one thread per core) is dropped on one step only when that step is
            :data:`LOADED_FACTOR` times slower (a loaded machine); otherwise it takes :data:`MIN_ROUNDS` steps.
            """
            cost = self._costs()
            for candidate, value in cost.items():
                others = [v for c, v in cost.items() if c != candidate]
                if not others or value <= factor * min(others):
                    continue
                default = candidate == max(candidates())
                if (
                    default
                    and len(self.seconds[candidate]) < MIN_ROUNDS
                    and value <= LOADED_FACTOR * min(others)
                ):
                    continue  # one step of the default, slower by less than a loaded machine: measure it again
                self.pending = [c for c in self.pending if c != candidate]
                self.dropped.add(candidate)

        def _choose(self) -> None:
            cost = self._costs()
            self.chosen = min(cost, key=cost.__getitem__)
            torch.set_num_threads(self.chosen)
            for hook in self.hooks:
                hook.remove()
            self.hooks = []
            slowest = max(cost.values())
            self.measured = {"chosen": self.chosen, "steps": [WARMUP_STEPS + 1, self.step],
                             "seconds_per_token": {str(c): v for c, v in cost.items()}}  # fmt: skip
            speed = ", ".join(f"{c} thread(s) {slowest / v:.2f}x" for c, v in sorted(cost.items()))
            report(f"cpu_threads = 'fastest' measured steps {WARMUP_STEPS + 1}-{self.step}: {speed}; "
                   f"training on {self.chosen}")  # fmt: skip

    return ThreadTuner()
