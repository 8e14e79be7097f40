"""One attempt of a SkyPilot task on its nodes, as the SkyPilot double runs it: every node a local process tree.

Each node is a fresh folder: the task's workdir copied in, its own HOME and cache, and a fresh venv
from :mod:`tests.launch.node_image` in which the task's ``setup`` runs for real (it installs Gym's
wheel), then its ``run``, with the ``SKYPILOT_*`` variables SkyPilot gives each node (rank, the IPs of
all nodes, one per line, here all 127.0.0.1). Lines of a multi-node job carry SkyPilot's
``(head, rank=0, pid=N)`` / ``(worker1, rank=1, pid=N, ip=...)`` prefixes.

The workdir reaches each node as SkyPilot syncs it: without what
``sky.data.storage_utils.get_excluded_files`` lists (the function SkyPilot's client and rsync use: a
``.skyignore`` alone when there is one, else git's ignored untracked files).

``file_mounts`` with a bucket source (``s3://bucket/path``) are mounted from a host folder per bucket
that outlives the nodes; the bucket must exist (:meth:`SkyDouble.create_bucket`). A process here cannot
mount at ``/checkpoints``, so the mount point is relocated: the destination path in the task's ``envs``,
``setup`` and ``run`` is rewritten to the host folder, and whatever Gym then reads and writes there lands
in the bucket. A ``mode: MOUNT`` bucket behaves as SkyPilot's FUSE mounts (goofys, rclone without a
cache) do: "random writes and append operations are not supported" (docs.skypilot.co, reference/
storage.html, Storage modes). Every node's Python refuses them there with ``EOPNOTSUPP`` through an
audit hook (PEP 578: the ``open`` event of ``open()``/``os.open``, which a hook may abort). ``MOUNT_CACHED``
(rclone's VFS cache on local disk) "supports all write operations" and is a plain folder here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.launch.node_image import NodeImage


@dataclass
class Node:
    rank: int
    folder: Path
    workdir: Path
    env: dict[str, str]
    process: subprocess.Popen | None = None

    @property
    def prefix(self) -> str:
        pid = self.process.pid if self.process is not None else 0
        return (
            f"(head, rank=0, pid={pid}) "
            if self.rank == 0
            else f"(worker{self.rank}, rank={self.rank}, pid={pid}, ip=127.0.0.1) "
        )


@dataclass
class Attempt:
    """The nodes of one attempt; ``kill`` ends every process on them (preemption, cancel)."""

    nodes: list[Node]
    mounts: dict[str, Path] = field(default_factory=dict)
    killed: threading.Event = field(default_factory=threading.Event)

    def kill(self) -> None:
        self.killed.set()
        _kill(self.nodes)

    def execute(self, script: str, lines: list[str], watch: Callable[[], bool] | None = None) -> list[int]:
        """Run ``script`` with bash on every node at once, their output appended to ``lines``; the exit
        codes. ``watch`` is polled meanwhile; when it returns True the attempt is killed."""
        for node in self.nodes:
            node.process = subprocess.Popen(
                ["bash", "-c", script], cwd=node.workdir, env=node.env, start_new_session=True,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        many = len(self.nodes) > 1
        readers = [
            threading.Thread(target=_copy, args=(node, lines, many), daemon=True) for node in self.nodes
        ]
        for reader in readers:
            reader.start()
        while any(node.process.poll() is None for node in self.nodes):  # type: ignore[union-attr]
            if watch is not None and watch():
                self.kill()
            elif any(node.process.poll() not in (None, 0) for node in self.nodes):  # type: ignore[union-attr]
                _kill(self.nodes)  # a node failed: SkyPilot stops the others (they end with 137)
            time.sleep(0.2)
        for reader in readers:
            reader.join(timeout=10)
        codes = [node.process.wait() for node in self.nodes]  # type: ignore[union-attr]
        return [code if code >= 0 else 128 - code for code in codes]  # a killed node: 137, as a shell says


def _copy(node: Node, lines: list[str], prefixed: bool) -> None:
    assert node.process is not None and node.process.stdout is not None
    for line in node.process.stdout:
        lines.append(node.prefix + line if prefixed else line)


def _kill(nodes: list[Node]) -> None:
    """Every process of the nodes still running goes away: the run script, torchrun and every rank."""
    for node in nodes:
        if node.process is not None and node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)


# Loaded by every node's Python (a .pth line): appends and random writes under a MOUNT bucket fail.
FUSE_GUARD = """\
import errno, os, sys

_ROOTS = tuple(p.rstrip("/") + "/" for p in os.environ.get("SKY_DOUBLE_FUSE_MOUNTS", "").split(os.pathsep) if p)


def _inside(path):
    try:
        path = os.path.abspath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return any((path + "/").startswith(root) for root in _ROOTS)


