"""The train run script on two "nodes" (both 127.0.0.1), exactly as SkyPilot would start it on each.

Gym's trainer is not wired in yet, so GYM_TRAIN_CMD swaps the program torchrun starts for a gloo
all-reduce: if SKYPILOT_* → torchrun rendezvous were wrong, the two ranks would never meet.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gym.launch.templates import TRAIN_RUN

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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
        GYM_MASTER_PORT=str(_free_port()),
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
