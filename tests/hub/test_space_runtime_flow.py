"""`gym deploy` follows the Space it pushed, through the real huggingface_hub client, against a Hub double that
builds and runs the pushed Space as the Hub does (tests/hub/hub_spaces.py: the Space's own requirements in a
fresh venv, `python app.py` with its secrets, HF_ENDPOINT pointing at the double).

- A ZeroGPU Space (hardware zero-a10g) runs its generation inside @spaces.GPU (off ZeroGPU the decorator runs
  it on CPU, as the `spaces` package does): deploy waits for RUNNING, asks it once, and its Gradio chat and
  OpenAI API then give `gym serve`'s answer at temperature 0 (the same adapter served in this process).
- A Space whose requirement cannot install is BUILD_ERROR: deploy exits 1 with pip's line from the build log.
- An app without any @spaces.GPU function on zero-a10g is refused at start ("No @spaces.GPU function
  detected"), and the follower gym deploy runs reports it with the run log.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from unittest import mock

import openai
import pytest

from tests.api.conftest import free_port
from tests.hub.hub_double import HubDouble
from tests.hub.test_deploy import TOKEN, gym, lora_dir, write_config  # noqa: F401 - lora_dir is a fixture

pytestmark = pytest.mark.slow
KEY = "sk-zerogpu-space-key-31337"
MESSAGE = "Reverse: a b"


def write_project(folder: Path, hardware: str) -> Path:
    """test_deploy's project (adapter pushed to acme/tiny-lora, Space acme/tiny-lora-chat), public, on
    ``hardware``, followed for up to 10 minutes."""
    path = write_config(folder, space_token="")
    text = path.read_text().replace('hardware = "t4-small"', f'hardware = "{hardware}"')
    text = text.replace("wait_minutes = 0 ", "wait_minutes = 10 ")
    path.write_text(text.replace('push = "adapter"\n', 'push = "adapter"\nprivate = false\n'))
    return path


@pytest.fixture(scope="session")
def zerogpu_space_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv a ZeroGPU Space of this checkout builds (its requirements.txt as `gym deploy` renders it),
    built before any deploy starts: on a clean machine pip's install takes minutes, which belong to this
    fixture, not to the bounded `gym deploy` subprocess (the Hub double reuses the venv by requirements)."""
    from gym.hub.space import SpaceSettings, render_space
    from tests.space_runtime import space_python

    folder = render_space(
        tmp_path_factory.mktemp("zerogpu-space"), SpaceSettings("a/m", "a/m-chat", "zero-a10g")
    )
    return space_python(folder)


@pytest.fixture
def running_hub(cache_root: Path, zerogpu_space_venv: Path) -> Iterator[HubDouble]:
    """A Hub double that runs the Spaces pushed to it (each Space shares the suite's builtin:tiny cache)."""
    with HubDouble(TOKEN, free_port()) as hub:
        hub.state.run_spaces = True
        hub.state.space_env = {"XDG_CACHE_HOME": str(cache_root)}
        yield hub


def served_answer(model: Path, name: str, message: str, cache_root: Path, max_tokens: int) -> str:
    """`gym serve`'s app for ``model``, built in this process and asked over HTTP (Starlette's test client),
    at temperature 0: the reference a Space serving the same weights must match."""
    from fastapi.testclient import TestClient

    from gym.api.factory import build_serving_app

    with mock.patch.dict(os.environ, XDG_CACHE_HOME=str(cache_root), HF_HUB_OFFLINE="1"):
        app = build_serving_app(str(model), served_model_name=name)
        try:
            with TestClient(app) as client:
                body = {"model": name, "messages": [{"role": "user", "content": message}],
                        "max_tokens": max_tokens, "temperature": 0}  # fmt: skip
                reply = client.post("/v1/chat/completions", json=body)
                assert reply.status_code == 200, reply.text
                return reply.json()["choices"][0]["message"]["content"] or ""
        finally:
            app.state.backend.close()


