"""The HTTP side of the SkyPilot double (:mod:`tests.launch.sky_double`): SkyPilot's REST API as its SDK calls it.

Routes: ``/api/health``, ``/validate``, ``/upload_v2/blob`` (the workdir counts as uploaded: the double syncs
it from its path, with SkyPilot's exclusions), ``/launch`` and ``/jobs/launch``, ``/queue`` and
``/jobs/queue/v2``, ``/cancel`` and ``/jobs/cancel``, ``/logs`` and ``/jobs/logs`` (streamed, chunked),
``/api/stream`` and ``/api/get`` (results encoded by SkyPilot's own server-side ``Request.encode``).

Authentication as a team API server deployed with basic auth answers it (the Helm chart's ingress,
docs.skypilot.co reference/api-server/api-server-admin-deploy.html): with ``owner.users`` set, a request
without the right ``Authorization: Basic`` header gets 401 before anything else (SkyPilot's client then
reports that the server needs authentication); the client sends it from the credentials in
``SKYPILOT_API_SERVER_ENDPOINT`` (``http://user:password@host``), as requests does for any URL.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

if TYPE_CHECKING:
    from tests.launch.sky_double import Job, SkyDouble


class Handler(BaseHTTPRequestHandler):
    owner: SkyDouble
    protocol_version = "HTTP/1.1"  # streamed logs go out chunked, as the real (FastAPI) server sends them

    def log_message(self, *args: Any) -> None:
        pass

    # -- plumbing -----------------------------------------------------------------------------------
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

    def _record(self, body: str = "", user: str | None = None) -> None:
        url = urlparse(self.path)
        self.owner.calls.append({"method": self.command, "path": url.path, "query": url.query, "body": body,
                                 "user": user})  # fmt: skip

    def _basic_user(self) -> str | None:
        """The basic-auth user whose password matches, or None."""
        kind, _, value = (self.headers.get("Authorization") or "").partition(" ")
        if kind.lower() != "basic":
            return None
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        users = self.owner.users or {}
        return user if user in users and users[user] == password else None

    def _authorized(self) -> tuple[bool, str | None]:
        """(may it be served, the authenticated user); a refused request has had its 401."""
        if self.owner.users is None:
            return True, None
        user = self._basic_user()
        if user is None:
            self._reply(
                401, {"detail": "Unauthorized"}, {"WWW-Authenticate": 'Basic realm="SkyPilot API server"'}
            )
            return False, None
        return True, user

    def _accepted(self, request_id: str) -> None:
        self._reply(200, {}, {"X-Skypilot-Request-ID": request_id})

    # -- routes -------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        import sky
        from sky.server import constants

        allowed, user = self._authorized()
        self._record(user=user)
        if not allowed:
            return
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path == "/api/health":
            name = user or "tester"
            self._reply(200, {"status": "healthy", "api_version": str(constants.API_VERSION),
                              "version": sky.__version__, "version_on_disk": sky.__version__,
                              "commit": sky.__commit__, "basic_auth_enabled": self.owner.users is not None,
                              "user": {"name": name, "id": name}})  # fmt: skip
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
        allowed, user = self._authorized()
        body = json.loads(raw) if raw and allowed else {}
        # Without authentication the caller is the client's user hash (from ~/.sky of its machine).
        user = user or str((body.get("env_vars") or {}).get("SKYPILOT_USER_ID") or "tester")
        self._record(raw, user)
        if not allowed:
            return
        path = urlparse(self.path).path
        owner = self.owner
        mine = [job for job in owner.jobs.values() if body.get("all_users") or job.user in (None, user)]
        if path == "/validate":
            self._reply(200, {})
        elif path in ("/jobs/launch", "/launch"):
            self._launch(path == "/jobs/launch", body, user)
        elif path == "/jobs/queue/v2":
            jobs = [owner.managed_record(j) for j in mine if j.managed
                    and (not body.get("name_match") or body["name_match"] in j.name)
                    and (not body.get("job_ids") or j.job_id in body["job_ids"])]  # fmt: skip
            self._accepted(owner.new_request("jobs.queue_v2", (jobs, len(jobs), {}, len(jobs))))
        elif path in ("/queue", "/cancel") and body.get("cluster_name") not in owner.clusters:
            from sky.exceptions import ClusterDoesNotExist

            error = ClusterDoesNotExist(f"Cluster {body.get('cluster_name')!r} does not exist.")
            self._accepted(owner.new_request(path.strip("/"), None, error))
        elif path == "/queue":
            jobs = [owner.cluster_record(j) for j in mine if j.name == body.get("cluster_name")]
            self._accepted(owner.new_request("queue", jobs))
        elif path in ("/jobs/cancel", "/cancel"):
            self._cancel(path == "/jobs/cancel", body, mine)
        elif path in ("/jobs/logs", "/logs"):
            self._stream_logs(owner.find(body.get("name") or body.get("cluster_name"), body.get("job_id")),
                              bool(body.get("follow")), path == "/jobs/logs")  # fmt: skip
        else:
            self._reply(404, {"detail": f"not implemented by the double: {path}"})

    def _launch(self, managed: bool, body: dict[str, Any], user: str) -> None:
        import yaml

        from tests.launch.sky_double import NO_RESOURCE, _accelerator_names

        owner = self.owner
        task = list(yaml.safe_load_all(body["task"]))[-1]
        name = body.get("name") or body.get("cluster_name") or task.get("name") or "sky-job"
        route = "jobs.launch" if managed else "launch"
        missing = owner.missing_bucket(task)
        if missing is not None:  # SkyPilot's server syncs storage mounts before anything is submitted
            from sky.exceptions import StorageBucketGetError

            error = StorageBucketGetError(f"Attempted to use a non-existent bucket as a source: {missing}.")
            self._accepted(owner.new_request(route, None, error))
            return
        if not managed and not owner.fits(task):  # a cluster launch fails in the request itself
            from sky.exceptions import ResourcesUnavailableError

            wanted = sorted(_accelerator_names(task.get("resources") or {}))
            error = ResourcesUnavailableError(NO_RESOURCE.format(wanted=wanted).split(": ", 1)[1])
            self._accepted(owner.new_request(route, None, error))
            return
        job = owner.launch(task, name, managed=managed, user=user)
        value = ([job.job_id], None) if managed else (job.job_id, None)
        self._accepted(owner.new_request(route, value))

    def _cancel(self, managed: bool, body: dict[str, Any], mine: list[Job]) -> None:
        """Cancel the caller's jobs by ids, by name, or all; jobs not found or already ended are skipped,
        as SkyPilot does (another user's job is "not found" unless ``all_users``)."""
        owner = self.owner
        ids = body.get("job_ids")
        for job in mine:
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
