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

As strict as a real server about who sees what, and what exists:

- **Users.** Each job belongs to the user who launched it; ``jobs.queue_v2``, ``queue`` and the cancels
  see only the caller's jobs unless ``all_users`` (SkyPilot's default view). The caller is the basic-auth
  user when the server has ``users`` (a team API server deployed with basic auth: every request without
  valid credentials gets 401, as the Helm chart's ingress answers), else the client's user hash
  (``SKYPILOT_USER_ID`` in each request body's ``env_vars``, from ~/.sky of the client's machine).
- **Fresh local servers.** A new ``SkyDouble`` starts empty: it is the local server SkyPilot starts on a
  fresh runner. Point a client at it as at a local server with :func:`local_server_env` (no endpoint set:
  ``SKYPILOT_API_SERVER_LOCAL_PORT`` names its port and ``SKYPILOT_DISABLE_LOCAL_API_SERVER=1`` keeps the
  SDK from ever starting a real one). One long-lived instance with ``users`` is a team server shared by
  runs.
- **Buckets.** A launch whose ``file_mounts`` name a bucket that does not exist fails in the request with
  SkyPilot's ``StorageBucketGetError`` ("Attempted to use a non-existent bucket as a source"): buckets
  exist only once :meth:`create_bucket` made them.
- **Clusters.** A cluster launch brings up cluster ``name`` (or reuses it); :meth:`tear_down` takes it
  down (autostop ``down``); ``queue`` and ``cancel`` on a cluster that is not up fail with
  ``ClusterDoesNotExist``, and a later launch brings up a new one.
- ``run_nodes=False``: launched jobs start no nodes and stay RUNNING until cancelled (for the Action's
  tests, which need a job's identity, not its training).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.launch import sky_api
from tests.launch.node_image import NodeImage, node_image
from tests.launch.sky_nodes import Attempt, bucket_folder, relocate, start_attempt

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
    user: str | None = None  # who launched it; None (a seeded job): whoever asks sees it
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
        users: dict[str, str] | None = None,
        run_nodes: bool = True,
    ) -> None:
        import sky.server.requests.requests  # noqa: F401 - imported now, not inside the client's first timeout

        self.root = Path(root)
        self.base_env = dict(base_env or {})
        self.gpus = gpus
        self.master_port = master_port  # this machine is shared: torchrun gets a port known to be free
        self.image = image
        self.accelerators = accelerators  # None: every accelerator is available
        self.users = users  # basic auth {user: password}; None: no authentication (a local server)
        self.run_nodes = run_nodes
        self.clusters: set[str] = set()
        self.preempt: Callable[[Job], bool] | None = None
        self.jobs: dict[int, Job] = {}
        self.calls: list[dict[str, Any]] = []
        self.requests: dict[str, tuple[str, Any, BaseException | None]] = {}
        self.lock = threading.Lock()
        double = self

        class Handler(sky_api.Handler):
            owner = double

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def url_for(self, user: str) -> str:
        """The endpoint with ``user``'s basic-auth credentials in it, as a team's secret holds it."""
        assert self.users is not None
        return f"http://{user}:{self.users[user]}@127.0.0.1:{self.port}"

    def create_bucket(self, source: str) -> Path:
        """Make the bucket of ``source`` (``s3://name/...``) exist; its host folder for ``source``."""
        return bucket_folder(self.root, source, create=True)

    def tear_down(self, cluster: str) -> None:
        """The cluster goes away (autostop with ``down``), and its job queue with it."""
        self.clusters.discard(cluster)

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
        user: str | None = None,
    ) -> Job:
        """A canned job (for status and log tests); ``status`` RUNNING keeps its log open until ``finish``;
        ``managed=False``: a job on the cluster ``name`` (``/cancel`` and ``/logs`` find it there)."""
        with self.lock:
            job = Job(job_id=len(self.jobs) + 1, name=name, lines=list(lines), recovery_count=recovery_count,
                      managed=managed, user=user)  # fmt: skip
            self.jobs[job.job_id] = job
            if not managed:
                self.clusters.add(name)
        job.status = status
        if status in TERMINAL:
            job.done.set()
        return job

    def fits(self, task: dict[str, Any]) -> bool:
        wanted = _accelerator_names(task.get("resources") or {})
        return self.accelerators is None or not wanted or bool(wanted & self.accelerators)

    def launch(
        self, task: dict[str, Any], name: str, *, managed: bool = True, user: str | None = None
    ) -> Job:
        job = self.add_job(name, [], status="PENDING", managed=managed, user=user)
        job.task = task
        if not self.run_nodes:
            job.status = "RUNNING"
            return job
        threading.Thread(target=self._execute, args=(job,), daemon=True).start()
        return job

    def missing_bucket(self, task: dict[str, Any]) -> str | None:
        """The first bucket ``source`` of the task's ``file_mounts`` that does not exist."""
        for spec in (task.get("file_mounts") or {}).values():
            source = spec.get("source") if isinstance(spec, dict) else spec
            if isinstance(source, str) and "://" in source:
                try:
                    bucket_folder(self.root, source)
                except FileNotFoundError:
                    return source
        return None

    def cancel(self, job: Job) -> None:
        """As the jobs controller does it: a job already ended is skipped, a running one is killed."""
        if job.done.is_set():
            return
        job.cancelling.set()
        if not job.task or not self.run_nodes:  # a seeded job, or one that started no nodes
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
        job.returncodes = attempt.execute(relocate(task.get("setup") or "true", attempt.mounts), job.lines)
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
        job.returncodes = attempt.execute(
            relocate(task.get("run") or "true", attempt.mounts), job.lines, watch
        )
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
        return ClusterJobRecord(job_id=job.job_id, job_name=job.name, username=job.user or "tester", user_hash=job.user or "tester",
                                submitted_at=job.submitted_at, resources="1x[CPU:1]", status=status,
                                log_path="~/sky_logs")  # fmt: skip


def local_server_env(home: Path, double: SkyDouble) -> dict[str, str]:
    """The environment of a fresh CI runner whose SkyPilot has no API server configured: the SDK takes
    ``double`` for the local server it would start itself (it listens on the local port), and may never
    start a real one (``SKYPILOT_DISABLE_LOCAL_API_SERVER``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYPILOT_", "HF_", "WANDB_", "GITHUB_"))}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), SKYPILOT_DISABLE_USAGE_COLLECTION="1", SKYPILOT_API_SERVER_LOCAL_PORT=str(double.port),
               SKYPILOT_DISABLE_LOCAL_API_SERVER="1")  # fmt: skip
    return env


def sky_env(home: Path, endpoint: str) -> dict[str, str]:
    """Environment of a process whose SkyPilot client must talk to the double only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYPILOT_", "HF_", "WANDB_", "GITHUB_"))}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), SKYPILOT_DISABLE_USAGE_COLLECTION="1", SKYPILOT_API_SERVER_ENDPOINT=endpoint)
    return env
