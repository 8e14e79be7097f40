"""The one-click deploy the product is known for, verbatim:

    gym deploy --model_path ./output/qwen3-lora --hf_token $HF_TOKEN --push_to_hub

from a free account (the commonest one since July 2026), against the Hub double that runs the Space it gets.
The model is private (the default without a gym.toml), and no token may land in the Space unasked: the Space
carries its own copy of the weights in its own private repo, reads no repo and gets no HF_TOKEN secret.
It is created on ZeroGPU (what a free personal account may host), built, started, and answers as `gym serve`
does at temperature 0.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.api.conftest import free_port
from tests.hub.hub_double import FREE, HubDouble
from tests.hub.test_deploy import gym
from tests.hub.test_space_runtime_flow import served_answer, zerogpu_space_venv  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow
TOKEN = "hf_FreeAccountSeedLineToken0042"


def test_the_seed_line_verbatim_leaves_a_working_space_without_a_token(
    lora_dir: Path,
    cache_root: Path,
    tmp_path: Path,
    zerogpu_space_venv: Path,  # noqa: F811
) -> None:
    from gym.hub.space_runtime import QUESTION

    shutil.copytree(lora_dir, tmp_path / "output" / "qwen3-lora")
    with HubDouble({TOKEN: FREE}, free_port()) as hub:
        hub.state.run_spaces = True
        hub.state.space_env = {"XDG_CACHE_HOME": str(cache_root)}
        args = ["deploy", "--model_path", "./output/qwen3-lora", "--hf_token", TOKEN, "--push_to_hub"]
        done = gym(args, cache_root, tmp_path, HF_ENDPOINT=hub.url)
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-4000:]
        said = " ".join(done.stdout.split())
        assert "hardware auto → zero-a10g: freebie is a free personal account" in said
        assert (
            "space reads the model from a copy of its weights in its own repo (private, like freebie/qwen3-lora), "
            "so it holds no token; to serve from the model repo instead, give it a read token with "
            "--space-hf-token-env VAR (space.hf_token_env)"
        ) in said
        for key in ("model:freebie/qwen3-lora", "space:freebie/qwen3-lora-chat"):
            created = hub.state.repos[key]
            assert created.get("visibility") == "private" or created.get("private") is True, created
        assert hub.state.hardware["freebie/qwen3-lora-chat"] == "zero-a10g"
        assert hub.state.secrets.get("freebie/qwen3-lora-chat", {}) == {}  # no token in the Space
        space = hub.state.files["space:freebie/qwen3-lora-chat"]
        assert (
            space["model/adapter_model.safetensors"] == (lora_dir / "adapter_model.safetensors").read_bytes()
        )
        assert json.loads(space["gym_space.json"])["model"] == "model"
        assert not any(name.startswith("model/checkpoints") or name == "model/README.md" for name in space)
        expected = served_answer(lora_dir, "freebie/qwen3-lora", QUESTION, cache_root, 16)
        assert f"answered a chat request: {expected.strip().splitlines()[0]!r}" in out
        assert TOKEN not in out
        for files in hub.state.files.values():
            assert all(TOKEN.encode() not in content for content in files.values())
