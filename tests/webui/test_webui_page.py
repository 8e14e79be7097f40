"""A person in headless Chromium clicks through Config → Train → Chat of a running `gym webui`; a
screenshot of each tab is kept in tests/artifacts/. On the same running UI, whose tuned model is then a
text-only LoRA: an attached image is refused with one sentence, and the typed text and the image stay
in the box; an unreadable file is named."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from tests.browser import screenshot
from tests.webui.conftest import ask, start_webui, stop_process, write_project

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, webui_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """One `gym webui` for the module (a start is a gradio and torch import): the browser test trains
    its model, then the image test chats with it."""
    folder = tmp_path_factory.mktemp("page")
    write_project(folder, steps=8, save_steps=4)
    url, process = start_webui(folder, webui_env)
    yield url, folder
    stop_process(process)


def test_config_train_chat_in_a_browser(served: tuple[str, Path], webui_env: dict[str, str], page) -> None:
    url, folder = served
    page.goto(url)

    page.get_by_role("tab", name="Config").click()
    page.locator("#validation").get_by_text("valid").first.wait_for()  # the page has loaded the file
    steps = page.get_by_label("Max steps (0: epochs)")
    steps.fill("10")
    steps.press("Tab")
    page.wait_for_function("() => document.querySelector('#editor')?.innerText.includes('max_steps = 10')")
    page.locator("#validation").get_by_text("valid").first.wait_for()
    page.locator("#save").click()
    page.locator("#save-result").get_by_text("saved gym.toml").wait_for()
    assert "max_steps = 10" in (folder / "gym.toml").read_text()
    assert "# the web UI keeps this comment" in (folder / "gym.toml").read_text()
    assert screenshot(page, "webui_config.png").stat().st_size > 20_000

    page.get_by_role("tab", name="Train").click()
    page.locator("#start-run").click()
    page.locator("#run-message").get_by_text("started").wait_for()
    page.reload()  # the run is the server's subprocess, not the page's: it keeps going
    page.get_by_role("tab", name="Train").click()
    page.locator('#run-progress[data-state="finished"]').wait_for(timeout=300_000)
    assert "step 10 / 10" in page.locator("#run-progress").inner_text()
    page.wait_for_timeout(2000)  # let the plots draw
    assert screenshot(page, "webui_train.png").stat().st_size > 20_000

    page.get_by_role("tab", name="Chat").click()
    for label, value in (("temperature", "0"), ("max new tokens", "12")):
        number = page.locator(f"input[type=number][aria-label='number input for {label}']")
        number.fill(value)
        number.press("Enter")
    page.locator("#chat-input textarea").fill("Reverse: a b")
    page.locator("#chat-send").click()
    page.locator("#chat-note").get_by_text("done").wait_for(timeout=120_000)
    assert "Reverse: a b" in page.locator("#chat-tuned [data-testid='user']").last.inner_text()
    tuned = page.locator("#chat-tuned [data-testid='bot']").last.inner_text()
    base = page.locator("#chat-base [data-testid='bot']").last.inner_text()
    assert screenshot(page, "webui_chat.png").stat().st_size > 20_000
    # the reference: `gym serve`'s app for the same two models answering the same message at temperature 0
    references = api_answer(folder / "outputs" / "run", webui_env), api_answer("builtin:tiny", webui_env)
    assert (tuned, base) == references
    assert "Reverse: a b" not in (tuned, base)


def api_answer(model: str | Path, env: dict[str, str]) -> str:
    """`gym serve MODEL`'s app answering 'Reverse: a b' at temperature 0, 12 tokens: the app is built in
    this process (the same factory and engine as the command, without another torch import), on one
    thread as the UI's own process runs, and asked over HTTP through Starlette's test client."""
    import torch
    from fastapi.testclient import TestClient

    from gym.api.factory import build_serving_app

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with mock.patch.dict(os.environ, XDG_CACHE_HOME=env["XDG_CACHE_HOME"], HF_HUB_OFFLINE="1"):
            app = build_serving_app(str(model))
            try:
                with TestClient(app) as client:
                    (served,) = [entry["id"] for entry in client.get("/v1/models").json()["data"]]
                    body = {"model": served, "messages": [{"role": "user", "content": "Reverse: a b"}],
                            "max_tokens": 12, "temperature": 0}  # fmt: skip
                    reply = client.post("/v1/chat/completions", json=body)
                    assert reply.status_code == 200, reply.text
                    return reply.json()["choices"][0]["message"]["content"] or ""
            finally:
                app.state.backend.close()
    finally:
        torch.set_num_threads(threads)


def test_an_image_for_a_text_only_model_is_refused_and_nothing_is_lost(
    served: tuple[str, Path], webui_env: dict[str, str], tmp_path: Path, page
) -> None:
    from PIL import Image

    from gym.model.builtin import ensure_builtin

    url, folder = served
    if not (folder / "outputs" / "run" / "adapter_config.json").is_file():  # run alone: no trained LoRA yet
        model = ensure_builtin("builtin:tiny", root=Path(webui_env["XDG_CACHE_HOME"]) / "gym" / "builtin")
        shutil.copytree(model, folder / "outputs" / "run", dirs_exist_ok=True)
    image = tmp_path / "red.png"
    Image.new("RGB", (40, 40), (220, 30, 30)).save(image)
    broken = tmp_path / "broken.png"
    broken.write_text("not a picture")
    page.goto(url)
    page.get_by_role("tab", name="Chat").click()

    ask(page, "Reverse: a b", [broken])
    note = page.locator("#chat-note")
    note.get_by_text("broken.png is not an image this chat can read").wait_for()
    assert page.locator("#chat-input textarea").input_value() == "Reverse: a b"
    page.locator("#chat-input .thumbnail-item button").first.click()  # remove it; attach a real image
    page.locator("#chat-input .thumbnail-item").first.wait_for(state="detached")

    ask(page, "Reverse: a b", [image])
    note.get_by_text("is a text-only model and cannot read images").wait_for(timeout=120_000)
    text = note.inner_text()
    assert text.startswith(f"✗ the tuned model in {folder / 'outputs' / 'run'} is a text-only model"), text
    assert "remove the image to send the text alone" in text and "still in the box" in text
    assert "Traceback" not in text
    assert page.locator("#chat-input textarea").input_value() == "Reverse: a b"  # nothing typed is lost
    assert page.locator("#chat-input .thumbnail-item").count() == 1  # nor the image
    assert page.locator("#chat-tuned .message").count() == 0  # nothing half-sent into the conversation
    assert page.locator("#chat-base .message").count() == 0
    screenshot(page, "webui_chat_text_only_image.png")

    page.locator("#chat-input .thumbnail-item button").first.click()  # as the sentence says
    page.locator("#chat-send").click()
    note.get_by_text("done").wait_for(timeout=120_000)
    assert "Reverse: a b" in page.locator("#chat-tuned").inner_text()
    assert "Reverse: a b" in page.locator("#chat-base").inner_text()
