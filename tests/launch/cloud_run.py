"""A real `gym launch --cloud` against the SkyPilot double (which installs Gym's wheel on its nodes) and,
where the run pushes, the Hub double: the pieces the node, multi-node, bucket and job-state tests share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

HF_TOKEN = "hf_" + "W" * 34
REPO_ID = "acme/demo"
QUICKSTART = REPO / "examples" / "quickstart" / "data" / "train.jsonl"

TRAIN = """\
[project]
name = "demo"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"

[train]
method = "sft"
adapter = "lora"
batch_size = 4
max_length = 64
max_steps = {max_steps}
save_steps = 2
"""


def write_project(folder: Path, toml: str, rows: int = 48) -> Path:
    """gym.toml and the first ``rows`` quickstart rows in ``folder``; returns the gym.toml path."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    lines = QUICKSTART.read_text().splitlines()[:rows]
    (folder / "data" / "train.jsonl").write_text("\n".join(lines) + "\n")
    path = folder / "gym.toml"
    path.write_text(toml)
    return path


def node_env(hub_url: str | None = None) -> dict[str, str]:
    """What every node has besides the venv: one thread per process, gloo on loopback, the Hub double, and
    a GPU node's code path (``GYM_CPU_KERNELS=0``: Gym's CPU kernels off)."""
    env = {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "GYM_CPU_KERNELS": "0"}  # fmt: skip
    if hub_url:
        env.update(HF_ENDPOINT=hub_url, HF_HUB_OFFLINE="0")
    return env


def client_env(home: Path, endpoint: str, **extra: str) -> dict[str, str]:
    """The user's shell: SkyPilot's client talks to the double only; no secret but those given."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SKYPILOT_", "HF_", "WANDB_", "GITHUB_", "GYM_"))
    }
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), SKYPILOT_DISABLE_USAGE_COLLECTION="1", SKYPILOT_API_SERVER_ENDPOINT=endpoint)
    env.update(PYTHONPATH=str(REPO), **extra)
    return env


def gym(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gym", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def job_name(gym_toml: Path) -> str:
    """The SkyPilot job name `gym launch --cloud` gives this config in a shell without $GITHUB_REPOSITORY
    (``gym-<project>-<hash of repository and config path>``: :func:`gym.launch.task.run_name`)."""
    from gym.config import load_config
    from gym.launch.task import run_name

    return run_name(load_config(gym_toml), {})
