#!/usr/bin/env python3
"""Throughput and TTFT of `gym serve` beside `transformers serve` on the same builtin:tiny folder.

Runs /work/shared/peers/loadtest_openai.py (official openai client, streaming) as a subprocess at 1, 8
and 16 concurrent streams against each server, in one run, on loopback only. `transformers serve`
needs the `transformers[serving]` extras; when it cannot start, the reason is printed and it is skipped.

    python bench/serve_load.py [--requests 32] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOADTEST = REPO.parent / "shared" / "peers" / "loadtest_openai.py"
SERVE = "import typer; from gym.cli.serve_commands import register; a = typer.Typer(); register(a); a()"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait(url: str, process: subprocess.Popen, timeout: float) -> str | None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"exited with code {process.returncode}: {process.stderr.read()[-600:] if process.stderr else ''}"
        for path in ("/health", "/v1/models"):
            try:
                if httpx.get(url + path, timeout=2).status_code == 200:
                    return None
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    return f"not ready after {timeout:.0f}s"


def run_levels(name: str, cmd: list[str], model: str, model_dir: Path, args: argparse.Namespace) -> None:
    port = free_port()
    process = subprocess.Popen(
        [*cmd, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        problem = wait(url, process, args.start_timeout)
        if problem:
            print(json.dumps({"server": name, "skipped": problem}))
            return
        for streams in (1, 8, 16):
            done = subprocess.run(
                [sys.executable, str(LOADTEST), url + "/v1", model, str(streams), str(args.requests), str(args.max_tokens),
                 "--temperature", "0", "--tokenizer", str(model_dir / "tokenizer.json")],
                capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            try:
                result = json.loads(done.stdout.strip().splitlines()[-1])
            except (IndexError, json.JSONDecodeError):
                result = {"error": done.stderr[-400:]}
            keep = (
                "output_tok_per_s",
                "ttft_p50_s",
                "ttft_p99_s",
                "ttft_p50",
                "ttft_p99",
                "errors",
                "n_ok",
                "ok",
            )
            summary = {
                k: v for k, v in result.items() if k in keep or "ttft" in k or "tok_per_s" in k or "err" in k
            }
            print(json.dumps({"server": name, "streams": streams, **summary}), flush=True)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--start-timeout", type=float, default=120)
    args = parser.parse_args()
    if not LOADTEST.is_file():
        sys.exit(f"load client not found at {LOADTEST}")
    from gym.model.builtin import ensure_builtin

    root = Path(os.environ.get("GYM_BENCH_CACHE") or tempfile.mkdtemp(prefix="gym-bench-"))
    model_dir = ensure_builtin("builtin:tiny", root=root)
    gym_cmd = [
        sys.executable,
        "-c",
        SERVE,
        "serve",
        str(model_dir),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
    ]
    run_levels("gym serve", gym_cmd, "tiny", model_dir, args)
    tf = Path(sys.executable).with_name("transformers")
    tf_cmd = [str(tf), "serve", str(model_dir), "--host", "127.0.0.1", "--device", "cpu"]
    if not tf.exists():
        print(json.dumps({"server": "transformers serve", "skipped": "no `transformers` CLI in this venv"}))
    else:
        run_levels("transformers serve", tf_cmd, str(model_dir), model_dir, args)
        run_levels(
            "transformers serve --continuous-batching",
            [*tf_cmd, "--continuous-batching"],
            str(model_dir),
            model_dir,
            args,
        )


if __name__ == "__main__":
    main()
