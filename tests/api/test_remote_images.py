"""`gym serve --fetch-remote-images`: a vision-language model's server downloads http(s) image_url parts
itself, and the fetched image is the one the model sees (its logprobs equal those of the same image sent
as a data: URL, and differ for another image). Fetch failures are one 400 sentence naming the part, never
the URL; without the flag remote URLs are refused (tests/launch/test_vision_quickstart.py). The site is on
127.0.0.1, so the server lists it in --allow-image-hosts (tests/api/test_image_fetch_limits.py)."""

from __future__ import annotations

import base64
import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gym.data.builtin_vision import write_colour_dataset
from tests.api.conftest import server_env, start_server, stop

pytestmark = pytest.mark.slow


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # the test's output stays readable
        return None


def _ask(client, model: str, url: str):
    return client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "What colour is the shape?"},
        ]}],
        max_tokens=3, temperature=0, logprobs=True, top_logprobs=3,
    )  # fmt: skip


def _logprobs(reply) -> list[list[tuple[str, float]]]:
    return [
        [(t.token, round(t.logprob, 4)) for t in item.top_logprobs]
        for item in reply.choices[0].logprobs.content
    ]


def test_remote_images_are_fetched_only_when_allowed_and_reach_the_model(
    tmp_path: Path, cache_root: Path
) -> None:
    import openai

    write_colour_dataset(tmp_path / "site", n_train=4, n_test=0)
    pictures = sorted((tmp_path / "site").rglob("*.png"))
    first, other = pictures[0], next(p for p in pictures[1:] if p.read_bytes() != pictures[0].read_bytes())
    (tmp_path / "site" / "notes.txt").write_text("not an image")
    site = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(tmp_path / "site")))
    threading.Thread(target=site.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{site.server_address[1]}"
    url, process = start_server(
        ["builtin:tiny-vl", "--fetch-remote-images", "--allow-image-hosts", "127.0.0.1"],
        server_env(cache_root),
    )
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
        model = client.models.list().data[0].id
        relative = first.relative_to(tmp_path / "site").as_posix()
        fetched = _ask(client, model, f"{base}/{relative}")
        inline = _ask(client, model, "data:image/png;base64," + base64.b64encode(first.read_bytes()).decode())
        different = _ask(client, model, f"{base}/{other.relative_to(tmp_path / 'site').as_posix()}")
        assert _logprobs(fetched) == _logprobs(inline), "the fetched image is not the one sent inline"
        assert _logprobs(fetched) != _logprobs(different), "the image never reached the model"
        for path, words in (
            ("missing.png?token=s3cret", "failed with HTTP 404"),
            ("notes.txt", "not a readable image"),
        ):
            with pytest.raises(openai.BadRequestError) as error:
                _ask(client, model, f"{base}/{path}")
            assert words in str(error.value) and "messages[0].content[0]" in str(error.value)
            assert "s3cret" not in str(error.value) and base not in str(error.value)
        closed = f"http://127.0.0.1:{site.server_address[1]}"
        site.shutdown()
        site.server_close()
        with pytest.raises(openai.BadRequestError) as error:
            _ask(client, model, f"{closed}/{relative}")
        assert "could not be fetched" in str(error.value)
        assert client.models.list().data[0].id == model  # the server is still up
    finally:
        stop(process)
        site.server_close()
