"""`gym status` and `gym logs` through SkyPilot's real SDK against the SkyPilot double, log streaming included."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from .cloud_run import job_name
from .sky_double import SkyDouble

MANAGED = '\n[compute]\naccelerators = ["L4:1"]\n'
CLUSTER = '\n[compute]\naccelerators = ["L4:1"]\nmanaged = false\n'


def gym(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gym", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_status_lists_the_runs_managed_jobs_with_recoveries(project, sky_env, tmp_path: Path) -> None:
    path = project(MANAGED)
    name = job_name(path)
    with SkyDouble(tmp_path) as sky:
        sky.add_job(name, ["old\n"], status="FAILED")
        sky.add_job("gym-other", ["not ours\n"])
        sky.add_job(name, ["step 1\n"], status="RUNNING", recovery_count=2)
        done = gym(
            ["status", "gym.toml"], path.parent, {**sky_env, "SKYPILOT_API_SERVER_ENDPOINT": sky.endpoint}
        )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert rows[0] == ["1", name, "FAILED", "recoveries:", "0"]
    assert (
        done.stdout.splitlines()[1]
        == "  job 1 ended FAILED: its run exited with an error on a node (the log shows where)"
    )
    assert rows[2:] == [["3", name, "RUNNING", "recoveries:", "2"]]
    queue = next(c for c in sky.calls if c["path"] == "/jobs/queue/v2")
    assert json.loads(queue["body"])["name_match"] == name


def test_status_of_a_cluster_run_and_of_no_jobs(project, sky_env, tmp_path: Path) -> None:
    path = project(CLUSTER)
    name = job_name(path)
    with SkyDouble(tmp_path) as sky:
        env = {**sky_env, "SKYPILOT_API_SERVER_ENDPOINT": sky.endpoint}
        gone = gym(["status", "gym.toml"], path.parent, env)
        sky.add_job(name, ["hello\n"], managed=False)  # the cluster is up again, with a job on it
        listed = gym(["status", "gym.toml"], path.parent, env)
    assert gone.returncode == 0 and gone.stdout.startswith(
        f"no cluster {name} is up: it is torn down once its job has ended"
    )
    assert listed.returncode == 0 and listed.stdout.split() == ["1", name, "SUCCEEDED"], listed.stdout


def test_logs_stream_while_the_job_runs(project, sky_env, tmp_path: Path) -> None:
    """Lines reach the terminal as the job writes them, and the command ends with the job's exit code."""
    path = project(MANAGED)
    name = job_name(path)
    with SkyDouble(tmp_path) as sky:
        job = sky.add_job(name, ["[train] running\n"], status="RUNNING")
        process = subprocess.Popen(
            [sys.executable, "-m", "gym", "logs", "gym.toml"], cwd=path.parent,
            env={**sky_env, "SKYPILOT_API_SERVER_ENDPOINT": sky.endpoint, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdout is not None
        seen: list[str] = []
        reader = threading.Thread(target=lambda: seen.extend(process.stdout), daemon=True)
        reader.start()
        deadline = time.time() + 90
        while not any("[train] running" in line for line in seen) and time.time() < deadline:
            time.sleep(0.1)
        assert any("[train] running" in line for line in seen), "the first line did not arrive while running"
        assert process.poll() is None  # still following
        job.lines.append("[eval] done\n")
        time.sleep(0.5)
        job.finish("FAILED")
        code = process.wait(timeout=60)
        reader.join(timeout=10)
    assert "".join(seen).count("[eval] done") == 1
    assert code == 100, process.stderr.read() if process.stderr else ""


def test_logs_of_a_given_job_without_following(project, sky_env, tmp_path: Path) -> None:
    path = project(CLUSTER)
    name = job_name(path)
    with SkyDouble(tmp_path) as sky:
        sky.add_job(name, ["first run\n"], managed=False)
        sky.add_job(name, ["second run\n"], status="RUNNING", managed=False)
        env = {**sky_env, "SKYPILOT_API_SERVER_ENDPOINT": sky.endpoint}
        done = gym(["logs", "gym.toml", "--job-id", "1", "--no-follow"], path.parent, env)
    assert done.returncode == 0, done.stderr
    assert "first run" in done.stdout and "second run" not in done.stdout
    call = next(c for c in sky.calls if c["path"] == "/logs")
    assert json.loads(call["body"])["cluster_name"] == name and json.loads(call["body"])["job_id"] == 1


def test_status_without_compute_is_one_sentence(project, sky_env) -> None:
    path = project("")
    done = gym(["status", "gym.toml"], path.parent, sky_env)
    assert done.returncode == 1 and "has no [compute] table" in done.stderr and "Traceback" not in done.stderr


def test_cancel_of_a_job_on_the_runs_cluster_goes_through_skypilots_cancel(
    project, sky_env, tmp_path
) -> None:
    """The Action's cancel for a cluster run (``sky.cancel``): the job is CANCELLED, `gym logs` exits 103."""
    path = project(CLUSTER)
    name = job_name(path)
    with SkyDouble(tmp_path) as sky:
        job = sky.add_job(name, ["step 1\n"], status="RUNNING", managed=False)
        env = {**sky_env, "SKYPILOT_API_SERVER_ENDPOINT": sky.endpoint}
        code = f"from gym.launch.cloud import cancel_job; cancel_job({name!r}, 1, managed=False)"
        cancel = subprocess.run([sys.executable, "-c", code], cwd=path.parent, env=env, capture_output=True,
                                text=True, timeout=120)  # fmt: skip
        logs = gym(["logs", "gym.toml"], path.parent, env)
    assert cancel.returncode == 0, cancel.stderr
    body = json.loads(next(c["body"] for c in sky.calls if c["path"] == "/cancel"))
    assert body["cluster_name"] == name and body["job_ids"] == [1]
    assert job.status == "CANCELLED"
    assert logs.returncode == 103 and "job 1 ended CANCELLED: it was cancelled" in logs.stderr
