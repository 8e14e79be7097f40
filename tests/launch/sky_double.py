"""A SkyPilot API server double on 127.0.0.1 that *runs* what it is given, driven by SkyPilot's own SDK.

It answers what the client (sky/client/sdk.py, sky/jobs/client/sdk.py) sends for ``jobs.launch`` /
``launch``, ``jobs.queue_v2`` / ``queue``, ``jobs.tail_logs`` / ``tail_logs``, ``jobs.cancel`` /
``cancel`` and ``stream_and_get``, with results encoded by SkyPilot's server-side ``Request.encode``.

A launched task runs on its ``num_nodes`` nodes as :mod:`tests.launch.sky_nodes` describes: fresh node
folders, a fresh venv each, the task's real ``setup`` (installing Gym's wheel built from the checkout,
:mod:`tests.launch.node_image`), then its ``run``; bucket ``file_mounts`` live in host folders that
outlive the nodes. The job ends in SkyPilot's own terminal states: SUCCEEDED, FAILED (the run exited
non-zero on a node), FAILED_SETUP, CANCELLED (``jobs.cancel``/``cancel`` kill the nodes), and, when
``accelerators`` (what the double's "clouds" have) holds none of the task's, FAILED_NO_RESOURCE for a
managed job or a failed launch request for a cluster. ``/jobs/logs`` and ``/logs`` stream the job's
log and answer SkyPilot's exit codes (``JobExitCode``: 0, 100 failed, 101 not finished, 102 not found,
103 cancelled). Seeded jobs (``add_job``) give status and log tests their canned records.

``preempt`` (a predicate polled while a managed job runs) plays a spot preemption once: every node's
processes are killed, and the job is recovered as SkyPilot's controller does it, on *fresh* nodes (new
HOME, cache, venv and workdir copy; only the buckets carry over), with ``recovery_count`` raised.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.launch.node_image import NodeImage, node_image
from tests.launch.sky_nodes import Attempt, start_attempt

NO_RESOURCE = (
    "sky.exceptions.ResourcesUnavailableError: Failed to provision all possible launchable resources. "
    "Relax the task's resource requirements: {wanted}"
)


@dataclass
class Job:
    job_id: int
    name: str
    task: dict[str, Any] = field(default_factory=dict)
    status: str = "PENDING"
    lines: list[str] = field(default_factory=list)
    recovery_count: int = 0
    submitted_at: float = field(default_factory=time.time)
    managed: bool = True
    node_dir: Path | None = None  # the head node's workdir of the latest attempt
    env: dict[str, str] = field(default_factory=dict)  # the head node's environment
    attempts: list[Attempt] = field(default_factory=list)
    returncodes: list[int] = field(default_factory=list)  # of the last script run, one per node
    failure_reason: str | None = None
    cancelling: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def returncode(self) -> int | None:
        return next((code for code in self.returncodes if code), 0) if self.returncodes else None

    def finish(self, status: str) -> None:
        self.status = status
        self.done.set()


TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "FAILED_SETUP", "FAILED_NO_RESOURCE", "FAILED_CONTROLLER"}
# A cluster job's states (sky.skylet.job_lib.JobStatus) for the managed-job states the double goes through.
CLUSTER_STATUS = {"STARTING": "SETTING_UP", "RECOVERING": "RUNNING", "CANCELLING": "RUNNING"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _accelerator_names(resources: dict[str, Any]) -> set[str]:
    """Accelerator names a task's ``resources`` asks for (``accelerators`` and ``any_of``/``ordered``)."""
    names: set[str] = set()
    for candidate in [resources, *(resources.get("any_of") or []), *(resources.get("ordered") or [])]:
        wanted = candidate.get("accelerators")
        if isinstance(wanted, str):
            wanted = [wanted]
        for item in wanted or []:
            names.add(str(item).split(":")[0])
    return names


