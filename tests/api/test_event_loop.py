"""Encoding a prompt never runs on the event loop: while one request's chat template and tokenizer take
seconds, /health and other requests answer at once. The app under test is the real one, served by
uvicorn on a loopback port; the backend is a double whose encoding is slow (as a multi-megabyte prompt
is for a real tokenizer)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import uvicorn

from gym.api.app import create_app
from gym.engine.backend import Chunk
from tests.api.conftest import free_port


class SlowEncodingBackend:
    name, model_id, context_length = "double", "double", 4096

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        if "slow" in messages[-1]["content"]:
            time.sleep(3)  # blocking, like a tokenizer busy with a huge prompt
        return [1, 2, 3]

    def encode_text(self, text: str) -> list[int]:
        return self.encode_chat([{"role": "user", "content": text}])

    async def generate(self, prompt_ids: list[int], params: Any, n: int = 1):
        yield Chunk(0, "ok", "stop", 1)

    def stats(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


def test_slow_encoding_does_not_block_other_requests() -> None:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(SlowEncodingBackend()), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    while not server.started:
        time.sleep(0.05)

    async def scenario() -> tuple[int, list[float], float]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            body = {"model": "double", "messages": [{"role": "user", "content": "slow"}], "max_tokens": 2}
            slow = asyncio.create_task(client.post("/v1/chat/completions", json=body))
            await asyncio.sleep(0.3)
            latencies = []
            for _ in range(5):
                started = time.monotonic()
                assert (await client.get("/health")).status_code == 200
                latencies.append(time.monotonic() - started)
            started = time.monotonic()
            fast = {**body, "messages": [{"role": "user", "content": "quick"}]}
            assert (await client.post("/v1/chat/completions", json=fast)).status_code == 200
            other = time.monotonic() - started
            return (await slow).status_code, latencies, other

    try:
        status, latencies, other = asyncio.run(scenario())
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert status == 200
    assert max(latencies) < 1.0 and other < 1.0, (latencies, other)
