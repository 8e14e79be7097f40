"""gym.toml [compute] → SkyPilot task dict: resources, nodes, bucket, secrets (no SkyPilot import)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from gym.launch.task import CHECKPOINT_MOUNT, LaunchError, build_plan, run_name, secret_values
from gym.launch.templates import TRAIN_RUN

from .conftest import BASE


def test_accelerators_become_any_of_candidates(load) -> None:
    config, path = load()
    plan = build_plan(config, path, cwd=path.parent)
    assert plan.task["resources"] == {
        "infra": "aws",
        "use_spot": True,
        "disk_size": 300,
        "any_of": [{"accelerators": "A100:1"}, {"accelerators": "L4:1"}],
    }
    assert plan.task["num_nodes"] == 2 and plan.managed and plan.name == run_name(config)
    assert plan.name.startswith("gym-demo-") and len(plan.name) == len("gym-demo-") + 8


def test_one_accelerator_no_infra_and_cluster_mode(load) -> None:
    config, path = load(
        """
        [compute]
        accelerators = ["H100:8"]
        managed = false
        autostop_minutes = 0
        """
    )
    plan = build_plan(config, path, cwd=path.parent)
    assert plan.task["resources"] == {
        "use_spot": False,
        "disk_size": 256,
        "accelerators": "H100:8",
        "autostop": {"idle_minutes": 0, "down": True},
    }
    assert not plan.managed and plan.autostop_minutes == 0 and plan.task["num_nodes"] == 1
    assert "file_mounts" not in plan.task


def test_bucket_is_mounted_and_becomes_the_output_dir(load) -> None:
    config, path = load()
    plan = build_plan(config, path, ["--learning_rate", "1e-4"], cwd=path.parent)
    assert plan.task["file_mounts"] == {
        CHECKPOINT_MOUNT: {"source": "s3://my-bucket/gym", "mode": "MOUNT_CACHED"}
    }
    envs = plan.task["envs"]
    assert shlex.split(envs["GYM_FLAGS"]) == ["--learning_rate", "1e-4", "--output_dir", "/checkpoints/demo"]
    assert envs["GYM_CONFIG"] == "gym.toml"
    assert plan.task["workdir"] == str(path.parent.resolve())


def test_managed_without_bucket_warns_about_preemption(load) -> None:
    config, path = load("\n[compute]\n")
    notes = build_plan(config, path, cwd=path.parent).notes
    assert any("checkpoint_bucket" in note for note in notes)


def test_workdir_is_cwd_when_it_contains_the_config(load) -> None:
    config, path = load()
    plan = build_plan(config, path, cwd=path.parent.parent)
    assert plan.task["workdir"] == str(path.parent.parent.resolve())
    assert plan.task["envs"]["GYM_CONFIG"] == "proj/gym.toml"


def test_secrets_are_named_never_valued(load, monkeypatch: pytest.MonkeyPatch) -> None:
    config, path = load(
        """
        [train]
        report_to = ["wandb"]

        [train.grpo]
        api_key_env = "OPENAI_API_KEY"

        [compute]

        [hub]
        repo_id = "me/demo"
        token_env = "MY_HF_TOKEN"

        [space]
        repo_id = "me/demo-chat"
        reuse_push_token = true
        """
    )
    env = {"MY_HF_TOKEN": "hf_token_value_123", "WANDB_API_KEY": "wandb_value_456",
           "OPENAI_API_KEY": "sk-value-789", "GYM_API_KEY": "space_value_000"}  # fmt: skip
    plan = build_plan(config, path, cwd=path.parent)
    names = {spec.name: spec.required for spec in plan.secrets}
    assert names["MY_HF_TOKEN"] and names["WANDB_API_KEY"] and names["OPENAI_API_KEY"]
    assert names["GYM_API_KEY"] is False
    values, missing = secret_values(plan.secrets, env)
    assert values == env and not missing
    text = json.dumps(plan.task)
    assert "secrets" not in plan.task
    for value in env.values():
        assert value not in text
    for secret in env:
        assert secret not in plan.task["envs"]


def test_missing_required_secret_is_one_sentence(load) -> None:
    config, path = load('\n[compute]\n\n[hub]\nrepo_id = "me/demo"\n')
    plan = build_plan(config, path, cwd=path.parent)
    with pytest.raises(LaunchError, match=r"^set \$HF_TOKEN \(hub.token_env") as caught:
        secret_values(plan.secrets, {})
    assert "\n" not in str(caught.value)
    values, missing = secret_values(plan.secrets, {}, require=False)
    assert values == {} and [spec.name for spec in missing] == ["HF_TOKEN"]


def test_no_compute_table(load) -> None:
    config, path = load("")
    with pytest.raises(LaunchError, match=r"needs a \[compute\] table"):
        build_plan(config, path)


def test_data_outside_the_synced_folder(load) -> None:
    config, path = load(COMPUTE_ONLY, base=BASE.replace("data/train.jsonl", "../elsewhere.jsonl"))
    with pytest.raises(LaunchError, match=r"datasets.0.path: \.\./elsewhere.jsonl lies outside"):
        build_plan(config, path, cwd=path.parent)


COMPUTE_ONLY = "\n[compute]\n"


def _run_script(tmp_path: Path, env: dict[str, str]) -> list[str]:
    """Run the train run script with fake `gym` and `torchrun` that print their arguments."""
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("gym", "torchrun"):
        fake = bin_dir / tool
        fake.write_text(f'#!/bin/sh\nprintf "{tool}\\n"; for a in "$@"; do printf "%s\\n" "$a"; done\n')
        fake.chmod(0o755)
    full_env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **env}
    done = subprocess.run(["bash", "-c", TRAIN_RUN], env=full_env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_run_script_one_node_runs_gym_launch_directly(tmp_path: Path) -> None:
    flags = shlex.join(["--set", "project.name=a b", "--output_dir", "/checkpoints/demo"])
    out = _run_script(
        tmp_path,
        {"GYM_CONFIG": "my dir/gym.toml", "GYM_FLAGS": flags, "SKYPILOT_NUM_NODES": "1",
         "SKYPILOT_NODE_RANK": "0", "SKYPILOT_NODE_IPS": "10.0.0.1", "SKYPILOT_NUM_GPUS_PER_NODE": "1"},
    )  # fmt: skip
    assert out == ["gym", "launch", "my dir/gym.toml", "--set", "project.name=a b", "--output_dir",
                   "/checkpoints/demo"]  # fmt: skip


def test_run_script_several_nodes_start_torchrun_from_skypilot_variables(tmp_path: Path) -> None:
    out = _run_script(
        tmp_path,
        {"GYM_CONFIG": "gym.toml", "GYM_FLAGS": "", "SKYPILOT_NUM_NODES": "4", "SKYPILOT_NODE_RANK": "2",
         "SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.6\n10.0.0.7\n10.0.0.8", "SKYPILOT_NUM_GPUS_PER_NODE": "8",
         "GYM_MASTER_PORT": "29555"},
    )  # fmt: skip
    assert out == [
        "torchrun", "--nnodes=4", "--node_rank=2", "--nproc_per_node=8", "--master_addr=10.0.0.5",
        "--master_port=29555", "--no-python", "gym", "launch", "gym.toml",
    ]  # fmt: skip
