"""A Hub endpoint that misbehaves on purpose, for the champion lookup (:mod:`gym.hub.champion`).

It answers the routes ``huggingface_hub`` calls to read a model repository, as
:mod:`tests.hub.hub_double` answers them: ``GET /api/models/{repo}`` (``HfApi.model_info``: ``id``, ``sha``,
``siblings`` of ``rfilename``) and ``GET``/``HEAD /{repo}/resolve/{revision}/{path}`` (``hf_hub_download`` and
``hf_hub_url``: the bytes, with ``X-Repo-Commit`` and ``ETag``; see
https://huggingface.co/docs/huggingface_hub/package_reference/file_download). Then, per route, it can:

- ``hang``: accept the request and never answer;
- ``trickle``: answer 200 and send one byte every 0.2 s, forever;
- serve any bytes (a 20 MB card, an alias bomb) with any headers (a commit id or ETag that is a path),
  with or without a ``Content-Length`` (``unsized``: the body ends when the connection closes).

A plain ``http.server`` rather than FastAPI, so a route can stall or trickle at the socket. It binds
127.0.0.1 only; leaving the ``with`` block releases every stalled request.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

INFO = "info"  # the route name of the repository's info; files are named by their path


@dataclass
class HostileState:
    repo: str = "acme/bot"
    sha: str = "c" * 40
    files: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, dict[str, str]] = field(default_factory=dict)  # route -> extra response headers
    hang: set[str] = field(default_factory=set)
    trickle: set[str] = field(default_factory=set)
    unsized: set[str] = field(default_factory=set)  # sent without Content-Length, ended by closing
    requests: list[str] = field(default_factory=list)  # "METHOD path" of each request, in order
    stop: threading.Event = field(default_factory=threading.Event)

    def info(self) -> bytes:
        siblings = [{"rfilename": name, "size": len(content)} for name, content in sorted(self.files.items())]
        return json.dumps({"id": self.repo, "sha": self.sha, "siblings": siblings}).encode()


def _handler(state: HostileState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def route(self) -> tuple[str, bytes | None]:
            path = self.path.split("?", 1)[0]
            if path.startswith(f"/api/models/{state.repo}"):
                return INFO, state.info()
            prefix = f"/{state.repo}/resolve/"
            if path.startswith(prefix):
                name = path[len(prefix) :].split("/", 1)[-1]
                return name, state.files.get(name)
            return path, None

        def answer(self, body: bool) -> None:
            state.requests.append(f"{self.command} {self.path}")
            name, content = self.route()
            if name in state.hang:
                state.stop.wait(120)
                return
            if content is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound" if name != INFO else "RepoNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            headers = {"Content-Type": "application/octet-stream", "X-Repo-Commit": state.sha,
                       "ETag": '"0123456789abcdef0123456789abcdef01234567"', **state.headers.get(name, {})}  # fmt: skip
            if name in state.unsized:
                headers["Connection"] = "close"
                self.close_connection = True
            else:
                headers.setdefault(
                    "Content-Length", str(len(content) if name not in state.trickle else 100_000)
                )
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if not body:
                return
            try:
                if name in state.trickle:
                    while not state.stop.wait(0.2):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    return
                self.wfile.write(content)
            except OSError:  # the client gave up
                return

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.answer(body=True)

        def do_HEAD(self) -> None:  # noqa: N802
            self.answer(body=False)

    return Handler


class HostileHub:
    """``with HostileHub(state) as hub:`` serves ``state`` at ``hub.url`` (127.0.0.1, a free port)."""

    def __init__(self, state: HostileState | None = None) -> None:
        self.state = state or HostileState()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HostileHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.state.stop.set()
        self.server.shutdown()
        self.server.server_close()
