"""Run a `gym` launch command against a recording SkyPilot API server on 127.0.0.1.

Usage: ``python sky_harness.py RECORD.json launch --cloud gym.toml ...`` (run in a subprocess with HOME
pointing at a temp folder, because SkyPilot writes ~/.sky on import), or
``python sky_harness.py RECORD.json --action`` to run the GitHub Action's entrypoint (``action.main``)
against the same server, with the GitHub side given by the ``GITHUB_*`` environment.

The server answers what SkyPilot's client (sky/client/sdk.py, sky/jobs/client/sdk.py,
sky/server/common.py) sends for a launch: the health check with a compatible version, /validate, the
upload-blob probe (the workdir counts as already uploaded), /launch and /jobs/launch with an
X-Skypilot-Request-ID header, /jobs/cancel and /cancel (sky.jobs.cancel, sky.cancel: a listed job that
has not ended is CANCELLED from then on, as SkyPilot's controller does it), /jobs/queue/v2 (the managed
jobs listed as ``{"id": "STATUS"}`` (named ``gym-recorded``) or ``{"id": ["STATUS", "name"]}`` in
$SKY_HARNESS_JOBS), /api/stream and /api/get. Request results are encoded with SkyPilot's own
server-side ``Request.encode`` so the client decodes exactly what a real server would send. Nothing is
ever contacted but this server.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

JOB_ID = 7


class Recorder(BaseHTTPRequestHandler):
    calls: list[dict] = []
    names: dict[str, str] = {}
    cancelled: set[int] = set()

    def log_message(self, *args) -> None:  # keep the test output quiet
        pass

    def _reply(self, code: int, body: object, headers: dict[str, str] | None = None) -> None:
        import sky
        from sky.server import constants

        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if not isinstance(body, bytes) else "text/plain")
        self.send_header(constants.API_VERSION_HEADER, str(constants.API_VERSION))
        self.send_header(constants.VERSION_HEADER, sky.__version__)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self, body: str = "") -> None:
        url = urlparse(self.path)
        self.calls.append({"method": self.command, "path": url.path, "query": url.query, "body": body})

    def do_GET(self) -> None:
        import sky
        from sky.server import constants

        self._record()
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path == "/api/health":
            self._reply(
                200,
                {
                    "status": "healthy",
                    "api_version": str(constants.API_VERSION),
                    "version": sky.__version__,
                    "version_on_disk": sky.__version__,
                    "commit": sky.__commit__,
                    "basic_auth_enabled": False,
                    "user": {"name": "tester", "id": "tester"},
                },
            )
        elif url.path == "/upload_v2/blob":
            self._reply(200, {"exists": True})
        elif url.path == "/api/stream":
            request_id = query["request_id"][0]
            self._reply(200, b"recorded: launching\n", {constants.STREAM_REQUEST_HEADER: request_id})
        elif url.path == "/api/get":
            self._reply(200, self._result(query["request_id"][0]))
        else:
            self._reply(404, {"detail": f"not recorded: {url.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode()
        self._record(body)
        path = urlparse(self.path).path
        if path == "/jobs/cancel":
            self.cancelled.update(json.loads(body or "{}").get("job_ids") or [])
        if path in ("/launch", "/jobs/launch", "/jobs/cancel", "/cancel", "/jobs/queue/v2"):
            request_id = uuid.uuid4().hex
            # The queue's records go through SkyPilot's own encoder, registered under the server's name.
            known = {"/jobs/queue/v2": "sky.jobs.queue_v2"}
            self.names[request_id] = known.get(path) or path.strip("/").replace("/", ".")
            self._reply(200, {}, {"X-Skypilot-Request-ID": request_id})
        elif path == "/validate":
            self._reply(200, {})
        else:
            self._reply(404, {"detail": f"not recorded: {path}"})

    def _result(self, request_id: str) -> dict:
        from sky.server.requests import payloads
        from sky.server.requests import requests as requests_lib

        name = self.names[request_id]
        request = requests_lib.Request(
            request_id=request_id,
            name=name,
            entrypoint=json.dumps,  # any importable function: the client only unpickles it
            request_body=payloads.RequestBody(),
            status=requests_lib.RequestStatus.SUCCEEDED,
            created_at=time.time(),
            user_id="tester",
        )
        if name in ("jobs.cancel", "cancel"):
            request.set_return_value(None)
        elif name == "sky.jobs.queue_v2":
            jobs = _managed_jobs()
            request.set_return_value((jobs, len(jobs), {}, len(jobs)))
        else:
            request.set_return_value(([JOB_ID], None) if name == "jobs.launch" else (JOB_ID, None))
        return request.encode().model_dump()


def _managed_jobs() -> list:
    import os

    from sky.jobs.state import ManagedJobStatus
    from sky.schemas.api.responses import ManagedJobRecord

    listed = json.loads(os.environ.get("SKY_HARNESS_JOBS") or "{}")
    records = []
    for job_id, entry in listed.items():  # "STATUS" (a job named gym-recorded) or ["STATUS", "name"]
        status, name = (entry, "gym-recorded") if isinstance(entry, str) else entry
        state = ManagedJobStatus(status)
        if int(job_id) in Recorder.cancelled and not state.is_terminal():
            state = ManagedJobStatus.CANCELLED
        records.append(ManagedJobRecord(job_id=int(job_id), job_name=name, status=state))
    return records


def main() -> None:
    import os

    record_path, args = sys.argv[1], sys.argv[2:]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ["SKYPILOT_API_SERVER_ENDPOINT"] = f"http://127.0.0.1:{server.server_address[1]}"
    if args == ["--action"]:
        from action.main import main as action_main

        code = 1
        try:
            code = action_main()
        finally:
            server.shutdown()
            with open(record_path, "w", encoding="utf-8") as handle:
                json.dump({"exit_code": code, "calls": Recorder.calls}, handle)
        sys.exit(code)
    import typer

    from gym.cli.launch_commands import register

    app = typer.Typer()
    register(app)
    app.callback()(lambda: None)
    code = 0
    try:
        app(args, prog_name="gym", standalone_mode=True)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        server.shutdown()
        with open(record_path, "w", encoding="utf-8") as handle:
            json.dump({"exit_code": code, "calls": Recorder.calls}, handle)
    sys.exit(code)


if __name__ == "__main__":
    main()
