"""Helpers for the cloud-launch tests: a project folder with gym.toml, and a SkyPilot-safe environment."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from gym.config import load_config
from tests.api.conftest import cache_root  # noqa: F401 - the builtin model cache, for the jobs that train
from tests.conftest import REPO

BASE = """\
[project]
name = "demo"

[model]
name_or_path = "builtin:tiny"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"
"""

COMPUTE = """
[compute]
accelerators = ["A100:1", "L4:1"]
infra = "aws"
use_spot = true
num_nodes = 2
disk_size = 300
checkpoint_bucket = "s3://my-bucket/gym"
"""


@pytest.fixture
def project(tmp_path: Path):
    """Write ``BASE + extra`` as gym.toml in a fresh folder (with its data file); returns the path."""

    def write(extra: str = COMPUTE, base: str = BASE) -> Path:
        folder = tmp_path / "proj"
        (folder / "data").mkdir(parents=True, exist_ok=True)
        (folder / "data" / "train.jsonl").write_text('{"instruction": "hi", "output": "ho"}\n')
        path = folder / "gym.toml"
        path.write_text(base + textwrap.dedent(extra), encoding="utf-8")
        return path

    return write


@pytest.fixture
def load(project):
    def build(extra: str = COMPUTE, base: str = BASE):
        path = project(extra, base)
        return load_config(path), path

    return build


@pytest.fixture
def sky_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a subprocess that imports SkyPilot: a temp HOME, no telemetry, no secrets."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYPILOT_", "HF_", "WANDB_"))}
    env.update(HOME=str(home), SKYPILOT_DISABLE_USAGE_COLLECTION="1", PYTHONPATH=str(REPO))
    return env
