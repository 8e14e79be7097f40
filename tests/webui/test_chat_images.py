"""Images in `gym webui`'s Chat tab, in headless Chromium.

A vision-language project (builtin:tiny-vl trained on the built-in colour task, ~10 s):
an uploaded held-out image is answered with its colour, and a second image of another colour gets
the other colour: the reply can only come from the pixels (the typed text is the same). An image sent
to a text-only model is refused on the page of tests/webui/test_webui_page.py, which has one running.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import screenshot
from tests.webui.conftest import ask, start_webui, stop_process

pytestmark = pytest.mark.slow

QUESTION = "What colour is the shape?"
VISION_TOML = """\
[project]
name = "webui-vision"
output_dir = "outputs/run"

[model]
name_or_path = "builtin:tiny-vl"
template = "chatml"

[[datasets]]
path = "data/train.jsonl"
format = "openai"

[train]
method = "sft"
adapter = "full"
max_steps = 50
learning_rate = 3e-3
warmup_ratio = 0.1
batch_size = 16
max_length = 64
save_steps = 50
"""


def _last_reply(page, chatbot: str) -> str:
    return page.locator(f"#{chatbot} .message.bot").last.inner_text().strip()


def _zero_temperature(page) -> None:
    number = page.get_by_label("number input for temperature")
    number.fill("0")
    number.press("Enter")


@pytest.fixture(scope="module")
def vision_project(tmp_path_factory: pytest.TempPathFactory, webui_env: dict[str, str]) -> Iterator[tuple]:
    """`gym webui` over a colour project with a trained builtin:tiny-vl; (url, folder, test rows)."""
    from gym.data.builtin_vision import write_colour_dataset
    from gym.model.builtin import ensure_builtin

    ensure_builtin("builtin:tiny-vl", root=Path(webui_env["XDG_CACHE_HOME"]) / "gym" / "builtin")
    folder = tmp_path_factory.mktemp("vision")
    paths = write_colour_dataset(folder / "data", n_train=800, n_test=8)
    (folder / "gym.toml").write_text(VISION_TOML, encoding="utf-8")
    # trained in this process (the UI under test only loads the result; `gym train` has tests of its own)
    from gym.config import load_config
    from gym.train.runner import run_training

    run_training(load_config(folder / "gym.toml"), show_progress=False)
    rows = [json.loads(line) for line in paths["test"].read_text().splitlines()]
    url, process = start_webui(folder, webui_env)
    yield url, folder, rows
    stop_process(process)


def test_an_uploaded_image_is_answered_by_the_vision_model(vision_project: tuple, page) -> None:
    from playwright.sync_api import expect

    url, folder, rows = vision_project
    page.goto(url)
    page.get_by_role("tab", name="Chat").click()
    page.get_by_label("Side by side with the base model").uncheck()  # the random base adds nothing here
    _zero_temperature(page)
    answers = {}
    for turn, row in enumerate(rows[:2]):  # held-out images: red, then green (the test split cycles colours)
        colour = row["messages"][-1]["content"]
        ask(page, QUESTION, [folder / "data" / row["images"][0]])
        # the box is emptied only when the whole turn has ended (the note's "done" may still be the last turn's)
        expect(page.locator("#chat-input textarea")).to_have_value("", timeout=120_000)
        expect(page.locator("#chat-input .thumbnail-item")).to_have_count(0)
        assert page.locator("#chat-note").inner_text().strip() == "done"
        expect(page.locator("#chat-tuned .message.bot")).to_have_count(turn + 1)
        answers[colour] = _last_reply(page, "chat-tuned")
    assert answers == {"red": "red", "green": "green"}, answers  # same text, different pixels, right colours
    assert page.locator("#chat-tuned img").count() == 2  # both uploads are shown in the conversation
    assert screenshot(page, "webui_chat_image.png").stat().st_size > 20_000
