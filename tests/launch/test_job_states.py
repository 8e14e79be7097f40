"""SkyPilot's end states through Gym's commands: cancelled, failed run, failed setup, no resources.

Every job is launched with `gym launch --cloud` and ends for a real reason on the SkyPilot double: the
Action's cancel call (``gym.launch.cloud.cancel_job``) kills it, its `gym launch` fails on the node, the
node's pip finds no wheel to install, or no "cloud" has its accelerator. `gym status` and `gym logs`
then say in one sentence how it ended, and `gym logs` exits with SkyPilot's code for it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from .cloud_run import TRAIN, client_env, gym, job_name, write_project
from .node_image import NodeImage, node_image
from .sky_double import SkyDouble

pytestmark = pytest.mark.slow

SLEEPER = "python -c 'import time; print(\"training\", flush=True); time.sleep(600)'"


def _project(folder: Path, name: str, compute: str, dataset: str = "data/train.jsonl") -> Path:
    toml = TRAIN.format(max_steps=2).replace('name = "demo"', f'name = "{name}"')
    return write_project(folder, toml.replace('"data/train.jsonl"', f'"{dataset}"') + compute).parent


def _rows(done: subprocess.CompletedProcess) -> list[list[str]]:
    return [line.split() for line in done.stdout.splitlines()]


def test_cancel_kills_the_running_job_and_status_and_logs_say_so(tmp_path: Path) -> None:
    project = _project(tmp_path / "proj", "demo", '\n[compute]\naccelerators = ["L4:1"]\n')
    with SkyDouble(tmp_path / "sky", base_env={"GYM_TRAIN_CMD": SLEEPER}, gpus=0) as sky:
        env = client_env(tmp_path / "home", sky.endpoint)
        launched = gym(["launch", "--cloud", "gym.toml"], project, env)
        assert launched.returncode == 0, launched.stderr
        (job,) = sky.jobs.values()
        deadline = time.time() + 240
        while not any("training" in line for line in job.lines) and time.time() < deadline:
            time.sleep(0.2)
        running = gym(["status", "gym.toml"], project, env)
        name = job_name(project / "gym.toml")
        twice = f"from gym.launch.cloud import cancel_job\nfor _ in range(2): cancel_job({name!r}, 1, managed=True)"
        cancel = subprocess.run([sys.executable, "-c", twice], cwd=project, env=env, capture_output=True,
                                text=True, timeout=120)  # fmt: skip
        status = gym(["status", "gym.toml"], project, env)
        logs = gym(["logs", "gym.toml"], project, env)
    assert _rows(running) == [["1", name, "RUNNING", "recoveries:", "0"]], running.stdout + running.stderr
    assert cancel.returncode == 0, cancel.stderr  # the second time the job has ended: skipped
    assert job.status == "CANCELLED" and job.attempts[0].nodes[0].process.poll() is not None
    assert _rows(status)[0] == ["1", name, "CANCELLED", "recoveries:", "0"]
    assert status.stdout.splitlines()[1] == "  job 1 ended CANCELLED: it was cancelled"
    assert logs.returncode == 103 and "training" in logs.stdout
    assert "job 1 ended CANCELLED: it was cancelled" in logs.stderr and "Traceback" not in logs.stderr


def test_failed_run_no_resources_and_a_refused_cluster_end_in_skypilots_states(tmp_path: Path) -> None:
    failing = _project(tmp_path / "failing", "failing", '\n[compute]\naccelerators = ["L4:1"]\n', "/no/such/train.jsonl")  # fmt: skip
    big = _project(tmp_path / "big", "big", '\n[compute]\naccelerators = ["H100:8"]\n')
    cluster = _project(tmp_path / "cluster", "cluster", '\n[compute]\naccelerators = ["H100:8"]\nmanaged = false\n')  # fmt: skip
    with SkyDouble(tmp_path / "sky", gpus=0, accelerators={"L4"}) as sky:
        env = client_env(tmp_path / "home", sky.endpoint)
        for folder in (failing, big):
            done = gym(["launch", "--cloud", "gym.toml"], folder, env)
            assert done.returncode == 0, done.stderr
        refused = gym(["launch", "--cloud", "gym.toml"], cluster, env)
        failed_job, big_job = sky.jobs.values()
        assert failed_job.done.wait(300) and big_job.done.wait(60)
        failed_logs = gym(["logs", "gym.toml"], failing, env)
        big_status = gym(["status", "gym.toml"], big, env)
    assert failed_job.status == "FAILED" and failed_job.returncode == 1, "".join(failed_job.lines)[-3000:]
    assert (
        failed_logs.returncode == 100
        and "ERROR: Job 1 failed with return code list: [1]" in failed_logs.stdout
    )
    assert "job 1 ended FAILED: its run exited with an error on a node" in failed_logs.stderr
    assert big_job.status == "FAILED_NO_RESOURCE" and big_job.attempts == []  # no node was started
    assert big_status.stdout.splitlines()[1] == (
        "  job 2 ended FAILED_NO_RESOURCE: it never started: no enabled cloud had the requested accelerators; "
        "add candidates to compute.accelerators or change compute.infra"
    )
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "cloud launch failed: Failed to provision all possible launchable resources" in refused.stderr
    assert len(sky.jobs) == 2  # the refused cluster launch made no job


# The GitHub Action's cloud launch with `wait: true`: it follows the job to its end and says how it ended.
ACTION_WAITS = """\
from pathlib import Path
from action.launchers import LaunchRequest, launch_on_cloud
from gym.config import load_config
path = Path("gym.toml")
request = LaunchRequest(config=load_config(path), config_path=path, flags=[], cloud=True, env={}, wait=True)
print("detail:", launch_on_cloud(request).detail)
"""


def test_a_node_that_cannot_install_gym_fails_setup_and_the_action_says_so(tmp_path: Path) -> None:
    project = _project(tmp_path / "proj", "demo", '\n[compute]\naccelerators = ["L4:1"]\n')
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    image = node_image()
    without_wheel = NodeImage(wheels=empty, site=image.site, scripts=image.scripts)
    with SkyDouble(tmp_path / "sky", gpus=0, image=without_wheel) as sky:
        env = client_env(tmp_path / "home", sky.endpoint)
        action = subprocess.run([sys.executable, "-c", ACTION_WAITS], cwd=project, env=env, capture_output=True,
                                text=True, timeout=300)  # fmt: skip
        (job,) = sky.jobs.values()
        logs = gym(["logs", "gym.toml"], project, env)
    assert job.status == "FAILED_SETUP", "".join(job.lines)[-3000:]
    assert action.returncode == 0, action.stderr
    setup_failed = "job 1 ended FAILED_SETUP: its setup failed: installing Gym on the node did not work"
    assert f"detail: SkyPilot managed job `{job_name(project / 'gym.toml')}`: {setup_failed}" in action.stdout
    assert "No matching distribution found for zoo-gym" in logs.stdout
    assert logs.returncode == 100 and setup_failed in logs.stderr
