"""`gym launch --cloud` against SkyPilot's real client and a recording API server on 127.0.0.1.

Each test runs in a subprocess (sky_harness.py) with HOME in a temp folder: SkyPilot writes ~/.sky on
import, and its client must never find (or start) a real API server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

from .cloud_run import job_name
from .conftest import COMPUTE

HARNESS = Path(__file__).with_name("sky_harness.py")
TOKEN = "hf_contract_token_value_0123456789"
WANDB = "wandb_contract_value_9876543210"


def _run(
    args: list[str], cwd: Path, env: dict[str, str], tmp_path: Path
) -> tuple[subprocess.CompletedProcess, dict]:
    record = tmp_path / "record.json"
    done = subprocess.run(
        [sys.executable, str(HARNESS), str(record), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    return done, json.loads(record.read_text())


def _task_of(call: dict) -> dict:
    body = json.loads(call["body"])
    docs = list(yaml.safe_load_all(body.get("task") or body["dag"]))  # /launch has task, /validate dag
    return docs[-1]


def _only_in_secrets(calls: list[dict], value: str, name: str) -> None:
    """``value`` appears in the traffic only as the task's ``secrets[name]``."""
    for call in calls:
        count = call["body"].count(value)
        if not count:
            continue
        task = _task_of(call)
        assert task["secrets"][name] == value
        stripped = {k: v for k, v in task.items() if k != "secrets"}
        assert value not in json.dumps(stripped), f"{name} leaked outside secrets in {call['path']}"
        assert count == 1


def test_managed_launch_sends_the_expected_task(project, sky_env, tmp_path: Path) -> None:
    path = project('\n[train]\nreport_to = ["wandb"]\n' + COMPUTE + '\n[hub]\nrepo_id = "me/demo"\n')
    env = {**sky_env, "HF_TOKEN": TOKEN, "WANDB_API_KEY": WANDB}
    done, record = _run(
        ["launch", "--cloud", "gym.toml", "--learning_rate", "1e-4"], path.parent, env, tmp_path
    )
    assert done.returncode == 0, done.stderr + done.stdout
    paths = [(c["method"], c["path"]) for c in record["calls"]]
    assert paths[0] == ("GET", "/api/health")
    for expected in [("POST", "/validate"), ("POST", "/jobs/launch"), ("GET", "/api/get")]:
        assert expected in paths
    assert ("POST", "/launch") not in paths
    launch = next(c for c in record["calls"] if c["path"] == "/jobs/launch")
    assert json.loads(launch["body"])["name"] == job_name(path)
    task = _task_of(launch)
    assert task["num_nodes"] == 2
    candidates = task["resources"]["any_of"]
    assert sorted(next(iter(c["accelerators"])) for c in candidates) == ["A100", "L4"]
    assert all(c["infra"] == "aws" and c["use_spot"] and c["disk_size"] == 300 for c in candidates)
    assert task["file_mounts"]["/checkpoints"] == {
        "source": "s3://my-bucket/gym",
        "mode": "MOUNT_CACHED",  # a plain MOUNT can neither append nor write at random
        "persistent": True,
    }
    assert task["envs"]["GYM_FLAGS"] == "--learning_rate 1e-4 --output_dir /checkpoints/demo"
    assert set(task["secrets"]) == {"HF_TOKEN", "WANDB_API_KEY"}
    _only_in_secrets(record["calls"], TOKEN, "HF_TOKEN")
    _only_in_secrets(record["calls"], WANDB, "WANDB_API_KEY")
    assert "managed job id: 7" in done.stdout and "gym logs gym.toml" in done.stdout
    assert TOKEN not in done.stdout + done.stderr


