"""The rendered Space as the Hub runs it: its own requirements.txt installed into a fresh venv (nothing
from the test venv), started with `python app.py` as the Gradio SDK starts it (GRADIO_SERVER_NAME=0.0.0.0,
the port from PORT). It answers the openai client like `gym serve`, its key gates API and chat, and its
chat at temperature 0 shows the answer the API gives to the same message (gradio_client and Chromium)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gym.hub.space import SpaceSettings, render_space
from tests.api.conftest import free_port
from tests.space_runtime import (
    RunningSpace,
    api_answer,
    chat_on_page,
    imports_from,
    log_in,
    start_space,
    wait_healthy,
)

pytestmark = pytest.mark.slow
KEY = "sk-space-test-key"
MESSAGE = "Reverse: a b"


@pytest.fixture(scope="module")
def keyed_space(
    tiny_dir: Path, cache_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningSpace]:
    root = tmp_path_factory.mktemp("space-app")
    folder = render_space(root / "space", SpaceSettings(model_repo="acme/tiny", space_repo="acme/tiny-chat"))
    env = {
        "GYM_MODEL": str(tiny_dir),
        "GYM_API_KEY": KEY,
        "HF_HUB_OFFLINE": "1",
        "XDG_CACHE_HOME": str(cache_root),
    }
    space = start_space(folder, free_port(), env, home=root / "home")
    wait_healthy(space)
    yield space
    assert KEY not in space.stop()


def test_space_installs_from_its_requirements_and_serves_the_api(keyed_space: RunningSpace) -> None:
    url = keyed_space.url
    port = url.rsplit(":", 1)[1]
    assert (
        f"Uvicorn running on http://0.0.0.0:{port}" in keyed_space.log.read_text()
    )  # GRADIO_SERVER_NAME, PORT
    assert imports_from(keyed_space) == keyed_space.folder / "gym" / "__init__.py"  # its own copy of gym
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=60)
    assert [m.id for m in client.models.list().data] == ["acme/tiny"]
    messages = [{"role": "user", "content": MESSAGE}]
    full = client.chat.completions.create(model="acme/tiny", messages=messages, max_tokens=8, temperature=0)
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


def test_space_chat_at_temperature_zero_gives_the_api_answer(keyed_space: RunningSpace) -> None:
    from gradio_client import Client

    url = keyed_space.url + "/"
    # the API key gates the chat too: without it the Gradio client is refused, with it it chats
    with pytest.raises(Exception, match="(?i)login|auth|401|403"):
        Client(url, verbose=False).predict(MESSAGE, api_name="/chat")
    with pytest.raises(Exception, match="(?i)login|auth|incorrect|401|403"):
        Client(url, verbose=False, auth=("anyone", "wrong-key"))
    expected = api_answer(keyed_space.url, KEY, "acme/tiny", MESSAGE, max_tokens=16)
    reply = Client(url, verbose=False, auth=("anyone", KEY)).predict(MESSAGE, 0.0, 16, api_name="/chat")
    assert reply == expected and reply != MESSAGE


def test_space_chat_page_in_headless_chromium(keyed_space: RunningSpace, page) -> None:
    """A person's view: log in with the key, ask at temperature 0, see the API's answer; screenshot kept."""
    from tests.browser import screenshot

    expected = api_answer(keyed_space.url, KEY, "acme/tiny", MESSAGE, max_tokens=16)
    page.goto(keyed_space.url + "/")
    log_in(page, KEY)
    shown = chat_on_page(page, MESSAGE, temperature=0, max_tokens=16)
    assert MESSAGE in page.locator('[data-testid="user"]').last.inner_text()
    assert shown == expected and shown != MESSAGE
    assert screenshot(page, "space_chat.png").stat().st_size > 10_000  # a rendered page, not a blank one


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
    env = {"GYM_MODEL": str(model), "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(cache_root)}
    running = start_space(space, free_port(), env, home=tmp_path / "home")
    url = running.url
    try:
        wait_healthy(running)
        question = "What colour is the shape?"
        reply = Client(url + "/", verbose=False).predict(
            {"text": question, "files": [handle_file(str(image))]}, 0.0, 6, api_name="/chat"
        )
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
            model="acme/tiny-vl", messages=[{"role": "user", "content": [part, {"type": "text", "text": question}]}],
            max_tokens=6, temperature=0,
        )  # fmt: skip
        assert answer.usage.prompt_tokens > 16  # the image's 16 tokens are part of the prompt
        # the chat gave the uploaded image and the question to the model as the API does
        assert reply == answer.choices[0].message.content and reply != question
    finally:
        running.stop()
