"""The serving rows: a server started as a user starts it, then N concurrent streaming chat requests.

Output tokens are the servers' own ``usage.completion_tokens`` (``stream_options.include_usage``);
TTFT is the time from sending a request to its first chunk holding text. The model is the 0.5B shape
with the tokenizer's own vocabulary, so every token a random model generates is text a client sees.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import random
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .models import build_model
from .train_rows import WORDS


class Skip(Exception):
    """The row cannot run here; the message says why (it goes into the table)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def transformers_cli() -> list[str]:
    """`transformers serve --continuous-batching`, or :class:`Skip` when this transformers lacks it."""
    from transformers.utils.import_utils import is_serve_available

    if importlib.util.find_spec("transformers.cli.serve") is None:
        raise Skip("this transformers has no `transformers serve`")
    source = Path(importlib.util.find_spec("transformers.cli.serve").origin).read_text()
    if "continuous_batching" not in source:
        raise Skip("this transformers' `serve` has no --continuous-batching")
    if not is_serve_available():
        raise Skip("`transformers serve` needs fastapi, uvicorn, pydantic and openai")
    script = Path(sys.executable).with_name("transformers")
    if script.exists():
        return [str(script)]
    found = shutil.which("transformers")
    if found:
        return [found]
    return [sys.executable, "-c", "from transformers.cli.transformers import main; main()"]


def server_command(server: str, model_dir: Path, port: int, device: str) -> tuple[list[str], str]:
    """(argv, model name clients send) for ``server``: gym, gym-vllm or transformers."""
    address = ["--host", "127.0.0.1", "--port", str(port)]
    if server in ("gym", "gym-vllm"):
        backend = "vllm" if server == "gym-vllm" else "transformers"
        if backend == "vllm" and importlib.util.find_spec("vllm") is None:
            raise Skip("vLLM is not importable here")
        argv = [sys.executable, "-m", "gym", "serve", str(model_dir), "--backend", backend,
                "--served-model-name", "bench", "--max-batch-size", "32", *address]  # fmt: skip
        if backend == "transformers":
            argv += ["--device", device]
        return argv, "bench"
    argv = [
        *transformers_cli(),
        "serve",
        str(model_dir),
        "--continuous-batching",
        "--device",
        device,
        *address,
    ]
    if device == "cpu":  # its paged KV cache takes 90% of free memory unless told
        argv += ["--cb-max-memory-percent", "0.1"]
    return argv, str(model_dir)


def wait_ready(url: str, process: subprocess.Popen, timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode} before answering")
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server did not answer /v1/models within {timeout:.0f}s")


async def one_request(client: Any, url: str, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    started = time.perf_counter()
    first, tokens, chunks = None, None, 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {(await response.aread())[:200]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    chunks += 1
                    first = first if first is not None else time.perf_counter() - started
            if event.get("usage"):
                tokens = event["usage"].get("completion_tokens")
    return {"ttft": first, "tokens": tokens if tokens is not None else chunks}


async def load(url: str, model: str, prompts: list[str], streams: int, max_tokens: int) -> dict[str, Any]:
    """Every prompt once, ``streams`` in flight; output tokens/s over the whole window, TTFT p50/p99."""
    import httpx

    todo = iter(prompts)
    results: list[dict[str, Any]] = []

    async def worker(client: httpx.AsyncClient) -> None:
        for prompt in todo:
            results.append(await one_request(client, url, model, prompt, max_tokens))

    async with httpx.AsyncClient(timeout=300) as client:
        await one_request(client, url, model, prompts[0], 4)  # warm-up: first-call allocations
        started = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(streams)))
        wall = time.perf_counter() - started
    ttfts = sorted(r["ttft"] for r in results if r["ttft"] is not None)
    if not ttfts:
        raise RuntimeError("no response carried any text")
    quantiles = statistics.quantiles(ttfts, n=100, method="inclusive") if len(ttfts) > 1 else ttfts * 99
    return {"tokens_per_s": round(sum(r["tokens"] for r in results) / wall, 1),
            "ttft_p50_ms": round(1000 * quantiles[49], 1), "ttft_p99_ms": round(1000 * quantiles[98], 1),
            "requests": len(results), "streams": streams}  # fmt: skip


def serve_row(row: dict[str, Any], work: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Start ``row['server']`` on the serving model, put the load on it, stop it."""
    model_dir = work / "models" / f"{row['shape']}-serve"
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    build_model(row["shape"], model_dir, vocab_from_tokenizer=True)
    port = free_port()
    argv, model = server_command(row["server"], model_dir, port, row["device"])
    log_path = work / f"{row['name']}.log"
    rng = random.Random(1)
    prompts = [
        " ".join(rng.choice(WORDS) for _ in range(row["prompt_words"])) for _ in range(row["requests"])
    ]
    url = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        started = time.monotonic()
        wait_ready(url, process, timeout * 0.6)
        ready_s = time.monotonic() - started
        result = asyncio.run(load(url, model, prompts, row["streams"], row["max_tokens"]))
    except RuntimeError as error:
        tail = [line for line in log_path.read_text().splitlines() if line.strip()][-1:]
        raise RuntimeError(f"{error}{'; last server line: ' + tail[0] if tail else ''}") from None
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return {**result, "start_s": round(ready_s, 1), "max_tokens": row["max_tokens"]}
