"""Fixtures for the serving tests: builtin:tiny built once per module into a temporary cache, and
real `gym serve` processes on free loopback ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVE_MAIN = Path(__file__).with_name("serve_main.py")
API_KEY = "sk-test-not-a-real-key-123"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"server exited with {process.returncode}: {process.stderr.read() if process.stderr else ''}"
            )
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not become healthy")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache (and one builtin:tiny build) for every serving test module of the session."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(scope="session")
def tiny_dir(cache_root: Path) -> Path:
    from gym.model.builtin import ensure_builtin

    return ensure_builtin("builtin:tiny", root=cache_root / "gym" / "builtin")


def server_env(cache_root: Path, **extra: str) -> dict[str, str]:
    """The environment of a Gym command in a test. Each command gets its own Xet cache: hf_xet skips
    uploading chunks its cache says the Hub already holds, which is true of the one real Hub but not of the
    many doubles one test run starts (huggingface_hub 2.x keeps one XetSession over that cache)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GYM_API_KEY", "HF_TOKEN")}
    env.update(XDG_CACHE_HOME=str(cache_root), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    (cache_root / "xet-per-command").mkdir(parents=True, exist_ok=True)
    env["HF_XET_CACHE"] = tempfile.mkdtemp(dir=cache_root / "xet-per-command")
    env.update(extra)
    return env


def start_server(
    args: list[str], env: dict[str, str], log: Path | None = None
) -> tuple[str, subprocess.Popen]:
    """`gym serve ARGS` on a free port; ``log``: a file for its stdout and stderr (readable while it runs)."""
    port = free_port()
    output = log.open("w") if log is not None else subprocess.PIPE
    process = subprocess.Popen(
        [sys.executable, str(SERVE_MAIN), "serve", *args, "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT if log is not None else subprocess.PIPE,
        text=True,
    )  # fmt: skip
    if log is not None:
        output.close()  # the child holds its own copy
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
    except Exception:
        stop(process)
        raise
    return url, process


@pytest.fixture(scope="session")
def server(tiny_dir: Path, cache_root: Path) -> Iterator[str]:
    """`gym serve builtin:tiny` with an API key set, one per test process for every module that only
    talks to it (a server start is a full torch import and model load); yields its base URL."""
    url, process = start_server(["builtin:tiny"], server_env(cache_root, GYM_API_KEY=API_KEY))
    yield url
    stop(process)
