"""``train.cpu_threads = "auto"`` measures instead of guessing: the first steps try each thread count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.test_sft import _write

pytestmark = pytest.mark.slow


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: there is only one thread count to use")
def test_auto_threads_are_measured_on_the_first_steps(tmp_path: Path) -> None:
    config = _write(tmp_path, adapter="lora", steps=12, save_steps=1000)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(GYM_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "gym", "train", str(config), "--no-progress"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    measured = json.loads((tmp_path / "out" / "train_results.json").read_text())["cpu_threads"]
    cores = os.cpu_count()
    assert set(measured["seconds_per_token"]) == {"1", str(cores)}  # each candidate was timed
    costs = measured["seconds_per_token"]
    assert str(measured["chosen"]) == min(costs, key=costs.get)  # the faster per trained token is kept
    assert measured["steps"] == [2, 7]
    assert f"training on {measured['chosen']}" in done.stderr


def test_pinned_threads_skip_the_measurement(tmp_path: Path) -> None:
    config = _write(tmp_path, adapter="lora", steps=12, save_steps=1000, extra="cpu_threads = 1")
    env = {**os.environ, "GYM_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "gym", "train", str(config), "--no-progress"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cpu_threads" not in json.loads((tmp_path / "out" / "train_results.json").read_text())
