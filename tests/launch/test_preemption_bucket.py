"""Spot preemption with ``compute.checkpoint_bucket``: the checkpoints survive in the bucket, nothing else does.

`gym launch --cloud` sends the task with ``file_mounts: {/checkpoints: s3://...}`` and ``--output_dir
/checkpoints/demo``; the SkyPilot double keeps the bucket in a host folder mounted (relocated) on every
node. After the first complete checkpoint it preempts the job; the recovered attempt runs on fresh nodes
(new HOME, cache, venv, workdir), resumes from the checkpoint in the bucket and pushes the model once;
`gym status` reports the recovery, and the Hub token appears in no log or node file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hub.hub_double import HubDouble

from .cloud_run import HF_TOKEN, REPO_ID, TRAIN, client_env, gym, node_env, write_project
from .sky_double import Job, SkyDouble, free_port
from .sky_nodes import bucket_folder

pytestmark = pytest.mark.slow

BUCKET = "s3://acme-checkpoints/gym"
COMPUTE = f"""
[compute]
accelerators = ["L4:1"]
use_spot = true
checkpoint_bucket = "{BUCKET}"

[hub]
repo_id = "{REPO_ID}"
"""


def test_preempted_job_resumes_from_the_bucket_on_fresh_nodes_and_pushes_once(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    write_project(project, TRAIN.format(max_steps=6) + COMPUTE)
    with HubDouble(HF_TOKEN, free_port()) as hub:
        with SkyDouble(tmp_path / "sky", base_env=node_env(hub.url), gpus=0) as sky:
            run = bucket_folder(sky.root, BUCKET) / "demo"
            at_preemption: list[str] = []

            def preempt(job: Job) -> bool:
                saved = sorted(p.parent.name for p in run.glob("checkpoints/checkpoint-*/gym_complete.json"))
                at_preemption.extend(saved)
                return bool(saved)

            sky.preempt = preempt
            env = client_env(tmp_path / "home", sky.endpoint, HF_TOKEN=HF_TOKEN)
            done = gym(["launch", "--cloud", "gym.toml"], project, env)
            assert done.returncode == 0, done.stderr + done.stdout
            (job,) = sky.jobs.values()
            assert job.done.wait(900), "the job did not finish"
            status = gym(["status", "gym.toml"], project, env, timeout=120)
        commits = list(hub.state.commits)
    log = "".join(job.lines)
    (tmp_path / "job.log").write_text(log)
    assert job.status == "SUCCEEDED" and job.recovery_count == 1, log[-4000:]
    assert "preempted; recovering on a new node" in log
    assert status.stdout.split()[:5] == ["1", "gym-demo", "SUCCEEDED", "recoveries:", "1"], status.stdout
    for where, text in (("the launch output", done.stdout + done.stderr), ("the job log", log),
                        ("gym status", status.stdout + status.stderr)):  # fmt: skip
        assert HF_TOKEN not in text, f"the Hub token leaked into {where}"
    for folder in (run, *(attempt.nodes[0].folder for attempt in job.attempts)):
        for path in (p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
            assert HF_TOKEN.encode() not in path.read_bytes(), f"the Hub token leaked into {path}"
    assert job.task["envs"]["GYM_FLAGS"] == "--output_dir /checkpoints/demo"  # what Gym sent
    first, second = (attempt.nodes[0] for attempt in job.attempts)
    assert job.attempts[0].mounts == job.attempts[1].mounts == {"/checkpoints": run.parent}
    assert first.env["GYM_FLAGS"] == second.env["GYM_FLAGS"] == f"--output_dir {run}"  # mounted there
    assert first.folder != second.folder and first.env["HOME"] != second.env["HOME"]
    assert first.env["GYM_CACHE_DIR"] != second.env["GYM_CACHE_DIR"]
    assert not (second.workdir / "outputs").exists()  # nothing of the run lives on the node

    # The recovered attempt read the bucket: it resumed from the checkpoint the first attempt completed.
    step = max(int(name.split("-")[1]) for name in at_preemption)
    train = json.loads((run / "train_results.json").read_text())
    assert train["resumed_from"] == str(run / "checkpoints" / f"checkpoint-{step}")
    assert train["steps"] == 6
    assert commits.count(f"model:{REPO_ID}") == 1
