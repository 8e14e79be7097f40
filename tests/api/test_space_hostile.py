"""The rendered Space, started as Hugging Face starts it (`python app.py`, uvicorn's default access log):
a credential sent in the query string never reaches its log, and an integer too long for Python is a 400
naming the field on a connection that stays usable."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gym.hub.space import SpaceSettings, render_space
from tests.api.conftest import free_port, server_env, stop, wait_healthy

pytestmark = pytest.mark.slow
KEY = "sk-space-hostile-key"


def test_space_log_masks_query_credentials_and_huge_integers_are_a_400(
    tiny_dir: Path, cache_root: Path, tmp_path: Path
) -> None:
    space = render_space(
        tmp_path / "space", SpaceSettings(model_repo="acme/tiny", space_repo="acme/tiny-chat")
    )
    port = free_port()
    env = server_env(cache_root, GYM_MODEL=str(tiny_dir), GYM_API_KEY=KEY, GRADIO_ANALYTICS_ENABLED="False",
                     PYTHONPATH="", PORT=str(port), GRADIO_SERVER_PORT=str(port), GYM_HOST="127.0.0.1",
                     GRADIO_SERVER_NAME="127.0.0.1")  # fmt: skip
    log = tmp_path / "space.log"
    with log.open("w") as output:
        process = subprocess.Popen([sys.executable, "app.py"], cwd=space, env=env, stdout=output,
                                   stderr=subprocess.STDOUT, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    leaks = [f"sk-leak-{secrets.token_hex(8)}" for _ in range(2)]
    try:
        wait_healthy(url, process)
        assert httpx.get(f"{url}/v1/models?api_key={leaks[0]}", timeout=30).status_code == 401
        httpx.get(f"{url}/?__theme=dark&access_token={leaks[1]}", timeout=30)  # the chat page's own route
        hello = {"model": "acme/tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as client:
            huge = client.post("/v1/chat/completions", content=json.dumps(hello)[:-1] + f', "n": {"1" * 5000}}}',
                               headers={"Content-Type": "application/json"})  # fmt: skip
            assert huge.status_code == 400 and huge.json()["error"]["param"] == "n"
            assert (
                huge.json()["error"]["message"]
                == "n: an integer of 5,000 digits; at most 4,300 are accepted."
            )
            after = client.post("/v1/chat/completions", json=hello)
            assert after.status_code == 200
            stream = huge.extensions["network_stream"], after.extensions["network_stream"]
            assert stream[0].get_extra_info("client_addr") == stream[1].get_extra_info("client_addr")
        deadline = time.monotonic() + 30
        while "POST /v1/chat/completions" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop(process)
    text = log.read_text()
    assert not any(leak in text for leak in leaks), text
    assert '"GET /v1/models?api_key=*** HTTP/1.1" 401' in text, text
    assert "GET /?__theme=dark&access_token=*** HTTP/1.1" in text, text
    assert "Traceback" not in text, text
