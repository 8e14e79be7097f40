"""``train.cpu_threads``: ``"auto"`` is one thread per usable core whatever the load (reproducible);
``"fastest"`` measures instead of guessing: the first steps try each thread count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gym.model.cpu_kernels.threads import usable_cores
from tests.train.test_sft import _write

pytestmark = pytest.mark.usefixtures("cpu_kernels_on")  # the kernels' own tests (tests/train/conftest.py)

FASTEST = 'cpu_threads = "fastest"'


@pytest.mark.slow
@pytest.mark.skipif(usable_cores() < 2, reason="one core: there is only one thread count to use")
def test_fastest_threads_are_measured_on_the_first_steps(tmp_path: Path) -> None:
    config = _write(tmp_path, adapter="lora", steps=12, save_steps=1000, extra=FASTEST)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(GYM_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "gym", "train", str(config), "--no-progress"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    measured = json.loads((tmp_path / "out" / "train_results.json").read_text())["cpu_threads"]
    cores = usable_cores()
    assert set(measured["seconds_per_token"]) == {"1", str(cores)}  # each candidate was timed
    costs = measured["seconds_per_token"]
    assert str(measured["chosen"]) == min(costs, key=costs.get)  # the faster per trained token is kept
    assert measured["steps"][0] == 2 and measured["steps"][1] <= 7  # fewer when one count is far slower
    assert f"training on {measured['chosen']}" in done.stderr
    assert "train.cpu_threads = 'fastest': the thread count is measured" in done.stderr  # said up front


@pytest.mark.slow  # it trains
def test_pinned_threads_skip_the_measurement(tmp_path: Path) -> None:
    """In this process (its torch already runs on the one thread the config pins): nothing is measured."""
    from gym.config import load_config
    from gym.train.runner import run_training

    config = load_config(_write(tmp_path, adapter="lora", steps=12, save_steps=1000, extra="cpu_threads = 1"))
    run_training(config, show_progress=False)
    assert "cpu_threads" not in json.loads((tmp_path / "out" / "train_results.json").read_text())


def test_auto_is_one_thread_per_usable_core_and_never_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default never times anything, so the machine's load cannot change the weights."""
    from gym.config import load_config
    from gym.model.cpu_kernels import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    config = load_config(_write(tmp_path, adapter="lora", steps=12, save_steps=1000))
    assert config.train.cpu_threads == "auto"
    assert threads.fixed_threads(config) == len(os.sched_getaffinity(0))
    assert threads.make_tuner(config, 100, lambda: 0, lambda line: None) is None
    assert threads.header_note(config) is None
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads.fixed_threads(config) is None  # the environment's count, left to torch


def tuned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seconds_per_step: dict[int, float], steps: int = 12
) -> tuple[Any, list[int], list[str]]:
    """The real tuner driven step by step, with a clock on which a step on N threads takes the given time."""
    import torch

    from gym.config import load_config
    from gym.model.cpu_kernels import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # else the environment's count is kept, untuned
    config = load_config(_write(tmp_path, adapter="lora", steps=steps, save_steps=1000, extra=FASTEST))
    now, trained, used, lines = [0.0], [0], [], []
    tuner = threads.make_tuner(config, steps, lambda: trained[0], lines.append, clock=lambda: now[0])
    assert tuner is not None
    before = torch.get_num_threads()
    try:
        for _ in range(steps):
            tuner.on_step_begin(None, None, None)
            current = torch.get_num_threads()
            used.append(current)
            now[0] += seconds_per_step.get(current, 1.0)
            trained[0] += 100
            tuner.on_step_end(None, None, None)
    finally:
        torch.set_num_threads(before)
    return tuner, used, lines


@pytest.mark.skipif(usable_cores() < 2, reason="one core: there is only one thread count to use")
def test_a_far_slower_thread_count_is_tried_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cores = usable_cores()
    tuner, used, lines = tuned(
        tmp_path, monkeypatch, {1: 0.1, cores: 3.4}
    )  # a loaded machine: many threads 34x slower
    assert tuner.chosen == 1
    assert used[1:].count(cores) == 1  # one trial, not three
    assert tuner.measured["steps"] == [2, 3]  # one round decides: nothing is left to compare with
    assert all(n == 1 for n in used[3:])  # the rest of the run on the fastest
    assert "training on 1" in lines[0]


@pytest.mark.skipif(usable_cores() < 2, reason="one core: there is only one thread count to use")
def test_a_clearly_faster_default_is_kept_after_one_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cores = usable_cores()
    tuner, used, lines = tuned(
        tmp_path, monkeypatch, {1: 0.1, cores: 0.07}
    )  # two idle cores: the tiny model trains 1.3x faster on two threads, a 26M Llama 1.7x
    assert tuner.chosen == cores
    assert used[1:3].count(1) == 1 and used[1:3].count(cores) == 1
    assert tuner.measured["steps"] == [2, 3]
    assert all(n == cores for n in used[3:])  # the slower count costs one step, not three
    assert f"training on {cores}" in lines[0]


