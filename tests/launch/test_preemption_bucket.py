"""Spot preemption with ``compute.checkpoint_bucket``: the checkpoints survive in the bucket, nothing else does.

`gym launch --cloud` sends the task with ``file_mounts: {/checkpoints: {source: s3://..., mode:
MOUNT_CACHED}}`` and ``--output_dir /checkpoints/demo``. MOUNT_CACHED because SkyPilot's plain MOUNT
"does not support ... random writes and append operations" while MOUNT_CACHED (rclone's VFS cache)
"supports all write operations" (docs.skypilot.co/en/latest/reference/storage.html, Storage modes), and
Gym appends to progress.jsonl at every step and replaces its state files. The SkyPilot double keeps the
bucket in a host folder mounted (relocated) on every node, and its MOUNT mode refuses appends and random
writes as the FUSE mounts do (first test). After the first complete checkpoint it preempts the job; the
recovered attempt runs on fresh nodes (new HOME, cache, venv, workdir), resumes from the checkpoint in the
bucket and pushes the model once; `gym status` reports the recovery, and the Hub token appears in no log or
node file. A bucket that does not exist is never created: the launch stops with one sentence.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hub.hub_double import HubDouble

from .cloud_run import HF_TOKEN, REPO_ID, TRAIN, client_env, gym, job_name, node_env, write_project
from .sky_double import Job, SkyDouble, free_port
from .sky_nodes import bucket_folder

BUCKET = "s3://acme-checkpoints/gym"
COMPUTE = f"""
[compute]
accelerators = ["L4:1"]
use_spot = true
checkpoint_bucket = "{BUCKET}"

[hub]
repo_id = "{REPO_ID}"
"""


# Each write Gym makes in its checkpoint folder, tried on a node: a new file, an append, an in-place rewrite.
WRITES = """\
import os, sys
folder = sys.argv[1]
os.makedirs(folder, exist_ok=True)
for what, call in [("new", lambda: open(os.path.join(folder, "state.json"), "w").write("{}")),
                   ("replace", lambda: (open(os.path.join(folder, "tmp.json"), "w").write("{}"),
                                        os.replace(os.path.join(folder, "tmp.json"), os.path.join(folder, "state.json")))),
                   ("append", lambda: open(os.path.join(folder, "progress.jsonl"), "a").write("{}\\n")),
                   ("rewrite", lambda: open(os.path.join(folder, "state.json"), "r+").write("[]"))]:
    try:
        call()
        print(what, "ok")
    except OSError as error:
        print(what, "refused", os.strerror(error.errno))
"""


def test_a_mount_bucket_refuses_appends_and_random_writes_and_mount_cached_takes_them(tmp_path: Path) -> None:
    with SkyDouble(tmp_path / "sky", gpus=0) as sky:
        sky.create_bucket("s3://plain/run")
        sky.create_bucket("s3://cached/run")
        jobs = {}
        for mode, bucket in (("MOUNT", "s3://plain/run"), ("MOUNT_CACHED", "s3://cached/run")):
            task = {"name": mode.lower(), "file_mounts": {"/ckpt": {"source": bucket, "mode": mode}},
                    "run": f"python -c '{WRITES}' /ckpt/demo"}  # fmt: skip
            jobs[mode] = sky.launch(task, mode.lower())
        for job in jobs.values():
            assert job.done.wait(120), "".join(job.lines)
    plain, cached = ("".join(jobs[mode].lines).split("\n") for mode in ("MOUNT", "MOUNT_CACHED"))
    assert plain[:4] == ["new ok", "replace ok", "append refused Operation not supported",
                         "rewrite refused Operation not supported"], plain  # fmt: skip
    assert cached[:4] == ["new ok", "replace ok", "append ok", "rewrite ok"], cached
    assert (bucket_folder(sky.root, "s3://cached/run") / "demo" / "progress.jsonl").read_text() == "{}\n"


def test_a_bucket_that_does_not_exist_is_one_sentence_and_never_created(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    write_project(project, TRAIN.format(max_steps=2) + COMPUTE.replace("acme-checkpoints", "acme-checkpints"))
    with SkyDouble(tmp_path / "sky", gpus=0) as sky:
        sky.create_bucket(BUCKET)  # the bucket the user meant
        done = gym(["launch", "--cloud", "gym.toml"], project, client_env(tmp_path / "home", sky.endpoint,
                                                                          HF_TOKEN=HF_TOKEN))  # fmt: skip
        jobs = list(sky.jobs.values())
    misspelt = "s3://acme-checkpints/gym"
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert (
        f"compute.checkpoint_bucket: SkyPilot found no bucket {misspelt} (Attempted to use a non-existent "
        f"bucket as a source: {misspelt}.); create it or fix the name in gym.toml"
    ) in done.stderr
    assert jobs == [] and not (sky.root / "buckets" / "s3" / "acme-checkpints").exists()


@pytest.mark.slow
def test_preempted_job_resumes_from_the_bucket_on_fresh_nodes_and_pushes_once(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    write_project(project, TRAIN.format(max_steps=6) + COMPUTE)
    with HubDouble(HF_TOKEN, free_port()) as hub:
        with SkyDouble(tmp_path / "sky", base_env=node_env(hub.url), gpus=0) as sky:
            run = sky.create_bucket(BUCKET) / "demo"
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
    name = job_name(project / "gym.toml")
    assert status.stdout.split()[:5] == ["1", name, "SUCCEEDED", "recoveries:", "1"], status.stdout
    for where, text in (("the launch output", done.stdout + done.stderr), ("the job log", log),
                        ("gym status", status.stdout + status.stderr)):  # fmt: skip
        assert HF_TOKEN not in text, f"the Hub token leaked into {where}"
    for folder in (run, *(attempt.nodes[0].folder for attempt in job.attempts)):
        for path in (p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
            assert HF_TOKEN.encode() not in path.read_bytes(), f"the Hub token leaked into {path}"
    assert job.task["envs"]["GYM_FLAGS"] == "--output_dir /checkpoints/demo"  # what Gym sent
    assert job.task["file_mounts"]["/checkpoints"] == {
        "source": BUCKET,
        "mode": "MOUNT_CACHED",
        "persistent": True,
    }
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
    # progress.jsonl was appended to in the bucket by both attempts: the second one began where the first saved.
    events = [json.loads(line) for line in (run / "checkpoints" / "progress.jsonl").read_text().splitlines()]
    begins = [event["step"] for event in events if event["event"] == "begin"]
    assert begins == [0, step] and max(e["step"] for e in events if e["event"] == "step") == 6
    assert commits.count(f"model:{REPO_ID}") == 1
