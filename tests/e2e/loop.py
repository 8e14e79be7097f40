"""The pieces of the one-loop test: every remote service is a double on 127.0.0.1 driven by its real client.

- GitHub: :class:`tests.action.github_server.FakeGitHub` (PyGithub), plus commit statuses.
- SkyPilot: :class:`tests.launch.sky_double.SkyDouble` (SkyPilot's SDK), which runs the task as its node.
- Hub: :class:`tests.hub.hub_double.HubDouble` (huggingface_hub), private repos, uploads and downloads.
- The Space: downloaded from the Hub double, its requirements installed into a fresh venv, started with
  ``python app.py`` (:mod:`tests.space_runtime`) and exactly the secrets deploy set.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests import space_runtime
from tests.action.github_server import FakeGitHub
from tests.conftest import REPO
from tests.space_runtime import RunningSpace, wait_healthy  # noqa: F401 - the tests' Space helpers

GITHUB_TOKEN = "ghs_" + "G" * 36
HF_TOKEN = "hf_" + "W" * 34  # writes: pushes the model and the Space
READ_TOKEN = "hf_" + "R" * 34  # reads: the Space's HF_TOKEN secret
API_KEY = "sk-space-" + "K" * 24
REPORT_TOKEN = "github_pat_" + "P" * 40
POLICY_KEY = "sk-policy-" + "Q" * 24  # the training-free rollouts' endpoint key
SECRETS = (GITHUB_TOKEN, HF_TOKEN, READ_TOKEN, API_KEY, REPORT_TOKEN, POLICY_KEY)


# The recording GitHub API answers commit statuses itself now (with its permission model).
GitHubWithStatuses = FakeGitHub


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def venv_path() -> str:
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"


def node_env(root: Path, hub_url: str, cache: Path) -> dict[str, str]:
    """What the SkyPilot node provides before the task's envs and secrets: tools, and the Hub it reaches."""
    home = root / "node-home"
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": venv_path(), "HOME": str(home), "PYTHONPATH": str(REPO), "GYM_CACHE_DIR": str(cache),
        "HF_ENDPOINT": hub_url, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "0",
        "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
        "GYM_CPU_KERNELS": "0",  # a GPU node's path: PEFT's layers, transformers' attention, plain batches
    }  # fmt: skip


def action_env(root: Path, github: FakeGitHub, event: dict[str, Any], name: str, sky_endpoint: str,
               workspace: Path, **extra: str) -> dict[str, str]:  # fmt: skip
    runner = root / f"runner-{name}"
    runner.mkdir(parents=True, exist_ok=True)
    (runner / "event.json").write_text(json.dumps(event))
    (runner / "home").mkdir(exist_ok=True)
    return {
        "PATH": venv_path(), "HOME": str(runner / "home"), "PYTHONPATH": str(REPO),
        "SKYPILOT_API_SERVER_ENDPOINT": sky_endpoint, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
        "GITHUB_EVENT_NAME": name, "GITHUB_EVENT_PATH": str(runner / "event.json"),
        "GITHUB_REPOSITORY": github.repo, "GITHUB_API_URL": github.base,
        "GITHUB_SERVER_URL": "https://github.example", "GITHUB_RUN_ID": "777", "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_OUTPUT": str(runner / "output"), "GITHUB_STEP_SUMMARY": str(runner / "summary.md"),
        "GYM_GITHUB_TOKEN": GITHUB_TOKEN, "GYM_INPUT_HF_TOKEN": HF_TOKEN, "GYM_INPUT_CLOUD": "true",
        **extra,
    }  # fmt: skip


def run_action(env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess:
    """The action's real entrypoint, as action.yml starts it (``python -m action`` from the action's folder)."""
    return subprocess.run([sys.executable, "-m", "action"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def card_scores(readme: str) -> dict[str, float]:
    """``{task: value}`` from the card's ``model-index``."""
    import yaml

    meta = yaml.safe_load(readme.split("---")[1])
    scores = {}
    for entry in meta["model-index"][0]["results"]:
        for metric in entry["metrics"]:
            scores[entry["dataset"]["name"]] = float(metric["value"])
    return scores


def eval_results_scores(files: dict[str, bytes]) -> dict[str, float]:
    """``{task: value}`` from the pushed ``.eval_results/*.yaml``."""
    import yaml

    scores = {}
    for path, content in files.items():
        if path.startswith(".eval_results/"):
            for entry in yaml.safe_load(content.decode()):
                scores[Path(path).stem] = float(entry["value"])
    return scores


def json_scores(results: dict[str, Any]) -> dict[str, float]:
    return {
        row["task"]: round(float(row["value"]), 6) for row in results["results"] if row["value"] is not None
    }


def comment_scores(body: str) -> dict[str, float]:
    """``{task: tuned value}`` from the eval table in the PR comment (columns: task, metric, n, base, tuned, ...)."""
    scores = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and re.fullmatch(r"-?\d+\.\d+", cells[4] or "") and cells[0] not in ("task", ""):
            scores[cells[0]] = float(cells[4])
    return scores


def files_under(folder: Path) -> Iterator[Path]:
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            yield path


def assert_no_secret(where: str, blob: bytes | str) -> None:
    data = blob.encode() if isinstance(blob, str) else blob
    for secret in SECRETS:
        assert secret.encode() not in data, f"a secret value leaked into {where}"


def start_space(
    space_repo: str, hub_url: str, secrets: dict[str, str], root: Path, cache: Path
) -> RunningSpace:
    """Download the Space from the Hub and start it as the Hub does (its requirements in a fresh venv,
    ``python app.py``) with exactly its secrets (nothing else secret)."""
    from huggingface_hub import snapshot_download

    folder = Path(snapshot_download(space_repo, repo_type="space", local_dir=root / "space",
                                    endpoint=hub_url, token=HF_TOKEN))  # fmt: skip
    env = {"HF_ENDPOINT": hub_url, "HF_HUB_OFFLINE": "0", "GYM_CACHE_DIR": str(cache), **secrets}
    return space_runtime.start_space(folder, free_port(), env, home=root / "space-home")


def chat_in_browser(url: str, key: str | None, message: str, screenshot: Path, max_tokens: int = 16) -> str:
    """Open the Space's chat in headless Chromium (Playwright), log in with the key, send a message at
    temperature 0, and return the bot's reply as shown on the page."""
    from tests.browser import open_page

    with open_page() as page:
        page.goto(url + "/", wait_until="networkidle", timeout=120_000)
        if key is not None:
            space_runtime.log_in(page, key)
        shown = space_runtime.chat_on_page(page, message, temperature=0, max_tokens=max_tokens)
        page.screenshot(path=str(screenshot))
        return shown


def login_refused(url: str, wrong_key: str) -> bool:
    """A wrong key is refused at the chat's login (Gradio's /login answers 400 with 'Incorrect credentials')."""
    import httpx

    response = httpx.post(url + "/login", data={"username": "reviewer", "password": wrong_key}, timeout=30)
    return response.status_code >= 400
