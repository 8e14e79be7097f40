"""A judge on 127.0.0.1 that speaks OpenAI's chat completions API and judges deterministically.

It answers ``POST /v1/chat/completions`` and ``GET /v1/models`` as the OpenAI API reference describes them
(https://platform.openai.com/docs/api-reference/chat/create: ``choices[0].message.content``,
``usage.prompt_tokens`` / ``completion_tokens``), so Gym's real ``openai`` client talks to it unchanged.
It reads Gym's own judge prompts by their markers (``[Answer A]``, ``[Reference answer]``, ...):

- ``reference`` (default): prefers the answer closer to the reference (``difflib`` ratio), a tie when equally
  close; rubric scores are ``1 + round(9 * closeness)`` for every criterion;
- ``biased``: always answers ``[[A]]`` (position bias in its purest form);
- ``garbage``: answers prose without any verdict;
- ``error``: HTTP 500 on every request.

``calls`` counts the chat requests it received; ``auth`` the Authorization headers.
"""

from __future__ import annotations

import difflib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MARKED = {
    name: re.compile(rf"\[{re.escape(start)}\]\n(.*?)\n\[End of {re.escape(end)}\]", re.S)
    for name, start, end in (
        ("a", "Answer A", "answer A"),
        ("b", "Answer B", "answer B"),
        ("answer", "Answer", "answer"),
        ("reference", "Reference answer", "reference answer"),
    )
}
CRITERIA = re.compile(r"^- ([a-z0-9_]+): ", re.M)


def _part(prompt: str, name: str) -> str | None:
    found = MARKED[name].search(prompt)
    return found.group(1) if found else None


def closeness(answer: str, reference: str) -> float:
    return difflib.SequenceMatcher(None, answer.strip(), reference.strip()).ratio()


def verdict(prompt: str, mode: str) -> str:
    """What the judge says to one of Gym's prompts."""
    if mode == "garbage":
        return "Both answers have their merits; I would rather not choose."
    reference = _part(prompt, "reference") or ""
    if _part(prompt, "a") is not None:  # pairwise
        if mode == "biased":
            return "The first answer reads better.\n[[A]]"
        a, b = closeness(_part(prompt, "a") or "", reference), closeness(_part(prompt, "b") or "", reference)
        return "Closer to the reference.\n" + ("[[A]]" if a > b else "[[B]]" if b > a else "[[C]]")
    score = 1 + round(9 * closeness(_part(prompt, "answer") or "", reference))
    return "Scored against the reference.\n" + json.dumps(dict.fromkeys(CRITERIA.findall(prompt), score))


@dataclass
class JudgeDouble:
    mode: str = "reference"
    calls: int = 0
    auth: list[str] = field(default_factory=list)
    models: tuple[str, ...] = ("judge-1",)

    def __enter__(self) -> JudgeDouble:
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                data = [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in double.models]
                self._send(200, {"object": "list", "data": data})

            def do_POST(self) -> None:  # noqa: N802
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                double.calls += 1
                double.auth.append(self.headers.get("Authorization", ""))
                if double.mode == "error":
                    self._send(500, {"error": {"message": "the judge fell over", "type": "server_error"}})
                    return
                prompt = request["messages"][-1]["content"]
                text = verdict(prompt, double.mode)
                self._send(200, {
                    "id": f"chatcmpl-{double.calls}", "object": "chat.completion", "created": 0,
                    "model": request["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": 8,
                              "total_tokens": len(prompt) // 4 + 8},
                })  # fmt: skip

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
