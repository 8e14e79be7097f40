"""Hugging Face Jobs, as the Hub double serves them to huggingface_hub's client, and a runner that really runs them.

Routes (huggingface_hub's ``run_job``, ``inspect_job``, ``list_jobs``, ``fetch_job_logs``, ``cancel_job``,
``list_jobs_hardware``; shapes from its ``_jobs_api.py``/``hf_api.py`` and hf.co/docs/huggingface_hub/guides/jobs):

- ``POST /api/jobs/{namespace}``: a write token of that namespace (401/403 otherwise); an account that cannot
  pay is 402 (hf.co/docs/huggingface_hub/guides/jobs: "Hugging Face Jobs are available to any user or
  organization with a positive credit balance"; the double reads that from the token's ``can_pay``, the
  ``canPay`` of ``whoami-v2``; the Hub's exact wording is not public, this one is the double's); an unknown
  flavor is 400; a volume whose bucket or repo does not exist is 404 (nothing is created on the way); ``fail["jobs"]``
  injects a status (e.g. 429).
- ``GET /api/jobs/{namespace}`` and ``/{id}``: JobInfo as camelCase JSON, stages ``RUNNING`` → ``COMPLETED``
  / ``ERROR`` (exit code, or "Job timeout" when ``timeoutSeconds`` ran out) / ``CANCELED``; secrets are
  listed by name only.
- ``GET /api/jobs/{namespace}/{id}/logs``: server-sent events ``data: {"data": LINE, "timestamp": ...}``,
  streamed while the job runs and closed when it ends, as the client's follow loop expects.
- ``POST .../cancel``; ``GET /api/jobs/hardware`` with each flavor's per-minute cost.

The runner: the job's command in a fresh venv of :mod:`tests.launch.node_image` (Gym's wheel and nothing of
the checkout), a fresh HOME and TMPDIR, exactly the job's env and secrets, and its volumes mounted from host
folders (a dataset repo's files at the job's revision read-only; a bucket's folder read-write, kept across
jobs as a bucket is). A process cannot mount at ``/gym-inputs``, so mount paths in the command are rewritten
to the host folders, as the SkyPilot double relocates its bucket mounts.
"""

import asyncio
import json
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym.launch.hf_jobs.flavors import FLAVORS

NO_CREDITS = (
    "Jobs need a positive credit balance: add a payment method or credits to {namespace} at "
    "https://huggingface.co/settings/billing"
)


@dataclass
class Job:
    id: str
    namespace: str
    spec: dict[str, Any]
    stage: str = "RUNNING"
    message: str | None = None
    lines: list[str] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    process: subprocess.Popen | None = None
    folder: Path | None = None

    def info(self, base: str) -> dict[str, Any]:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(self.created))
        return {"id": self.id, "createdAt": stamp, "dockerImage": self.spec.get("dockerImage"),
                "command": self.spec["command"], "arguments": [], "environment": self.spec.get("environment", {}),
                "secrets": dict.fromkeys(self.spec.get("secrets") or {}, ""), "flavor": self.spec["flavor"],
                "labels": self.spec.get("labels"), "volumes": self.spec.get("volumes"),
                "status": {"stage": self.stage, "message": self.message},
                "owner": {"id": "0" * 24, "name": self.namespace, "type": "user"}}  # fmt: skip


@dataclass
class Jobs:
    """The double's jobs; ``buckets``: the Storage Buckets that exist (name -> host folder)."""

    jobs: dict[str, Job] = field(default_factory=dict)
    buckets: dict[str, Path] = field(default_factory=dict)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gym-hf-jobs-")))
    env: dict[str, str] = field(default_factory=dict)  # added to every job (e.g. the shared model cache)

    def create_bucket(self, name: str) -> Path:
        folder = self.root / "buckets" / name.replace("/", "--")
        folder.mkdir(parents=True, exist_ok=True)
        self.buckets[name] = folder
        return folder

    def expire(self, job_id: str) -> None:
        """The Hub's clock reaches the job's ``timeoutSeconds`` now (a test need not wait for it)."""
        _time_out(self.jobs[job_id])

    def close(self) -> None:
        for job in self.jobs.values():
            if job.process is not None and job.process.poll() is None:
                job.process.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def _materialise(hub: Any, job: Job, folder: Path) -> dict[str, str]:
    """Each volume as a host folder; mount path -> folder."""
    mounts = {}
    for index, volume in enumerate(job.spec.get("volumes") or []):
        if volume["type"] == "bucket":
            mounts[volume["mountPath"]] = str(hub.jobs.buckets[volume["source"]])
            continue
        target = folder / f"volume{index}"
        for path, content in hub.files.get(f"{volume['type']}:{volume['source']}", {}).items():
            (target / path).parent.mkdir(parents=True, exist_ok=True)
            (target / path).write_bytes(content)
            (target / path).chmod(0o444)  # repos mount read-only
        mounts[volume["mountPath"]] = str(target)
    return mounts