def test_a_zerogpu_space_runs_and_answers_chat_and_api_as_gym_serve_does(
    lora_dir: Path,  # noqa: F811
    cache_root: Path,
    running_hub: HubDouble,
    tmp_path: Path,
) -> None:
    from gradio_client import Client
    from huggingface_hub import HfApi

    from gym.hub.space_runtime import QUESTION, space_url
    from tests.space_runtime import api_answer

    config = write_project(tmp_path, "zero-a10g")
    env = {"HF_ENDPOINT": running_hub.url, "HF_TOKEN": TOKEN, "GYM_API_KEY": KEY}
    done = gym(
        ["deploy", str(config), "--model_path", str(lora_dir)], cache_root, tmp_path, timeout=600, **env
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    space = running_hub.state.files["space:acme/tiny-lora-chat"]
    assert json.loads(space["gym_space.json"])["zerogpu"] is True and b"spaces" in space["requirements.txt"]
    assert "Space acme/tiny-lora-chat: BUILDING (" in out  # the progress line: stage and seconds
    runtime = HfApi(endpoint=running_hub.url, token=TOKEN).get_space_runtime("acme/tiny-lora-chat")
    assert runtime.stage == "RUNNING" and runtime.hardware == "zero-a10g"
    url = space_url(runtime.raw, "acme/tiny-lora-chat")
    assert f"Space acme/tiny-lora-chat RUNNING at {url}" in out
    # deploy's one question got gym serve's answer; the chat and the API give it for another message too
    expected_first = served_answer(lora_dir, "acme/tiny-lora", QUESTION, cache_root, 16)
    assert f"answered a chat request: {expected_first.strip().splitlines()[0]!r}" in out
    expected = served_answer(lora_dir, "acme/tiny-lora", MESSAGE, cache_root, 16)
    assert expected and expected != MESSAGE
    assert api_answer(url, KEY, "acme/tiny-lora", MESSAGE, max_tokens=16) == expected
    with pytest.raises(openai.AuthenticationError):  # the API key secret reached the (restarted) Space
        api_answer(url, "not-the-key", "acme/tiny-lora", MESSAGE, max_tokens=16)
    chat = Client(url + "/", verbose=False, auth=("anyone", KEY)).predict(MESSAGE, 0.0, 16, api_name="/chat")
    assert chat == expected
    assert KEY not in out and TOKEN not in out


class _Index(BaseHTTPRequestHandler):
    """A package index's JSON API that lists every version asked for (so the Space pins the released package)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        version = self.path.strip("/").split("/")[-2]
        body = json.dumps({"info": {"name": "zoo-gym", "version": version}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_space_whose_requirement_cannot_install_is_a_build_error_with_its_log_line(
    lora_dir: Path,  # noqa: F811
    cache_root: Path,
    running_hub: HubDouble,
    tmp_path: Path,
) -> None:
    """The index Gym asks says this version is released, so the Space pins zoo-gym[space]==VERSION; the
    index the Space's build installs from has no such release: pip fails, the Space is BUILD_ERROR."""
    from gym import __version__

    index = HTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=index.serve_forever, daemon=True).start()
    config = write_project(tmp_path, "zero-a10g")
    env = {"HF_ENDPOINT": running_hub.url, "HF_TOKEN": TOKEN,
           "GYM_PACKAGE_INDEX": f"http://127.0.0.1:{index.server_port}/pypi"}  # fmt: skip
    try:
        done = gym(["deploy", str(config), "--model_path", str(lora_dir)], cache_root, tmp_path, **env)
    finally:
        index.shutdown()
    requirements = running_hub.state.files["space:acme/tiny-lora-chat"]["requirements.txt"].decode()
    assert f"zoo-gym[space]=={__version__}" in requirements
    assert done.returncode == 1
    assert "error: the Space acme/tiny-lora-chat failed to build (BUILD_ERROR" in done.stderr
    assert "last lines of its build log:" in done.stderr
    assert "No matching distribution found for zoo-gym" in done.stderr  # pip's own line, from the build log
    assert "Traceback" not in done.stderr and TOKEN not in done.stdout + done.stderr
    assert "acme/tiny-lora" in {key.split(":", 1)[1] for key in running_hub.state.repos}  # the model landed


def test_an_app_without_a_spaces_gpu_function_is_refused_on_zerogpu(
    cache_root: Path, running_hub: HubDouble, tmp_path: Path
) -> None:
    """A Space on zero-a10g whose app (here: one written by hand) decorates nothing with @spaces.GPU."""
    from huggingface_hub import HfApi

    from gym.hub.push import DeployError
    from gym.hub.space import SpaceSettings, render_space
    from gym.hub.space_runtime import follow_space

    rendered = render_space(
        tmp_path / "rendered", SpaceSettings("acme/m", "acme/plain", hardware="zero-a10g")
    )
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "README.md").write_text("---\ntitle: plain\nsdk: gradio\napp_file: app.py\n---\n")
    # the ZeroGPU Space's requirements (its venv is the one the other test built): only the app differs
    (folder / "requirements.txt").write_text((rendered / "requirements.txt").read_text())
    (folder / "app.py").write_text("import spaces\n\ndef generate(text):\n    return text[::-1]\n")
    api = HfApi(endpoint=running_hub.url, token=TOKEN)
    api.create_repo("acme/plain", repo_type="space", space_sdk="gradio", space_hardware="zero-a10g")
    api.upload_folder(repo_id="acme/plain", repo_type="space", folder_path=folder)
    lines: list[str] = []
    with pytest.raises(DeployError) as failed:
        follow_space(api, "acme/plain", model="acme/m", timeout_s=600, echo=lines.append, poll_s=0.5)
    first, *rest = str(failed.value).splitlines()
    assert first.startswith(
        "the Space acme/plain failed to start (RUNTIME_ERROR: No @spaces.GPU function detected); fix it"
    )
    assert rest == ["last lines of its run log:", "  ZeroGPU: No @spaces.GPU function detected"]
    assert lines[-1].startswith(
        "Space acme/plain: RUNTIME_ERROR ("
    )  # the progress line (a cached venv: at once)
    # the same folder with one decorated function passes the check (it is the decorator, not the import)
    (folder / "app.py").write_text(
        "import spaces\n\n@spaces.GPU(duration=10)\ndef generate(text):\n    return text\n"
    )
    from tests.hub.hub_spaces import gpu_functions

    assert gpu_functions(folder) == ["app.py:generate"]
