"""Hostile requests against a real `gym serve --access-log`: the access log never shows a credential sent in
the query string; an integer too long for Python is a 400 naming the field on a connection that stays
usable; a 4 MB body of 100k messages is refused for the price of a JSON decode, beside a stream that
loses nothing."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from gym.api.intake import MAX_INT_DIGITS, MAX_MESSAGES
from tests.api.conftest import API_KEY, server_env, start_server, stop

pytestmark = pytest.mark.slow
MODEL = "builtin:tiny"
HEADERS = {"Authorization": f"Bearer {API_KEY}"}
HELLO = {"model": MODEL, "messages": [{"role": "user", "content": "Reverse: a b"}], "max_tokens": 8,
         "temperature": 0}  # fmt: skip


@pytest.fixture(scope="module")
def logged_server(tiny_dir: Path, cache_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    log = tmp_path_factory.mktemp("serve-log") / "serve.log"
    url, process = start_server([MODEL, "--access-log"], server_env(cache_root, GYM_API_KEY=API_KEY), log)
    yield url, log
    stop(process)


def _client_port(response: httpx.Response) -> int:
    return response.extensions["network_stream"].get_extra_info("client_addr")[1]


def test_access_log_masks_credentials_in_query_strings(logged_server) -> None:
    url, log = logged_server
    leaks = [f"sk-leak-{secrets.token_hex(8)}" for _ in range(3)]
    assert (
        httpx.get(f"{url}/v1/models?api_key={leaks[0]}", timeout=30).status_code == 401
    )  # keys go in a header
    assert httpx.get(f"{url}/health?verbose=1&token={leaks[1]}", timeout=30).status_code == 200
    answer = httpx.get(f"{url}/v1/models?limit=2;hf_token={leaks[2]}", headers=HEADERS, timeout=30)
    assert answer.status_code == 200
    deadline = time.monotonic() + 30
    while log.read_text().count("GET /") < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    text = log.read_text()
    assert not any(leak in text for leak in leaks), text
    for line in ('"GET /v1/models?api_key=*** HTTP/1.1" 401', '"GET /health?verbose=1&token=*** HTTP/1.1" 200',
                 '"GET /v1/models?limit=2;hf_token=*** HTTP/1.1" 200'):  # fmt: skip
        assert line in text, text


def test_an_integer_too_long_to_convert_is_a_400_naming_the_field(logged_server) -> None:
    url, log = logged_server
    huge = "9" * 5000
    with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client:
        first = client.get("/v1/models")
        for path, body in (
            ("/v1/chat/completions", json.dumps(HELLO)[:-1] + f', "max_tokens": {huge}}}'),
            ("/v1/completions", f'{{"model": "{MODEL}", "prompt": "a", "seed": -{huge}}}'),
            ("/v1/chat/completions", json.dumps(HELLO)[:-1] + f', "metadata": {{"run": {huge}}}}}'),
        ):
            response = client.post(path, content=body, headers={"Content-Type": "application/json"})
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            param = error["param"]
            assert param in ("max_tokens", "seed", "metadata.run")
            assert (
                error["message"]
                == f"{param}: an integer of 5,000 digits; at most {MAX_INT_DIGITS:,} are accepted."
            )
            assert _client_port(response) == _client_port(first)  # the same keep-alive connection
        after = client.post("/v1/chat/completions", json=HELLO)
        assert after.status_code == 200 and after.json()["choices"][0]["message"]["content"] is not None
        assert _client_port(after) == _client_port(first)
    assert "Traceback" not in log.read_text()


def test_a_body_of_100k_messages_is_refused_cheaply_beside_a_stream(logged_server) -> None:
    url, _log = logged_server
    many = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}] * 100_000}).encode()
    one = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * (len(many) - 60)}]})
    assert 3_000_000 < len(many) <= 4 * 1024 * 1024 and abs(len(one) - len(many)) < 100

    def post(body: bytes | str) -> tuple[float, httpx.Response]:
        start = time.monotonic()
        response = httpx.post(url + "/v1/chat/completions", content=body, timeout=120,
                              headers={**HEADERS, "Content-Type": "application/json"})  # fmt: skip
        return time.monotonic() - start, response

    def stream() -> str:
        text = ""
        with httpx.stream("POST", url + "/v1/chat/completions", json={**HELLO, "max_tokens": 32, "stream": True},
                          headers=HEADERS, timeout=120) as response:  # fmt: skip
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    text += json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        return text

    reference = stream()
    with ThreadPoolExecutor(4) as pool:
        streamed = pool.submit(stream)
        refusals = [pool.submit(post, many) for _ in range(3)]
        assert streamed.result(timeout=120) == reference  # the stream beside them lost nothing
        results = [r.result(timeout=120) for r in refusals]
    for _seconds, response in results:
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "messages"
        assert response.json()["error"]["message"] == (
            f"messages: 100,000 messages; this server accepts at most {MAX_MESSAGES:,} per request."
        )
    # the refusal costs what reading and decoding the same number of bytes costs, not 100k validations
    floor, answer = min((post(one) for _ in range(2)), key=lambda result: result[0])
    assert answer.json()["error"]["code"] == "context_length_exceeded"
    cost = min(post(many)[0] for _ in range(2))
    assert cost < 3 * floor + 0.5, (cost, floor)
