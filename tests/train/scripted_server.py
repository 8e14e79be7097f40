"""A scripted OpenAI-compatible server on 127.0.0.1 for the training-free GRPO tests.

Replies are decided by a Python function of the request's messages (``script(messages, state)``
returning reply text, or an int HTTP status to fail with), so a test states exactly what the policy
and the learner answer. Every request is recorded, headers included, so tests can count calls and
check what was sent. Runs ``http.server`` in a daemon thread: no event loop shared with the client.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Script = Callable[[list[dict[str, Any]], "ScriptedServer"], "str | int"]
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


@dataclass
class ScriptedServer:
    script: Script
    api_key: str | None = None
    model: str = "scripted-model"
    requests: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def count(self, key: str) -> int:
        """How many times ``key`` was counted before (thread-safe): for replies that vary per call."""
        with self.lock:
            value = self.counters.get(key, 0)
            self.counters[key] = value + 1
            return value

    def texts(self, start: int = 0, stop: int | None = None) -> list[str]:
        """The last message of every chat request among ``requests[start:stop]``, in arrival order."""
        chats = [r for r in self.requests[start:stop] if r["path"].endswith("/chat/completions")]
        return [r["body"]["messages"][-1]["content"] for r in chats]


def _handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def _send(self, status: int, data: dict[str, Any]) -> None:
            body = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _authorized(self) -> bool:
            if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                self._send(401, {"error": {"message": "bad key", "type": "authentication_error"}})
                return False
            return True

        def do_GET(self) -> None:
            if self._authorized():
                self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            with server.lock:
                server.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                )
            if not self._authorized():
                return
            reply = server.script(body.get("messages", []), server)
            if isinstance(reply, int):
                self._send(reply, {"error": {"message": f"scripted {reply}", "type": "server_error"}})
                return
            self._send(200, {
                "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
                "usage": USAGE,
            })  # fmt: skip

    return Handler


@contextmanager
def scripted_server(script: Script, api_key: str | None = None) -> Iterator[ScriptedServer]:
    """Serve ``script`` on a free 127.0.0.1 port; yields the server (``.url`` ends in /v1)."""
    state = ScriptedServer(script, api_key)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