def test_cluster_launch_tears_down_when_done(project, sky_env, tmp_path: Path) -> None:
    path = project('\n[compute]\naccelerators = ["L4:1"]\nmanaged = false\nautostop_minutes = 5\n')
    done, record = _run(
        ["launch", "--cloud", "gym.toml"], path.parent, {**sky_env, "HF_TOKEN": TOKEN}, tmp_path
    )
    assert done.returncode == 0, done.stderr + done.stdout
    launch = next(c for c in record["calls"] if c["path"] == "/launch")
    body = json.loads(launch["body"])
    assert body["cluster_name"] == job_name(path)
    resources = _task_of(launch)["resources"]
    assert resources["accelerators"] == {"L4": 1}
    assert resources["autostop"]["down"] is True and resources["autostop"]["idle_minutes"] == 5
    _only_in_secrets(record["calls"], TOKEN, "HF_TOKEN")
    assert f"job on cluster {job_name(path)} id: 7" in done.stdout


def test_dryrun_validates_and_redacts_without_a_server(project, sky_env, tmp_path: Path) -> None:
    path = project(COMPUTE + '\n[hub]\nrepo_id = "me/demo"\n')
    done, record = _run(
        ["launch", "--cloud", "--dryrun"], path.parent, {**sky_env, "HF_TOKEN": TOKEN}, tmp_path
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert record["calls"] == []
    assert TOKEN not in done.stdout + done.stderr
    printed = yaml.safe_load(done.stdout)
    assert printed["secrets"] == {"HF_TOKEN": "<redacted>"}
    assert printed["resources"]["any_of"] == [{"accelerators": "A100:1"}, {"accelerators": "L4:1"}]


def test_dryrun_rejects_what_skypilot_rejects(project, sky_env, tmp_path: Path) -> None:
    path = project('\n[compute]\ninfra = "nosuchcloud"\n')
    done, record = _run(["launch", "--cloud", "--dryrun"], path.parent, sky_env, tmp_path)
    assert done.returncode == 1 and record["calls"] == []
    assert "SkyPilot rejected the task" in done.stderr and "nosuchcloud" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["train", "eval", "serve"])
def test_sky_tasks_are_the_launcher_templates(name: str) -> None:
    from gym.launch.templates import render

    assert (REPO / "sky_tasks" / f"{name}.yaml").read_text() == render(name), (
        "sky_tasks/ is stale: run `python -m gym.launch.templates sky_tasks`"
    )


def test_sky_tasks_validate_with_skypilot(sky_env) -> None:
    code = (
        "import sky, yaml, sys\n"
        "for name in ('train', 'eval', 'serve'):\n"
        "    config = yaml.safe_load(open(f'sky_tasks/{name}.yaml'))\n"
        "    task = sky.Task.from_yaml_config(config)\n"
        "    print(name, task.name)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=sky_env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["train", "gym-train", "eval", "gym-eval", "serve", "gym-serve"]


def test_the_node_installs_the_extras_the_config_needs(project, sky_env, tmp_path: Path) -> None:
    """QLoRA needs bitsandbytes, DeepSpeed its package, the Liger switch its kernels: none of them is in
    ``zoo-gym[train,eval]``, so a node installing only that would fail on import after the GPUs were paid."""
    from gym import __version__

    plain = project('\n[compute]\naccelerators = ["L4:1"]\n')
    done, _ = _run(["launch", "--cloud", "--dryrun"], plain.parent, sky_env, tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    envs = yaml.safe_load(done.stdout)["envs"]
    assert (envs["GYM_PIP_SPEC"], envs["GYM_EXTRAS"]) == (f"zoo-gym[train,eval]=={__version__}", "train,eval")
    needy = project(
        '\n[train]\nadapter = "qlora"\nliger_kernel = true\n[train.distributed]\nstrategy = "ddp"\n'
        '\n[compute]\naccelerators = ["L4:2"]\n'
    )
    done, record = _run(["launch", "--cloud", "--dryrun"], needy.parent, sky_env, tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    envs = yaml.safe_load(done.stdout)["envs"]
    assert envs["GYM_PIP_SPEC"] == f"zoo-gym[train,eval,qlora,kernels]=={__version__}"
    assert envs["GYM_EXTRAS"] == "train,eval,qlora,kernels" and record["calls"] == []
