"""A real project for the web UI tests: builtin:tiny, the reversal dataset, a gym.toml with comments;
`gym webui` started as a user starts it, on a free loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

GYM_TOML = """\
# the web UI keeps this comment
[project]
name = "webui-test"
output_dir = "outputs/run"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "{dataset}"
format = "alpaca"
max_samples = 200

[train]
method = "sft"
adapter = "lora"
max_steps = {steps}
learning_rate = 3e-2  # large: LoRA on a random base
batch_size = 8
max_length = 64
logging_steps = 1
save_steps = {save_steps}

[eval]
tasks = ["gym_reverse"]
limit = 4
"""


def write_project(
    folder: Path, *, steps: int = 12, save_steps: int = 4, dataset: str = "data/train.jsonl"
) -> Path:
    from gym.data.builtin_datasets import write_reverse_dataset

    write_reverse_dataset(folder / "data")
    path = folder / "gym.toml"
    path.write_text(GYM_TOML.format(steps=steps, save_steps=save_steps, dataset=dataset), encoding="utf-8")
    return path


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_page(url: str, process: subprocess.Popen | None = None, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"gym webui exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer")


@pytest.fixture(scope="module")
def webui_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment of the UI and the runs it starts: a private cache with builtin:tiny built once."""
    from gym.model.builtin import ensure_builtin

    cache = tmp_path_factory.mktemp("cache")
    ensure_builtin("builtin:tiny", root=cache / "gym" / "builtin")
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "GYM_WEBUI_AUTH", "GYM_WEBUI_PASSWORD")
    }
    env.update(XDG_CACHE_HOME=str(cache), HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False",
               TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO))  # fmt: skip
    return env


def start_webui(folder: Path, env: dict[str, str], *extra: str) -> tuple[str, subprocess.Popen]:
    """`gym webui gym.toml --port P` in ``folder``; its output goes to webui.log there."""
    port = free_port()
    log = (folder / "webui.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "gym", "webui", "gym.toml", "--port", str(port), *extra],
        cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for_page(url, process)
    except Exception:
        stop_process(process)
        raise RuntimeError((folder / "webui.log").read_text()) from None
    return url, process


def stop_process(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def webui(tmp_path_factory: pytest.TempPathFactory, webui_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """A running `gym webui` over a fresh project; yields (url, project folder)."""
    folder = tmp_path_factory.mktemp("project")
    write_project(folder, steps=16, save_steps=1)
    url, process = start_webui(folder, webui_env)
    yield url, folder
    stop_process(process)


def ask(page, text: str, images: list[Path]) -> None:
    """Type ``text``, attach ``images`` with the box's upload button, press Send."""
    page.locator("#chat-input textarea").fill(text)
    if images:
        page.locator("#chat-input input[type=file]").set_input_files([str(p) for p in images])
        page.locator("#chat-input .thumbnail-item").nth(len(images) - 1).wait_for()
    page.locator("#chat-send").click()


def wait_for_state(client, states: tuple[str, ...], timeout: float = 300) -> dict:
    """Poll /run_status until the run is in one of ``states``; the last status."""
    deadline = time.monotonic() + timeout
    status: dict = {}
    while time.monotonic() < deadline:
        status = client.predict(api_name="/run_status")
        if status["state"] in states:
            return status
        time.sleep(1)
    raise TimeoutError(f"run never reached {states}: {status}")
