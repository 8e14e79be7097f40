"""A SkyPilot API server double on 127.0.0.1 that *runs* what it is given, driven by SkyPilot's own SDK.

It answers what the client (sky/client/sdk.py, sky/jobs/client/sdk.py) sends for ``jobs.launch`` /
``launch``, ``jobs.queue_v2`` / ``queue``, ``jobs.tail_logs`` / ``tail_logs`` and ``stream_and_get``,
with results encoded by SkyPilot's server-side ``Request.encode``. A launched task is executed as the
one node of its cluster would execute it: its workdir synced (copied) into a fresh node folder, its
``setup`` checked with ``bash -n`` (installing the package is not what these tests prove), its ``run``
started with ``bash -c`` and the task's ``envs`` and ``secrets`` as environment variables plus the
``SKYPILOT_*`` variables of a one-node cluster with ``gpus`` "GPUs" (so the run script starts that many
torchrun ranks). Its output is the job's log, streamed back through ``/jobs/logs`` and ``/logs`` while
it runs. Seeded jobs (``add_job``) give status and log tests their canned records.

``preempt`` (a predicate polled while a managed job runs) plays a spot preemption once: the node's
processes are killed, and the job is recovered as SkyPilot's controller does it, on a *fresh* node
(a new copy of the workdir, nothing else carried over), with ``recovery_count`` raised.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse


@dataclass
class Job:
    job_id: int
    name: str
    task: dict[str, Any] = field(default_factory=dict)
    status: str = "PENDING"
    lines: list[str] = field(default_factory=list)
    recovery_count: int = 0
    submitted_at: float = field(default_factory=time.time)
    node_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    returncode: int | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def finish(self, status: str) -> None:
        self.status = status
        self.done.set()


TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "FAILED_SETUP"}


class SkyDouble:
    """``with SkyDouble(tmp, base_env=...) as sky:`` sets nothing globally; pass ``sky.endpoint`` as
    ``SKYPILOT_API_SERVER_ENDPOINT`` to the process whose SDK should talk to it."""

    def __init__(
        self,
        root: Path,
        *,
        base_env: dict[str, str] | None = None,
        gpus: int = 2,
        master_port: int | None = None,
    ) -> None:
        import sky.server.requests.requests  # noqa: F401 - imported now, not inside the client's first timeout

        self.root = Path(root)
        self.base_env = dict(base_env or {})
        self.gpus = gpus
        self.master_port = master_port  # this machine is shared: torchrun gets a port known to be free
        self.preempt: Callable[[Job], bool] | None = None
        self.jobs: dict[int, Job] = {}
        self.calls: list[dict[str, Any]] = []
        self.requests: dict[str, tuple[str, Any]] = {}  # request id -> (name, return value)
        self.lock = threading.Lock()
        double = self

        class Handler(_Handler):
            owner = double

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> SkyDouble:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- jobs ---------------------------------------------------------------------------------------
    def add_job(self, name: str, lines: list[str], status: str = "SUCCEEDED", recovery_count: int = 0) -> Job:
        """A canned job (for status and log tests); ``status`` RUNNING keeps its log open until ``finish``."""
        with self.lock:
            job = Job(job_id=len(self.jobs) + 1, name=name, lines=list(lines), recovery_count=recovery_count)
            self.jobs[job.job_id] = job
        job.status = status
        if status in TERMINAL:
            job.done.set()
        return job

    def launch(self, task: dict[str, Any], name: str) -> Job:
        job = self.add_job(name, [], status="PENDING")
        job.task = task
        threading.Thread(target=self._execute, args=(job,), daemon=True).start()
        return job

    def _execute(self, job: Job) -> None:
        while True:
            preempted = self._attempt(job)
            if not preempted:
                return
            job.recovery_count += 1
            job.status = "RECOVERING"
            job.lines.append(f"[sky double] job {job.job_id} preempted; recovering on a new node\n")

    def _attempt(self, job: Job) -> bool:
        """Run the task once on a fresh node; True when it was preempted (and must be recovered)."""
        task = job.task
        node = self.root / f"node-{job.job_id}-{job.recovery_count}"
        workdir = node / "sky_workdir"
        if task.get("workdir"):
            shutil.copytree(task["workdir"], workdir, symlinks=True)
        else:
            workdir.mkdir(parents=True)
        job.node_dir = workdir
        check = subprocess.run(["bash", "-n", "-c", task.get("setup") or ":"], capture_output=True, text=True)
        if check.returncode:
            job.lines.append(f"setup is not valid bash: {check.stderr}\n")
            job.finish("FAILED_SETUP")
            return False
        env = {
            **self.base_env,
            **{k: str(v) for k, v in (task.get("envs") or {}).items()},
            **{k: str(v) for k, v in (task.get("secrets") or {}).items()},
            "SKYPILOT_NUM_NODES": str(task.get("num_nodes") or 1),
            "SKYPILOT_NODE_RANK": "0",
            "SKYPILOT_NODE_IPS": "127.0.0.1",
            "SKYPILOT_NUM_GPUS_PER_NODE": str(self.gpus),
            "SKYPILOT_TASK_ID": f"sky-managed-{job.job_id}_{job.name}",
            "SKYPILOT_CLUSTER_INFO": json.dumps({"cluster_name": job.name, "num_nodes": 1}),
        }
        if self.master_port is not None:
            env["GYM_MASTER_PORT"] = str(self.master_port)
        job.env = env
        job.status = "RUNNING"
        process = subprocess.Popen(
            ["bash", "-c", task.get("run") or ":"], cwd=workdir, env=env, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert process.stdout is not None
        preempted = threading.Event()
        watcher = None
        if self.preempt is not None and job.recovery_count == 0:
            watcher = threading.Thread(target=self._watch, args=(job, process, preempted), daemon=True)
            watcher.start()
        for line in process.stdout:
            job.lines.append(line)
        job.returncode = process.wait()
        if watcher is not None:
            watcher.join(timeout=5)
        if preempted.is_set():
            return True
        job.finish("SUCCEEDED" if job.returncode == 0 else "FAILED")
        return False

    def _watch(self, job: Job, process: subprocess.Popen, preempted: threading.Event) -> None:
        assert self.preempt is not None
        while process.poll() is None:
            if self.preempt(job):
                preempted.set()
                os.killpg(process.pid, signal.SIGKILL)  # the whole node goes away: torchrun and every rank
                return
            time.sleep(0.2)

    def find(self, name: str | None, job_id: int | None) -> Job | None:
        if job_id is not None:
            return self.jobs.get(job_id)
        named = [job for job in self.jobs.values() if name is None or job.name == name]
        return named[-1] if named else None

    def new_request(self, name: str, value: Any) -> str:
        """A finished request; ``name`` as the server names it (its encoder and the client's decoder)."""
        request_id = uuid.uuid4().hex
        self.requests[request_id] = ("sky." + name, value)
        return request_id

    def managed_record(self, job: Job) -> Any:
        from sky.jobs.state import ManagedJobStatus
        from sky.schemas.api.responses import ManagedJobRecord

        return ManagedJobRecord(job_id=job.job_id, job_name=job.name, task_id=0, task_name=job.name,
                                status=ManagedJobStatus(job.status), recovery_count=job.recovery_count,
                                submitted_at=job.submitted_at)  # fmt: skip

    def cluster_record(self, job: Job) -> Any:
        from sky.schemas.api.responses import ClusterJobRecord
        from sky.skylet.job_lib import JobStatus

        status = JobStatus(job.status if job.status != "FAILED_SETUP" else "FAILED_SETUP")
        return ClusterJobRecord(job_id=job.job_id, job_name=job.name, username="tester", user_hash="abcd1234",
                                submitted_at=job.submitted_at, resources="1x[CPU:1]", status=status,
                                log_path="~/sky_logs")  # fmt: skip


class _Handler(BaseHTTPRequestHandler):
    owner: SkyDouble
    protocol_version = "HTTP/1.1"  # streamed logs go out chunked, as the real (FastAPI) server sends them

    def log_message(self, *args: Any) -> None:
        pass

    def _headers(self, code: int, content_type: str, extra: dict[str, str] | None = None) -> None:
        import sky
        from sky.server import constants

        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header(constants.API_VERSION_HEADER, str(constants.API_VERSION))
        self.send_header(constants.VERSION_HEADER, sky.__version__)
        for key, value in (extra or {}).items():
            self.send_header(key, value)

    def _reply(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self._headers(code, "text/plain" if isinstance(body, bytes) else "application/json", headers)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self, body: str = "") -> None:
        url = urlparse(self.path)
        self.owner.calls.append({"method": self.command, "path": url.path, "query": url.query, "body": body})

    def do_GET(self) -> None:
        import sky
        from sky.server import constants

        self._record()
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path == "/api/health":
            self._reply(200, {"status": "healthy", "api_version": str(constants.API_VERSION),
                              "version": sky.__version__, "version_on_disk": sky.__version__,
                              "commit": sky.__commit__, "basic_auth_enabled": False,
                              "user": {"name": "tester", "id": "tester"}})  # fmt: skip
        elif url.path == "/upload_v2/blob":
            self._reply(200, {"exists": True})  # the double syncs the workdir itself, from its path
        elif url.path == "/api/stream":
            request_id = query["request_id"][0]
            self._reply(
                200, b"launching on the SkyPilot double\n", {constants.STREAM_REQUEST_HEADER: request_id}
            )
        elif url.path == "/api/get":
            self._reply(200, self._result(query["request_id"][0]))
        else:
            self._reply(404, {"detail": f"not implemented by the double: {url.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode()
        self._record(raw)
        path = urlparse(self.path).path
        body = json.loads(raw) if raw else {}
        owner = self.owner
        if path == "/validate":
            self._reply(200, {})
        elif path in ("/jobs/launch", "/launch"):
            import yaml

            task = list(yaml.safe_load_all(body["task"]))[-1]
            name = body.get("name") or body.get("cluster_name") or task.get("name") or "sky-job"
            job = owner.launch(task, name)
            value = ([job.job_id], None) if path == "/jobs/launch" else (job.job_id, None)
            self._accepted(owner.new_request(path.strip("/").replace("/", "."), value))
        elif path == "/jobs/queue/v2":
            jobs = [owner.managed_record(j) for j in owner.jobs.values()
                    if not body.get("name_match") or body["name_match"] in j.name]  # fmt: skip
            value = (jobs, len(jobs), {}, len(owner.jobs))
            self._accepted(owner.new_request("jobs.queue_v2", value))
        elif path == "/queue":
            jobs = [
                owner.cluster_record(j) for j in owner.jobs.values() if j.name == body.get("cluster_name")
            ]
            self._accepted(owner.new_request("queue", jobs))
        elif path in ("/jobs/logs", "/logs"):
            self._stream_logs(owner.find(body.get("name") or body.get("cluster_name"), body.get("job_id")),
                              bool(body.get("follow")))  # fmt: skip
        else:
            self._reply(404, {"detail": f"not implemented by the double: {path}"})

    def _accepted(self, request_id: str) -> None:
        self._reply(200, {}, {"X-Skypilot-Request-ID": request_id})

    def _stream_logs(self, job: Job | None, follow: bool) -> None:
        if job is None:
            request_id = self.owner.new_request("jobs.logs", 1)
            self._reply(200, b"no such job\n", {"X-Skypilot-Request-ID": request_id})
            return
        request_id = self.owner.new_request("jobs.logs", None)
        self._headers(
            200, "text/plain", {"X-Skypilot-Request-ID": request_id, "Transfer-Encoding": "chunked"}
        )
        self.end_headers()
        sent = 0
        while True:
            finished = job.done.is_set()
            while sent < len(job.lines):
                data = job.lines[sent].encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                sent += 1
            self.wfile.flush()
            if finished or not follow:
                break
            job.done.wait(0.2)
        self.wfile.write(b"0\r\n\r\n")
        code = 0 if job.status == "SUCCEEDED" else (None if job.status not in TERMINAL else 100)
        self.owner.requests[request_id] = ("jobs.logs", code)
        self.close_connection = True

    def _result(self, request_id: str) -> dict[str, Any]:
        from sky.server.requests import payloads
        from sky.server.requests import requests as requests_lib

        name, value = self.owner.requests[request_id]
        request = requests_lib.Request(
            request_id=request_id, name=name, entrypoint=json.dumps, request_body=payloads.RequestBody(),
            status=requests_lib.RequestStatus.SUCCEEDED, created_at=time.time(), user_id="tester",
        )  # fmt: skip
        request.set_return_value(value)
        return request.encode().model_dump()


def sky_env(home: Path, endpoint: str) -> dict[str, str]:
    """Environment of a process whose SkyPilot client must talk to the double only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYPILOT_", "HF_", "WANDB_", "GITHUB_"))}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), SKYPILOT_DISABLE_USAGE_COLLECTION="1", SKYPILOT_API_SERVER_ENDPOINT=endpoint)
    return env