@pytest.mark.skipif(usable_cores() < 2, reason="one core: there is only one thread count to use")
def test_leaving_the_default_takes_two_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cores = usable_cores()
    tuner, used, lines = tuned(tmp_path, monkeypatch, {1: 0.07, cores: 0.1})  # a busy machine: one is faster
    assert tuner.chosen == 1
    assert used[1:5].count(1) == 2 and used[1:5].count(cores) == 2
    assert tuner.measured["steps"] == [2, 5]
    assert all(n == 1 for n in used[5:])
    assert "training on 1" in lines[0]


@pytest.mark.skipif(usable_cores() < 2, reason="one core: there is only one thread count to use")
def test_close_thread_counts_are_each_tried_three_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cores = usable_cores()
    tuner, used, _ = tuned(tmp_path, monkeypatch, {1: 0.1, cores: 0.09})  # 1.11x: within step-to-step noise
    assert tuner.chosen == cores
    assert used[1:7].count(1) == 3 and used[1:7].count(cores) == 3
    assert tuner.measured["steps"] == [2, 7]
    assert all(n == cores for n in used[7:])


def scripted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, times: list[float]) -> Any:
    """The real tuner over 12 steps whose durations are ``times`` in order (warm-up first)."""
    from gym.config import load_config
    from gym.model.cpu_kernels import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    config = load_config(_write(tmp_path, adapter="lora", steps=12, save_steps=1000, extra=FASTEST))
    durations = iter([*times, *[times[-1]] * 12])
    now, trained = [0.0], [0]
    tuner = threads.make_tuner(config, 12, lambda: trained[0], lambda line: None, clock=lambda: now[0])
    import torch

    before = torch.get_num_threads()
    try:
        for _ in range(12):
            tuner.on_step_begin(None, None, None)
            now[0] += next(durations)
            trained[0] += 100
            tuner.on_step_end(None, None, None)
    finally:
        torch.set_num_threads(before)
    return tuner


@pytest.mark.skipif(usable_cores() < 2, reason="one core: there is only one thread count to use")
@pytest.mark.parametrize(
    "second",
    [
        0.085,  # a close first round (1.18x) decides nothing
        0.14,  # one disturbed two-thread step, 1.4x the one-thread step, must not move the run to one thread
        0.25,  # nor one 2.5x slower (past DROP_FACTOR, short of a loaded machine)
    ],
)
def test_a_disturbed_first_round_is_settled_by_the_fastest_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second: float
) -> None:
    """Warm-up, then one thread, two threads (``second``), one thread, two threads (0.07): the fastest steps
    of each count, 0.10 against 0.07, decide for two threads after two rounds."""
    tuner = scripted(tmp_path, monkeypatch, [1.0, 0.10, second, 0.10, 0.07, 0.10, 0.07])
    assert tuner.chosen == usable_cores()
    assert tuner.measured["steps"] == [2, 5]
    assert tuner.measured["seconds_per_token"][str(usable_cores())] == pytest.approx(0.07 / 100)


@pytest.mark.skipif(usable_cores() < 2, reason="one core: there is only one thread count to use")
def test_a_trial_runs_only_the_forward_on_the_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given the model (as Trainer passes it), each trial times the step's first forward per attended token;
    the backward and every later forward of the step run on the default count, and the hooks go once chosen."""
    import torch

    from gym.config import load_config
    from gym.model.cpu_kernels import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = usable_cores()
    config = load_config(_write(tmp_path, adapter="lora", steps=12, save_steps=1000, extra=FASTEST))
    now, forwards, rest = [0.0], [], []
    forward_seconds = {1: 0.05, cores: 0.03}  # per forward of 60 attended tokens: two threads 1.67x faster

    class Model(torch.nn.Module):
        def forward(self, input_ids: Any, attention_mask: Any = None) -> Any:
            forwards.append(torch.get_num_threads())
            now[0] += forward_seconds[torch.get_num_threads()]
            return input_ids

    model = Model()
    tuner = threads.make_tuner(config, 12, lambda: 0, lambda line: None, clock=lambda: now[0])
    assert tuner is not None
    before = torch.get_num_threads()
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[:, 30:] = 0  # 60 of 80 positions attended
    try:
        tuner.on_train_begin(None, None, None, model=model)
        for _ in range(12):
            tuner.on_step_begin(None, None, None)
            for _micro_batch in range(2):  # gradient accumulation: two forwards per step
                model(input_ids=torch.zeros(2, 40, dtype=torch.long), attention_mask=mask)
                rest.append(torch.get_num_threads())  # the backward runs on what the forward left
            tuner.on_step_end(None, None, None)
        model(input_ids=torch.zeros(1, 4, dtype=torch.long))
    finally:
        torch.set_num_threads(before)
    assert forwards[2:4] == [1, cores]  # step 2, a trial: one thread for its first forward only
    assert rest[2:4] == [cores, cores]  # ...and its backward, second forward and backward on the default
    assert tuner.chosen == cores and tuner.measured["steps"] == [2, 3]
    assert tuner.measured["seconds_per_token"]["1"] == pytest.approx(0.05 / 60)
    assert not tuner.hooks and forwards[-1] == cores  # after the choice, forwards are left alone