def _run(hub: Any, job: Job, endpoint: str) -> None:
    from tests.launch.node_image import node_image

    image = node_image()
    folder = hub.jobs.root / job.id
    job.folder = folder
    (folder / "home").mkdir(parents=True)
    (folder / "tmp").mkdir()
    mounts = _materialise(hub, job, folder)
    command = list(job.spec["command"])
    for mount, host in sorted(mounts.items(), key=lambda item: -len(item[0])):
        command = [part.replace(mount, host) for part in command]
    venv = image.new_venv(folder / "venv")
    env = {**image.env(venv), "HOME": str(folder / "home"), "TMPDIR": str(folder / "tmp"), "HF_ENDPOINT": endpoint,
           **hub.jobs.env, **job.spec.get("environment", {}), **(job.spec.get("secrets") or {})}  # fmt: skip
    job.lines.append("===== Job started =====")
    job.process = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, errors="replace")  # fmt: skip
    timeout = job.spec.get("timeoutSeconds")
    timer = threading.Timer(timeout, _time_out, args=(job,)) if timeout else None
    if timer is not None:
        timer.start()
    assert job.process.stdout is not None
    for line in job.process.stdout:
        job.lines.append(line.rstrip("\n"))
    code = job.process.wait()
    if timer is not None:
        timer.cancel()
    if job.stage == "RUNNING":
        job.stage, job.message = ("COMPLETED", None) if code == 0 else ("ERROR", f"exit code {code}")


def _time_out(job: Job) -> None:
    if job.process is not None and job.process.poll() is None:
        job.stage, job.message = "ERROR", "Job timeout"
        job.process.kill()


def add_job_routes(app: Any, state: Any, *, caller: Any, writer: Any, error: Any, injected: Any) -> Jobs:
    """Add the Jobs routes to the Hub double's ``app``; ``state`` is its HubState."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, StreamingResponse

    jobs = Jobs()

    @app.get("/api/jobs/hardware")
    async def hardware():
        return [{"name": name, "prettyName": name, "cpu": what, "ram": "", "ephemeralStorage": "",
                 "accelerator": None, "unitCostMicroUSD": round(price / 60 * 1e6),
                 "unitCostUSD": price / 60, "unitLabel": "minute"} for name, (what, price) in FLAVORS.items()]  # fmt: skip

    @app.post("/api/jobs/{namespace}")
    async def create(namespace: str, request: Request):
        who = writer(request, namespace, "jobs")
        if isinstance(who, JSONResponse):
            return who
        if (failure := injected("jobs")) is not None:
            return failure
        if not who.can_pay:
            return error(402, NO_CREDITS.format(namespace=namespace))
        spec = await request.json()
        if spec.get("flavor") not in FLAVORS:
            return error(400, f"Invalid flavor {spec.get('flavor')!r}")
        for volume in spec.get("volumes") or []:
            known = (volume["source"] in jobs.buckets if volume["type"] == "bucket"
                     else f"{volume['type']}:{volume['source']}" in state.repos)  # fmt: skip
            if not known:
                return error(404, f"{volume['type'].capitalize()} {volume['source']} not found")
        job = Job(uuid.uuid4().hex[:24], namespace, spec)
        jobs.jobs[job.id] = job
        endpoint = str(request.base_url).rstrip("/")
        threading.Thread(target=_run, args=(state, job, endpoint), daemon=True).start()
        return job.info(endpoint)

    def find(namespace: str, job_id: str, request: Request) -> Job | JSONResponse:
        who = caller(request)
        if isinstance(who, JSONResponse):
            return who
        job = jobs.jobs.get(job_id)
        if who is None or job is None or job.namespace != namespace or namespace not in who.namespaces:
            return error(404, f"Job {job_id} not found")
        return job

    @app.get("/api/jobs/{namespace}")
    async def listing(namespace: str, request: Request):
        who = caller(request)
        if isinstance(who, JSONResponse):
            return who
        if who is None or namespace not in who.namespaces:
            return error(401 if who is None else 403, "Unauthorized")
        base = str(request.base_url).rstrip("/")
        return [job.info(base) for job in jobs.jobs.values() if job.namespace == namespace]

    @app.get("/api/jobs/{namespace}/{job_id}")
    async def inspect(namespace: str, job_id: str, request: Request):
        job = find(namespace, job_id, request)
        return job if isinstance(job, JSONResponse) else job.info(str(request.base_url).rstrip("/"))

    @app.get("/api/jobs/{namespace}/{job_id}/logs")
    async def logs(namespace: str, job_id: str, request: Request):
        job = find(namespace, job_id, request)
        if isinstance(job, JSONResponse):
            return job

        async def events():
            sent = 0
            while True:
                while sent < len(job.lines):
                    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    yield f"data: {json.dumps({'data': job.lines[sent], 'timestamp': stamp})}\n\n"
                    sent += 1
                if job.stage != "RUNNING" and sent >= len(job.lines):
                    return
                await asyncio.sleep(0.2)

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/api/jobs/{namespace}/{job_id}/cancel")
    async def cancel(namespace: str, job_id: str, request: Request):
        job = find(namespace, job_id, request)
        if isinstance(job, JSONResponse):
            return job
        if job.stage == "RUNNING":
            job.stage = "CANCELED"
            if job.process is not None and job.process.poll() is None:
                job.process.kill()
        return {}

    return jobs


def expire_after_checkpoint(jobs: Jobs, job: Job, checkpoints: Callable[[], list[Path]]) -> Job:
    """Stop ``job`` at its timeout (the Hub's clock reaching timeoutSeconds) once ``checkpoints()`` finds one."""
    deadline = time.monotonic() + 400
    while not checkpoints() and job.stage == "RUNNING":
        assert time.monotonic() < deadline, "\n".join(job.lines[-20:])
        time.sleep(0.5)
    jobs.expire(job.id)
    return wait_ended(jobs, job.id)


def wait_ended(jobs: Jobs, job_id: str, timeout: float = 600) -> Job:
    deadline = time.monotonic() + timeout
    job = jobs.jobs[job_id]
    while job.stage == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    return job
