"""Two nodes (both 127.0.0.1): the run script's rendezvous, then a whole `gym launch --cloud` on two nodes.

The first test starts the train run script twice as SkyPilot would on each node, with GYM_TRAIN_CMD
swapping the program torchrun starts for a gloo all-reduce: if SKYPILOT_* → torchrun rendezvous were
wrong, the two ranks would never meet. The second sends a ``num_nodes = 2`` config to the SkyPilot
double, whose two node processes install Gym's wheel, train one model together and push it once.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gym.launch.templates import TRAIN_RUN
from tests.hub.hub_double import HubDouble

from .cloud_run import HF_TOKEN, REPO_ID, TRAIN, client_env, gym, node_env, write_project
from .sky_double import SkyDouble, free_port

ALLREDUCE = """\
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
report = {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": value.item(),
          "node": int(os.environ["GROUP_RANK"]), "master": os.environ["MASTER_ADDR"]}
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as handle:
    json.dump(report, handle)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_nodes_rendezvous_through_the_run_script(tmp_path: Path) -> None:
    program = tmp_path / "allreduce.py"
    program.write_text(ALLREDUCE)
    out = tmp_path / "out"
    out.mkdir()
    venv_bin = str(Path(sys.executable).parent)
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("SKYPILOT_", "MASTER_", "RANK", "WORLD"))
    }
    base.update(
        PATH=f"{venv_bin}{os.pathsep}{base['PATH']}",
        SKYPILOT_NUM_NODES="2",
        SKYPILOT_NODE_IPS="127.0.0.1\n127.0.0.1",
        SKYPILOT_NUM_GPUS_PER_NODE="0",
        GYM_MASTER_PORT=str(free_port()),
        GYM_TRAIN_CMD=shlex.join([sys.executable, str(program), str(out)]),
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
    )
    nodes = [
        subprocess.Popen(
            ["bash", "-c", TRAIN_RUN],
            env={**base, "SKYPILOT_NODE_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = []
    for node in nodes:
        try:
            outputs.append(node.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for other in nodes:
                other.kill()
            raise
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(outputs)
    reports = sorted((json.loads(p.read_text()) for p in out.glob("rank*.json")), key=lambda r: r["rank"])
    assert reports == [
        {"rank": 0, "world": 2, "sum": 3.0, "node": 0, "master": "127.0.0.1"},
        {"rank": 1, "world": 2, "sum": 3.0, "node": 1, "master": "127.0.0.1"},
    ]


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
