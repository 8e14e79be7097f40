"""compute.max_runtime_hours: the train task's run script stops the whole run when the time is up."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gym.launch.task import build_plan
from gym.launch.templates import TRAIN_RUN
from tests.conftest import REPO

from .conftest import COMPUTE


def _run_script(extra_env: dict[str, str], command: str) -> tuple[int, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYPILOT_", "GYM_"))}
    env.update(extra_env, GYM_TRAIN_CMD=command, SKYPILOT_NUM_GPUS_PER_NODE="0")
    start = time.monotonic()
    done = subprocess.run(["bash", "-c", TRAIN_RUN], env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, time.monotonic() - start


def test_limit_reaches_the_task(load) -> None:
    config, path = load(COMPUTE + "max_runtime_hours = 1.5\n")
    plan = build_plan(config, path, cwd=path.parent)
    assert plan.task["envs"]["GYM_MAX_RUNTIME_S"] == "5400"
    config, path = load()
    assert "GYM_MAX_RUNTIME_S" not in build_plan(config, path, cwd=path.parent).task["envs"]


def test_run_script_stops_a_run_that_overstays() -> None:
    code, seconds = _run_script({"GYM_MAX_RUNTIME_S": "1"}, "sleep 30")
    assert code == 124 and seconds < 15  # coreutils timeout's status: the job fails, billing stops
    assert _run_script({}, "true")[0] == 0  # no limit: the command runs as before
    assert _run_script({"GYM_MAX_RUNTIME_S": "30"}, "sh -c 'exit 3'")[0] == 3  # its own status survives


def test_negative_limit_is_refused(project) -> None:
    """The sentence `gym validate` shows, at the key's line and column; nothing is launched."""
    path = project(COMPUTE + "max_runtime_hours = -1\n")
    line = path.read_text().splitlines().index("max_runtime_hours = -1") + 1
    done = subprocess.run(
        [sys.executable, "-m", "gym", "validate", str(path)],
        cwd=path.parent, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 1
    assert (
        f"gym.toml:{line}:21: compute.max_runtime_hours: expected a number >= 0, got -1"
        in done.stdout + done.stderr
    )