def _refuse(event, args):
    if event != "open" or not _ROOTS or isinstance(args[0], int) or not _inside(args[0]):
        return
    path, mode, flags = args
    appends = ("a" in mode) if isinstance(mode, str) else bool(flags & os.O_APPEND)
    updates = ("+" in mode) if isinstance(mode, str) else bool(flags & os.O_RDWR)
    writes_in_place = not isinstance(mode, str) and flags & os.O_WRONLY and not flags & os.O_TRUNC
    rewrites = bool(writes_in_place) and os.path.exists(path)
    if appends or updates or rewrites:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported (MOUNT bucket: no appends, no random writes)",
                      os.fsdecode(path))


sys.addaudithook(_refuse)
"""


def bucket_folder(root: Path, source: str, *, create: bool = False) -> Path:
    """The host folder holding bucket ``source`` (``s3://name/path`` → ``root/buckets/s3/name/path``).

    Only a bucket that exists (made with ``create=True``) has a folder: a misspelt name is never made."""
    scheme, _, rest = source.partition("://")
    if not rest:
        raise ValueError(f"the SkyPilot double mounts buckets only, not {source!r}")
    bucket = root / "buckets" / scheme / rest.strip("/").split("/")[0]
    if create:
        bucket.mkdir(parents=True, exist_ok=True)
    elif not bucket.is_dir():
        raise FileNotFoundError(f"Attempted to use a non-existent bucket as a source: {source}.")
    folder = root / "buckets" / scheme / rest.strip("/")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def synced_copy(workdir: Path, target: Path) -> None:
    """Copy ``workdir`` to ``target`` leaving out what SkyPilot's sync leaves out."""
    from sky.data.storage_utils import get_excluded_files

    excluded = {
        os.path.normpath(os.path.join(workdir, item.rstrip("/"))) for item in get_excluded_files(str(workdir))
    }

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [name for name in names if os.path.normpath(os.path.join(folder, name)) in excluded]

    shutil.copytree(workdir, target, symlinks=True, ignore=ignore)


def relocate(text: str, mounts: dict[str, Path]) -> str:
    """``text`` with each mount destination (as a whole path component) replaced by its host folder."""
    for destination, host in mounts.items():
        pattern = rf"(?<![\w./-]){re.escape(destination.rstrip('/'))}(?=/|\s|$|['\"])"
        text = re.sub(pattern, lambda _, host=host: str(host), text)
    return text


def start_attempt(
    root: Path,
    job_id: int,
    attempt: int,
    task: dict[str, Any],
    base_env: dict[str, str],
    image: NodeImage,
    extra_env: dict[str, str],
) -> Attempt:
    """Fresh nodes for attempt ``attempt`` of the task (nothing of an earlier attempt is carried over)."""
    mounts, fuse = {}, []
    for destination, spec in (task.get("file_mounts") or {}).items():
        source = spec["source"] if isinstance(spec, dict) else spec
        mounts[destination] = bucket_folder(root, source)
        if (spec.get("mode") if isinstance(spec, dict) else None) in (None, "MOUNT"):  # SkyPilot's default
            fuse.append(str(mounts[destination]))
    count = int(task.get("num_nodes") or 1)
    ips = "\n".join(["127.0.0.1"] * count)
    envs = {k: relocate(str(v), mounts) for k, v in (task.get("envs") or {}).items()}
    secrets = {k: str(v) for k, v in (task.get("secrets") or {}).items()}
    nodes = []
    for rank in range(count):
        folder = root / f"node-{job_id}-{attempt}-{rank}"
        workdir = folder / "sky_workdir"
        if task.get("workdir"):
            synced_copy(Path(task["workdir"]), workdir)
        else:
            workdir.mkdir(parents=True)
        home, cache = folder / "home", folder / "cache"
        home.mkdir()
        venv = image.new_venv(folder / "venv")
        purelib = image.purelib(venv)
        (purelib / "sky_double_fuse.py").write_text(FUSE_GUARD)
        (purelib / "sky_double_fuse.pth").write_text("import sky_double_fuse\n")
        env = {k: v for k, v in base_env.items() if k not in ("PYTHONPATH", "PATH", "VIRTUAL_ENV")}
        env.update(image.env(venv))
        env.update(HOME=str(home), GYM_CACHE_DIR=str(cache), XDG_CACHE_HOME=str(home / ".cache"))
        env.update({**envs, **secrets, **extra_env, "SKY_DOUBLE_FUSE_MOUNTS": os.pathsep.join(fuse)})
        env.update({
            "SKYPILOT_NUM_NODES": str(count),
            "SKYPILOT_NODE_RANK": str(rank),
            "SKYPILOT_NODE_IPS": ips,
            "SKYPILOT_TASK_ID": f"sky-managed-{job_id}_{task.get('name') or 'task'}",
            "SKYPILOT_CLUSTER_INFO": json.dumps({"cluster_name": task.get("name"), "num_nodes": count}),
        })  # fmt: skip
        nodes.append(Node(rank, folder, workdir, env))
    return Attempt(nodes, mounts)
