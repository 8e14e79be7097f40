"""examples/vision-quickstart through `gym launch`: builtin:tiny-vl goes from chance to >= +60 points of
exact match on held-out images (train -> gym_colour eval with baseline -> model card), in under 2 minutes;
then `gym serve` on the trained folder answers OpenAI image_url (data: URL) requests about the images."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from gym.data.builtin_vision import main as write_colours
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_vision_quickstart_learns_colours_through_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "vision-quickstart"
    shutil.copytree(
        REPO / "examples" / "vision-quickstart", folder, ignore=shutil.ignore_patterns("outputs", "data")
    )
    write_colours([str(folder / "data")])  # the README's first command
    start = time.perf_counter()
    result = CliRunner().invoke(app, ["launch", str(folder / "gym.toml"), "--project.output_dir=out"])
    seconds = time.perf_counter() - start
    assert result.exit_code == 0, result.output
    out = folder / "out"
    scores = json.loads((out / "eval_results.json").read_text())
    row = next(r for r in scores["results"] if r["task"] == "gym_colour")
    assert row["samples"] == 100 and row["base_value"] is not None
    assert row["delta"] >= 0.60, row  # chance is 25%; the random base answers no colour at all
    assert (out / "README.md").is_file() and "gym_colour" in (out / "README.md").read_text()
    assert (out / "processor_config.json").is_file()
    print(f"vision quickstart: {row['base_value']:.2f} -> {row['value']:.2f} in {seconds:.0f} s")
    assert seconds < 240  # < 2 min on an idle 2-core machine; headroom for a shared one
    _serve_and_ask(out, folder / "data", tmp_path / "cache")


def _data_url(path: Path) -> str:
    import base64

    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def _serve_and_ask(out: Path, data: Path, cache: Path) -> None:
    import openai

    from tests.api.conftest import server_env, start_server, stop

    rows = [json.loads(line) for line in (data / "test.jsonl").read_text().splitlines()][:8]
    url, process = start_server([str(out)], server_env(cache, GYM_CACHE_DIR=str(cache)))
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
        model = client.models.list().data[0].id
        right = 0
        for row in rows:
            reply = client.chat.completions.create(
                model=model,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": _data_url(data / row["images"][0])}},
                            {"type": "text", "text": "What colour is the shape?"},
                        ],
                    }
                ],
                max_tokens=4,
                temperature=0,
            )
            right += reply.choices[0].message.content.strip() == row["messages"][-1]["content"]
        assert right >= 6, f"{right} of {len(rows)} colours right through gym serve"
        for bad, words in (
            ("https://example.com/cat.png", "remote image URLs are not fetched"),
            ("data:image/png;base64,bm90IGFuIGltYWdl", "not a readable image"),
        ):
            with pytest.raises(openai.BadRequestError) as error:
                client.chat.completions.create(
                    model=model,
                    messages=[
                        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": bad}}]}
                    ],
                    max_tokens=2,
                )
            assert words in str(error.value) and "messages[0].content[0]" in str(error.value)
    finally:
        stop(process)
