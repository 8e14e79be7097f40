"""The rendered Space, started with uvicorn from its own folder (so its copied `gym` is what runs),
answers the openai client like `gym serve` and serves the Gradio chat at /."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from gym.hub.space import SpaceSettings, render_space
from tests.api.conftest import free_port, server_env, stop, wait_healthy

pytestmark = pytest.mark.slow
KEY = "sk-space-test-key"


def test_rendered_space_serves_api_and_chat(tiny_dir: Path, cache_root: Path, tmp_path: Path) -> None:
    space = render_space(
        tmp_path / "space", SpaceSettings(model_repo="acme/tiny", space_repo="acme/tiny-chat")
    )
    port = free_port()
    env = server_env(cache_root, GYM_MODEL=str(tiny_dir), GYM_API_KEY=KEY, GRADIO_ANALYTICS_ENABLED="False",
                     PYTHONPATH="")  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=space, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["acme/tiny"]
        messages = [{"role": "user", "content": "Reverse: a b"}]
        full = client.chat.completions.create(
            model="acme/tiny", messages=messages, max_tokens=8, temperature=0
        )
        streamed = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model="acme/tiny", messages=messages, max_tokens=8, temperature=0, stream=True
            )
            if c.choices
        )
        assert streamed == full.choices[0].message.content
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url + "/v1", api_key="nope", max_retries=0).models.list()
        page = httpx.get(url + "/", timeout=30, follow_redirects=True)
        assert page.status_code == 200 and "gradio" in page.text.lower()
        from gradio_client import Client

        # the API key gates the chat too: without it the Gradio client is refused, with it it chats
        with pytest.raises(Exception, match="(?i)login|auth|401|403"):
            Client(url + "/", verbose=False).predict("Reverse: a b", api_name="/chat")
        with pytest.raises(Exception, match="(?i)login|auth|incorrect|401|403"):
            Client(url + "/", verbose=False, auth=("anyone", "wrong-key"))
        reply = Client(url + "/", verbose=False, auth=("anyone", KEY)).predict(
            "Reverse: a b", api_name="/chat"
        )
        assert isinstance(reply, str)
        probe = subprocess.run([sys.executable, "-c", "import gym; print(gym.__file__)"], cwd=space, env=env,
                               capture_output=True, text=True, check=True)  # fmt: skip
        assert Path(probe.stdout.strip()).parent.parent == space  # the Space runs its own copy of gym
    finally:
        stop(process)


def test_space_carries_a_training_free_library(tmp_path: Path) -> None:
    import asyncio
    import json

    from gym.api.ui import chat_function

    library = tmp_path / "experiences.json"
    library.write_text(json.dumps(["When reversing, start from the last letter."]))
    settings = SpaceSettings(model_repo="acme/tiny", space_repo="acme/tiny-chat", experiences=str(library))
    space = render_space(tmp_path / "space", settings)
    assert json.loads((space / "gym_space.json").read_text())["experiences"] == "experiences.json"
    assert (space / "experiences.json").read_text() == library.read_text()

    seen: list[list[dict]] = []

    class Backend:
        context_length = 512

        def encode_chat(self, messages: list[dict]) -> list[int]:
            seen.append(messages)
            return [1, 2, 3]

        async def generate(self, prompt, params):
            yield type("Chunk", (), {"text": "ok"})()

    async def first_reply() -> str:
        return [r async for r in chat_function(Backend(), system_prompt="[1]. When reversing ...")("hi", [])][
            -1
        ]

    assert asyncio.run(first_reply()) == "ok"
    assert seen[0][0]["role"] == "system" and "When reversing" in seen[0][0]["content"]


def test_space_chat_page_in_headless_chromium(tiny_dir: Path, cache_root: Path, tmp_path: Path, page) -> None:
    """A person's view: the Space page loads, a chat message sent through it gets a reply, screenshot kept."""
    from tests.browser import screenshot

    space = render_space(
        tmp_path / "space", SpaceSettings(model_repo="acme/tiny", space_repo="acme/tiny-chat")
    )
    port = free_port()
    env = server_env(cache_root, GYM_MODEL=str(tiny_dir), GRADIO_ANALYTICS_ENABLED="False", PYTHONPATH="")
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=space, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        page.goto(url + "/")
        page.locator("textarea").first.fill("Reverse: a b")
        page.locator('[data-testid="submit-button"]').click()
        user = page.locator('[data-testid="user"]').first
        user.wait_for(timeout=60_000)
        bot = page.locator('[data-testid="bot"]').first
        bot.wait_for(timeout=90_000)
        page.wait_for_function(
            "() => document.querySelector('[data-testid=\"bot\"]')?.innerText.trim().length > 0",
            timeout=90_000,
        )
        assert (
            "Reverse: a b" in user.inner_text()
        )  # the untrained tiny model replies with noise, but it replies
        shot = screenshot(page, "space_chat.png")
        assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
    finally:
        stop(process)


def test_space_chat_of_a_vision_model_accepts_an_uploaded_image(cache_root: Path, tmp_path: Path) -> None:
    """builtin:tiny-vl in the rendered Space: the Gradio chat is multimodal and answers an uploaded image
    (driven by gradio_client), and the API takes an image_url part."""
    import base64
    import io

    from gradio_client import Client, handle_file
    from PIL import Image

    from gym.model.builtin import ensure_builtin

    model = ensure_builtin("builtin:tiny-vl", root=cache_root / "gym" / "builtin")
    image = tmp_path / "red.png"
    Image.new("RGB", (40, 40), (220, 30, 30)).save(image)
    space = render_space(
        tmp_path / "space", SpaceSettings(model_repo="acme/tiny-vl", space_repo="acme/vl-chat")
    )
    port = free_port()
    env = server_env(cache_root, GYM_MODEL=str(model), GRADIO_ANALYTICS_ENABLED="False", PYTHONPATH="")
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=space, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        reply = Client(url + "/", verbose=False).predict(
            {"text": "What colour is the shape?", "files": [handle_file(str(image))]}, api_name="/chat"
        )
        assert isinstance(reply, str)
        broken = tmp_path / "broken.png"
        broken.write_bytes(b"not a png")
        with pytest.raises(Exception, match=r"broken\.png is not an image this chat can read"):
            Client(url + "/", verbose=False).predict(
                {"text": "and this?", "files": [handle_file(str(broken))]}, api_name="/chat"
            )
        buffer = io.BytesIO()
        Image.open(image).save(buffer, format="PNG")
        part = {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()},
        }
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
        answer = client.chat.completions.create(
            model="acme/tiny-vl", messages=[{"role": "user", "content": [part]}], max_tokens=3, temperature=0
        )
        assert answer.usage.prompt_tokens > 16  # the image's 16 tokens are part of the prompt
    finally:
        stop(process)