class SkyDouble:
    """``with SkyDouble(tmp, base_env=...) as sky:`` sets nothing globally; pass ``sky.endpoint`` as
    ``SKYPILOT_API_SERVER_ENDPOINT`` to the process whose SDK should talk to it. ``base_env`` is what
    every node has before the task's envs (PATH, PYTHONPATH and HOME are the node's own)."""

    def __init__(
        self,
        root: Path,
        *,
        base_env: dict[str, str] | None = None,
        gpus: int = 2,
        master_port: int | None = None,
        image: NodeImage | None = None,
        accelerators: set[str] | None = None,
    ) -> None:
        import sky.server.requests.requests  # noqa: F401 - imported now, not inside the client's first timeout

        self.root = Path(root)
        self.base_env = dict(base_env or {})
        self.gpus = gpus
        self.master_port = master_port  # this machine is shared: torchrun gets a port known to be free
        self.image = image
        self.accelerators = accelerators  # None: every accelerator is available
        self.preempt: Callable[[Job], bool] | None = None
        self.jobs: dict[int, Job] = {}
        self.calls: list[dict[str, Any]] = []
        self.requests: dict[str, tuple[str, Any, BaseException | None]] = {}
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
        for job in self.jobs.values():
            for attempt in job.attempts:
                attempt.kill()
        self.server.shutdown()
        self.server.server_close()

    # -- jobs ---------------------------------------------------------------------------------------
    def add_job(
        self,
        name: str,
        lines: list[str],
        status: str = "SUCCEEDED",
        recovery_count: int = 0,
        managed: bool = True,
    ) -> Job:
        """A canned job (for status and log tests); ``status`` RUNNING keeps its log open until ``finish``;
        ``managed=False``: a job on the cluster ``name`` (``/cancel`` and ``/logs`` find it there)."""
        with self.lock:
            job = Job(job_id=len(self.jobs) + 1, name=name, lines=list(lines), recovery_count=recovery_count,
                      managed=managed)  # fmt: skip
            self.jobs[job.job_id] = job
        job.status = status
        if status in TERMINAL:
            job.done.set()
        return job

    def fits(self, task: dict[str, Any]) -> bool:
        wanted = _accelerator_names(task.get("resources") or {})
        return self.accelerators is None or not wanted or bool(wanted & self.accelerators)

    def launch(self, task: dict[str, Any], name: str, *, managed: bool = True) -> Job:
        job = self.add_job(name, [], status="PENDING", managed=managed)
        job.task = task
        threading.Thread(target=self._execute, args=(job,), daemon=True).start()
        return job

    def cancel(self, job: Job) -> None:
        """As the jobs controller does it: a job already ended is skipped, a running one is killed."""
        if job.done.is_set():
            return
        job.cancelling.set()
        if not job.task:  # a seeded job has no nodes
            job.finish("CANCELLED")
            return
        job.status = "CANCELLING"
        for attempt in job.attempts:
            attempt.kill()
        job.done.wait(30)

    def _execute(self, job: Job) -> None:
        try:
            while True:
                outcome = self._attempt(job)
                if outcome != "PREEMPTED":
                    job.finish(outcome)
                    return
                job.recovery_count += 1
                job.status = "RECOVERING"
                job.lines.append(f"[sky double] job {job.job_id} preempted; recovering on a new node\n")
        except Exception as error:  # a fault of the double must end the job, not hang its followers
            job.lines.append(f"[sky double] {error!r}\n")
            job.failure_reason = repr(error)
            job.finish("FAILED_CONTROLLER")

    def _attempt(self, job: Job) -> str:
        """Run the task once on fresh nodes: its terminal state, or PREEMPTED (to be recovered)."""
        task = job.task
        if not self.fits(task):
            job.failure_reason = NO_RESOURCE.format(wanted=sorted(_accelerator_names(task["resources"])))
            job.lines.append(job.failure_reason + "\n")
            return "FAILED_NO_RESOURCE"
        job.status = "STARTING"
        attempt = start_attempt(self.root, job.job_id, job.recovery_count, task, self.base_env,
                                self.image or node_image(), {"SKYPILOT_NUM_GPUS_PER_NODE": str(self.gpus)})  # fmt: skip
        job.attempts.append(attempt)
        job.node_dir, job.env = attempt.nodes[0].workdir, attempt.nodes[0].env
        if job.cancelling.is_set():
            return "CANCELLED"
        job.returncodes = attempt.execute(task.get("setup") or "true", job.lines)
        if job.cancelling.is_set():
            return "CANCELLED"
        if any(job.returncodes):
            job.failure_reason = f"setup failed with return code list: {job.returncodes}"
            job.lines.append(f"ERROR: Job {job.job_id}'s {job.failure_reason}\n")
            return "FAILED_SETUP"
        job.status = "RUNNING"
        # The rendezvous port is picked just before torchrun binds it: other tests share this host.
        port = str(self.master_port or free_port())
        for node in attempt.nodes:
            node.env["GYM_MASTER_PORT"] = port
        watch = None
        if self.preempt is not None and job.managed and job.recovery_count == 0:
            preempt = self.preempt
            watch = lambda: preempt(job)  # noqa: E731
        job.returncodes = attempt.execute(task.get("run") or "true", job.lines, watch)
        if job.cancelling.is_set():
            return "CANCELLED"
        if attempt.killed.is_set():
            return "PREEMPTED"
        if any(job.returncodes):
            job.failure_reason = f"failed with return code list: {job.returncodes}"
            job.lines.append(f"ERROR: Job {job.job_id} {job.failure_reason}\n")
            return "FAILED"
        return "SUCCEEDED"

    def find(self, name: str | None, job_id: int | None) -> Job | None:
        if job_id is not None:
            return self.jobs.get(job_id)
        named = [job for job in self.jobs.values() if name is None or job.name == name]
        return named[-1] if named else None

    def new_request(self, name: str, value: Any, error: BaseException | None = None) -> str:
        """A finished request; ``name`` as the server names it (its encoder and the client's decoder)."""
        request_id = uuid.uuid4().hex
        self.requests[request_id] = ("sky." + name, value, error)
        return request_id

    def exit_code(self, job: Job | None, managed: bool) -> int:
        """What SkyPilot's log request returns for the job (sky.exceptions.JobExitCode)."""
        from sky.exceptions import JobExitCode
        from sky.jobs.state import ManagedJobStatus
        from sky.skylet.job_lib import JobStatus

        if job is None:
            return int(JobExitCode.NOT_FOUND)
        if managed:
            return int(JobExitCode.from_managed_job_status(ManagedJobStatus(job.status)))
        return int(JobExitCode.from_job_status(JobStatus(CLUSTER_STATUS.get(job.status, job.status))))

    def managed_record(self, job: Job) -> Any:
        from sky.jobs.state import ManagedJobStatus
        from sky.schemas.api.responses import ManagedJobRecord

        return ManagedJobRecord(job_id=job.job_id, job_name=job.name, task_id=0, task_name=job.name,
                                status=ManagedJobStatus(job.status), recovery_count=job.recovery_count,
                                submitted_at=job.submitted_at, failure_reason=job.failure_reason)  # fmt: skip

    def cluster_record(self, job: Job) -> Any:
        from sky.schemas.api.responses import ClusterJobRecord
        from sky.skylet.job_lib import JobStatus

        status = JobStatus(CLUSTER_STATUS.get(job.status, job.status))
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
            self._launch(path == "/jobs/launch", body)
        elif path == "/jobs/queue/v2":
            jobs = [owner.managed_record(j) for j in owner.jobs.values()
                    if (not body.get("name_match") or body["name_match"] in j.name)
                    and (not body.get("job_ids") or j.job_id in body["job_ids"])]  # fmt: skip
            value = (jobs, len(jobs), {}, len(owner.jobs))
            self._accepted(owner.new_request("jobs.queue_v2", value))
        elif path == "/queue":
            jobs = [
                owner.cluster_record(j) for j in owner.jobs.values() if j.name == body.get("cluster_name")
            ]
            self._accepted(owner.new_request("queue", jobs))
        elif path in ("/jobs/cancel", "/cancel"):
            self._cancel(path == "/jobs/cancel", body)
        elif path in ("/jobs/logs", "/logs"):
            self._stream_logs(owner.find(body.get("name") or body.get("cluster_name"), body.get("job_id")),
                              bool(body.get("follow")), path == "/jobs/logs")  # fmt: skip
        else:
            self._reply(404, {"detail": f"not implemented by the double: {path}"})

    def _accepted(self, request_id: str) -> None:
        self._reply(200, {}, {"X-Skypilot-Request-ID": request_id})

    def _launch(self, managed: bool, body: dict[str, Any]) -> None:
        import yaml

        owner = self.owner
        task = list(yaml.safe_load_all(body["task"]))[-1]
        name = body.get("name") or body.get("cluster_name") or task.get("name") or "sky-job"
        route = "jobs.launch" if managed else "launch"
        if not managed and not owner.fits(task):  # a cluster launch fails in the request itself
            from sky.exceptions import ResourcesUnavailableError

            wanted = sorted(_accelerator_names(task.get("resources") or {}))
            error = ResourcesUnavailableError(NO_RESOURCE.format(wanted=wanted).split(": ", 1)[1])
            self._accepted(owner.new_request(route, None, error))
            return
        job = owner.launch(task, name, managed=managed)
        value = ([job.job_id], None) if managed else (job.job_id, None)
        self._accepted(owner.new_request(route, value))

    def _cancel(self, managed: bool, body: dict[str, Any]) -> None:
        """Cancel by ids, by name, or all; jobs not found or already ended are skipped, as SkyPilot does."""
        owner = self.owner
        ids = body.get("job_ids")
        for job in list(owner.jobs.values()):
            if job.managed != managed or (not managed and job.name != body.get("cluster_name")):
                continue
            named = managed and body.get("name") is not None and job.name == body["name"]
            if body.get("all") or body.get("all_users") or (ids and job.job_id in ids) or named:
                owner.cancel(job)
        self._accepted(owner.new_request("jobs.cancel" if managed else "cancel", None))

    def _stream_logs(self, job: Job | None, follow: bool, managed: bool) -> None:
        if job is None:
            request_id = self.owner.new_request("jobs.logs", self.owner.exit_code(None, managed))
            self._reply(200, b"No managed job found.\n", {"X-Skypilot-Request-ID": request_id})
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
        self.owner.requests[request_id] = ("jobs.logs", self.owner.exit_code(job, managed), None)
        self.close_connection = True

    def _result(self, request_id: str) -> dict[str, Any]:
        from sky.server.requests import payloads
        from sky.server.requests import requests as requests_lib

        name, value, error = self.owner.requests[request_id]
        status = requests_lib.RequestStatus.FAILED if error else requests_lib.RequestStatus.SUCCEEDED
        request = requests_lib.Request(
            request_id=request_id, name=name, entrypoint=json.dumps, request_body=payloads.RequestBody(),
            status=status, created_at=time.time(), user_id="tester",
        )  # fmt: skip
        if error is not None:
            request.set_error(error)
        else:
            request.set_return_value(value)
        return request.encode().model_dump()


def sky_env(home: Path, endpoint: str) -> dict[str, str]:
    """Environment of a process whose SkyPilot client must talk to the double only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYPILOT_", "HF_", "WANDB_", "GITHUB_"))}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), SKYPILOT_DISABLE_USAGE_COLLECTION="1", SKYPILOT_API_SERVER_ENDPOINT=endpoint)
    return env
