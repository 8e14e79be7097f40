"""`gym launch` ends with the push when gym.toml has [hub]: refused up front without a token, a failed push
keeps every output and is retried by the next `gym launch` (or `gym deploy`), and a finished push is never
repeated (what a recovered cloud job relies on: its gym_state.json lives in the checkpoint bucket)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.e2e.loop import free_port
from tests.hub.hub_double import HubDouble

pytestmark = pytest.mark.slow
TOKEN = "hf_" + "L" * 34
CONFIG = """\
[project]
name = "local-push"
output_dir = "out"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"

[train]
adapter = "lora"
max_steps = 2
batch_size = 4
max_length = 48

[eval]
tasks = []

[hub]
repo_id = "acme/local-push"
"""


def gym(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GYM_"))}
    base.update(
        PYTHONPATH=str(REPO), GYM_CACHE_DIR=str(cwd / "cache"), HF_HUB_OFFLINE="0", OMP_NUM_THREADS="1"
    )
    return subprocess.run([sys.executable, "-m", "gym", *args], cwd=cwd, env={**base, **env},
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def test_launch_pushes_once_and_a_failed_push_is_retried(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    rows = (REPO / "examples" / "quickstart" / "data" / "train.jsonl").read_text().splitlines()[:40]
    (tmp_path / "data" / "train.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "gym.toml").write_text(CONFIG)

    refused = gym(["launch", "gym.toml"], tmp_path)
    assert refused.returncode == 1 and "hub.token_env: $HF_TOKEN is not set" in refused.stderr, refused.stderr
    assert not (tmp_path / "out").exists()  # refused before any training

    with HubDouble(TOKEN, free_port()) as hub:
        hub.state.fail["commit"] = [503] * 10
        failed = gym(["launch", "gym.toml"], tmp_path, HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN)
        assert failed.returncode == 1, failed.stdout[-2000:]
        assert "the Hub failed while pushing acme/local-push (HTTP 503" in failed.stderr, failed.stderr
        assert "retry with `gym deploy`" in failed.stderr and "Traceback" not in failed.stderr
        assert TOKEN not in failed.stdout + failed.stderr
        out = tmp_path / "out"
        assert (out / "adapter_model.safetensors").is_file() and (out / "README.md").is_file()
        stages = json.loads((out / "gym_state.json").read_text())["stages"]
        assert stages["train"]["status"] == stages["card"]["status"] == "done" and "deploy" not in stages

        hub.state.fail.clear()
        retried = gym(["launch", "gym.toml"], tmp_path, HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN)
        assert retried.returncode == 0, retried.stdout[-2000:] + retried.stderr[-2000:]
        assert retried.stdout.count("already done for this config") == 2  # train, card (eval was skipped)
        assert "pushed acme/local-push" in retried.stdout
        assert hub.state.commits == ["model:acme/local-push"]

        again = gym(
            ["launch", "gym.toml"], tmp_path, HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, PYTHONPROFILEIMPORTTIME="1"
        )
        assert again.returncode == 0 and again.stdout.count("already done for this config") == 3
        imported = {line.rsplit("|", 1)[-1].strip() for line in again.stderr.splitlines()
                    if line.startswith("import time:")}  # fmt: skip
        model_stack = {"torch", "transformers", "peft"}
        assert imported and not imported & model_stack  # a finished run costs no model imports
        assert hub.state.commits == [
            "model:acme/local-push"
        ]  # a rerun (or a recovered job) never pushes twice
        assert set(hub.state.files["model:acme/local-push"]) >= {"adapter_config.json", "README.md"}
