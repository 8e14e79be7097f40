"""Two nodes (both 127.0.0.1) through `gym launch --cloud`: a ``num_nodes = 2`` config on the SkyPilot double.

Its two node processes each install Gym's wheel and start the train run script with their own
SKYPILOT_NODE_RANK; torchrun joins them over gloo at the first IP, one model is trained by both ranks
(train_results.json records the world size) and rank 0 alone pushes it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.hub.hub_double import HubDouble

from .cloud_run import HF_TOKEN, REPO_ID, TRAIN, client_env, gym, node_env, write_project
from .sky_double import SkyDouble, free_port

TWO_NODES = f"""
[compute]
accelerators = ["L4:1"]
num_nodes = 2

[hub]
repo_id = "{REPO_ID}"
"""


@pytest.mark.slow
def test_two_nodes_train_one_model_and_push_it_once(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    write_project(project, TRAIN.format(max_steps=2) + TWO_NODES)
    with HubDouble(HF_TOKEN, free_port()) as hub:
        with SkyDouble(tmp_path / "sky", base_env=node_env(hub.url), gpus=1) as sky:
            env = client_env(tmp_path / "home", sky.endpoint, HF_TOKEN=HF_TOKEN)
            done = gym(["launch", "--cloud", "gym.toml"], project, env)
            assert done.returncode == 0, done.stderr + done.stdout
            (job,) = sky.jobs.values()
            assert job.done.wait(600), "the job did not finish"
        commits = list(hub.state.commits)
    log = "".join(job.lines)
    (tmp_path / "job.log").write_text(log)  # the whole log, kept beside the nodes when this fails
    assert job.status == "SUCCEEDED", log[-4000:]
    (attempt,) = job.attempts
    head, worker = attempt.nodes
    assert [(n.env["SKYPILOT_NODE_RANK"], n.env["SKYPILOT_NUM_NODES"]) for n in (head, worker)] == [
        ("0", "2"),
        ("1", "2"),
    ]
    assert head.env["SKYPILOT_NODE_IPS"] == worker.env["SKYPILOT_NODE_IPS"] == "127.0.0.1\n127.0.0.1"
    assert head.workdir != worker.workdir and head.env["HOME"] != worker.env["HOME"]
    assert re.search(r"^\(head, rank=0, pid=\d+\) gym: node 0 of 2 starts 1 process", log, re.M), log[-3000:]
    assert re.search(r"^\(worker1, rank=1, pid=\d+, ip=127.0.0.1\) gym: node 1 of 2 starts 1", log, re.M)
    results = json.loads((head.workdir / "outputs" / "demo" / "train_results.json").read_text())
    assert results["world_size"] == 2 and results["steps"] == 2
    assert not (worker.workdir / "outputs" / "demo" / "train_results.json").exists()  # rank 0 writes
    assert commits.count(f"model:{REPO_ID}") == 1
