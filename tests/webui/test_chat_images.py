"""Images in `gym webui`'s Chat tab, in headless Chromium.

A vision-language project (builtin:tiny-vl trained by `gym train` on the built-in colour task, ~10 s):
an uploaded held-out image is answered with its colour, and a second image of another colour gets
the other colour: the reply can only come from the pixels (the typed text is the same). A text-only
project (builtin:tiny): an attached image is refused with one sentence, and the typed text and the
image stay in the box; an unreadable file is named.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import screenshot
from tests.webui.conftest import start_webui, stop_process

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
TEXT_TOML = """\
[project]
name = "webui-text"
output_dir = "outputs/run"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"
"""


def _ask(page, text: str, images: list[Path]) -> None:
    """Type ``text``, attach ``images`` with the box's upload button, press Send."""
    page.locator("#chat-input textarea").fill(text)
    if images:
        page.locator("#chat-input input[type=file]").set_input_files([str(p) for p in images])
        page.locator("#chat-input .thumbnail-item").nth(len(images) - 1).wait_for()
    page.locator("#chat-send").click()


def _last_reply(page, chatbot: str) -> str:
    return page.locator(f"#{chatbot} .message.bot").last.inner_text().strip()


def _zero_temperature(page) -> None:
    number = page.get_by_label("number input for temperature")
    number.fill("0")
    number.press("Enter")


@pytest.fixture(scope="module")
def vision_project(tmp_path_factory: pytest.TempPathFactory, webui_env: dict[str, str]) -> Iterator[tuple]:
    """`gym webui` over a colour project whose builtin:tiny-vl was trained by `gym train`; (url, folder, test rows)."""
    from gym.data.builtin_vision import write_colour_dataset
    from gym.model.builtin import ensure_builtin

    ensure_builtin("builtin:tiny-vl", root=Path(webui_env["XDG_CACHE_HOME"]) / "gym" / "builtin")
    folder = tmp_path_factory.mktemp("vision")
    paths = write_colour_dataset(folder / "data", n_train=800, n_test=8)
    (folder / "gym.toml").write_text(VISION_TOML, encoding="utf-8")
    trained = subprocess.run([sys.executable, "-m", "gym", "train", "gym.toml"], cwd=folder, env=webui_env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert trained.returncode == 0, trained.stdout + trained.stderr
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
        _ask(page, QUESTION, [folder / "data" / row["images"][0]])
        # the box is emptied only when the whole turn has ended (the note's "done" may still be the last turn's)
        expect(page.locator("#chat-input textarea")).to_have_value("", timeout=120_000)
        expect(page.locator("#chat-input .thumbnail-item")).to_have_count(0)
        assert page.locator("#chat-note").inner_text().strip() == "done"
        expect(page.locator("#chat-tuned .message.bot")).to_have_count(turn + 1)
        answers[colour] = _last_reply(page, "chat-tuned")
    assert answers == {"red": "red", "green": "green"}, answers  # same text, different pixels, right colours
    assert page.locator("#chat-tuned img").count() == 2  # both uploads are shown in the conversation
    assert screenshot(page, "webui_chat_image.png").stat().st_size > 20_000


@pytest.fixture
def text_project(tmp_path: Path, webui_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """`gym webui` over a builtin:tiny project whose output_dir holds a (text-only) model."""
    from gym.model.builtin import ensure_builtin

    model = ensure_builtin("builtin:tiny", root=Path(webui_env["XDG_CACHE_HOME"]) / "gym" / "builtin")
    shutil.copytree(model, tmp_path / "outputs" / "run")
    (tmp_path / "gym.toml").write_text(TEXT_TOML, encoding="utf-8")
    url, process = start_webui(tmp_path, webui_env)
    yield url, tmp_path
    stop_process(process)


def test_an_image_for_a_text_only_model_is_refused_and_nothing_is_lost(
    text_project: tuple[str, Path], tmp_path: Path, page
) -> None:
    from PIL import Image

    url, folder = text_project
    image = tmp_path / "red.png"
    Image.new("RGB", (40, 40), (220, 30, 30)).save(image)
    broken = tmp_path / "broken.png"
    broken.write_text("not a picture")
    page.goto(url)
    page.get_by_role("tab", name="Chat").click()

    _ask(page, "Reverse: a b", [broken])
    note = page.locator("#chat-note")
    note.get_by_text("broken.png is not an image this chat can read").wait_for()
    assert page.locator("#chat-input textarea").input_value() == "Reverse: a b"
    page.locator("#chat-input .thumbnail-item button").first.click()  # remove it; attach a real image
    page.locator("#chat-input .thumbnail-item").first.wait_for(state="detached")

    _ask(page, "Reverse: a b", [image])
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
