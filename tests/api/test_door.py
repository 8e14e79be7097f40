"""Bad requests are refused at the door (400/413 in OpenAI's shape, naming the field) and never disturb
the requests in flight; a long prompt is tokenized off the event loop. Against a real `gym serve`."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

from tests.api.conftest import API_KEY

pytestmark = pytest.mark.slow
MODEL = "builtin:tiny"
HEADERS = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def assert_error(
    response: httpx.Response, status: int, param: str | None = None, code: str | None = None
) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"], error
    if param is not None:
        assert error["param"] == param, error
        assert param.split("[")[0].split(".")[0] in error["message"], error
    if code is not None:
        assert error["code"] == code, error
    return error


def post(server: str, path: str, body: dict | bytes | str) -> httpx.Response:
    content = body if isinstance(body, bytes | str) else json.dumps(body)
    return httpx.post(server + path, content=content, headers=HEADERS, timeout=60)


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"stream": "yes"}, "stream"),
        ({"max_tokens": "8"}, "max_tokens"),
        ({"max_tokens": 8.0}, "max_tokens"),
        ({"temperature": "0.5"}, "temperature"),
        ({"n": True}, "n"),
        ({"seed": 2**64}, "seed"),
        ({"seed": -(2**63) - 1}, "seed"),
        ({"messages": "hi"}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
        ({"stream_options": {"include_usage": "yes"}, "stream": True}, "stream_options.include_usage"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
            "response_format",
        ),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"logit_bias": {"50": 10}}, "logit_bias"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"tool_choice": "required"}, "tool_choice"),
    ],
)
def test_chat_fields_are_checked_strictly(server: str, change: dict, param: str) -> None:
    assert_error(post(server, "/v1/chat/completions", {**CHAT, **change}), 400, param)


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"prompt": ""}, "prompt"),
        ({"prompt": [""]}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": [1, 2]}, "prompt"),
        ({"logprobs": 6}, "logprobs"),
        ({"echo": True}, "echo"),
        ({"suffix": "x"}, "suffix"),
        ({"seed": 2**63}, "seed"),
    ],
)
def test_completion_fields_are_checked_strictly(server: str, change: dict, param: str) -> None:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 4, **change}
    assert_error(post(server, "/v1/completions", body), 400, param)


def test_neutral_values_and_extreme_seeds_are_accepted(server: str) -> None:
    body = {**CHAT, "seed": 2**63 - 1, "n": 3, "temperature": 0.8, "presence_penalty": 0,
            "response_format": {"type": "text"}, "user": "u1", "metadata": {"k": "v"}}  # fmt: skip
    ok = post(server, "/v1/chat/completions", body)
    assert ok.status_code == 200, ok.text
    assert len(ok.json()["choices"]) == 3
    low = post(server, "/v1/completions", {"model": MODEL, "prompt": "a", "max_tokens": 2, "seed": -(2**63)})
    assert low.status_code == 200, low.text


def test_lone_surrogates_are_a_400_naming_the_field(server: str) -> None:
    raw = json.dumps({**CHAT, "messages": [{"role": "user", "content": "a@b"}]}).replace("@", "\\ud800")
    assert_error(post(server, "/v1/chat/completions", raw), 400, "messages[0].content")
    raw = json.dumps({"model": MODEL, "max_tokens": 4, "prompt": "@"}).replace("@", "\\udfff")
    assert_error(post(server, "/v1/completions", raw), 400, "prompt")
    for bad in (b"{not json", b"[1, 2]", b"\xff\xfe", b"", b"[" * 100_000):
        assert_error(post(server, "/v1/chat/completions", bad), 400)


def test_media_parts_for_a_text_only_model(server: str) -> None:
    client = openai.OpenAI(base_url=server + "/v1", api_key=API_KEY, max_retries=0)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL, max_tokens=4,
            messages=[{"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]}],
        )  # fmt: skip
    assert caught.value.body["param"] == "messages[0].content[1]"
    assert "text only" in caught.value.body["message"]
    parts = [{"type": "text", "text": "hello "}, {"type": "text", "text": "there"}]
    ok = client.chat.completions.create(
        model=MODEL, max_tokens=2, messages=[{"role": "user", "content": parts}]
    )
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_oversized_body_is_a_413_and_the_server_stays_well(server: str) -> None:
    big = json.dumps({**CHAT, "messages": [{"role": "user", "content": "a " * (5 * 1024 * 1024)}]})
    started = time.monotonic()
    assert_error(post(server, "/v1/chat/completions", big), 413, code="request_too_large")
    assert time.monotonic() - started < 10
    client = openai.OpenAI(base_url=server + "/v1", api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.completions.create(model=MODEL, prompt="x" * (10 * 1024 * 1024), max_tokens=2)
    assert caught.value.status_code == 413
    assert httpx.get(server + "/health", timeout=5).json()["status"] == "ok"


def test_a_long_prompt_never_stalls_the_server(server: str) -> None:
    """A ~3.5 MB message (under the size limit, far over the context): /health and a short chat keep
    answering meanwhile, and the long one gets its 400 at once. (Its length in characters already proves
    it cannot fit, so it is not even tokenized; a prompt that must be tokenized is, off the event loop.)"""
    text = " ".join(f"w{i % 9973}" for i in range(600_000))

    async def scenario() -> tuple[httpx.Response, float, list[float], int]:
        async with httpx.AsyncClient(base_url=server, headers=HEADERS, timeout=120) as client:
            started = time.monotonic()
            long = asyncio.create_task(
                client.post(
                    "/v1/chat/completions", json={**CHAT, "messages": [{"role": "user", "content": text}]}
                )
            )
            latencies = []
            while not long.done():
                probe = time.monotonic()
                assert (await client.get("/health")).status_code == 200
                latencies.append(time.monotonic() - probe)
                await asyncio.sleep(0.05)
            took = time.monotonic() - started
            short = await client.post("/v1/chat/completions", json=CHAT)
            return await long, took, latencies, short.status_code

    long, took, latencies, short = asyncio.run(scenario())
    error = assert_error(long, 400, "messages", "context_length_exceeded")
    assert "at least" in error["message"] and took < 5, (took, error)
    assert short == 200
    assert max(latencies, default=0) < 1.5, latencies


def test_bad_requests_never_abort_streams_in_flight(server: str) -> None:
    """Eight streams run while a burst of hostile requests arrives: every stream ends with [DONE]."""
    bad_bodies = [
        {"model": MODEL, "prompt": "", "max_tokens": 4},
        {"model": MODEL, "prompt": "x", "max_tokens": 4, "seed": 2**64},
        {"model": MODEL, "prompt": "x", "max_tokens": 4, "seed": -(2**63) - 1},
        json.dumps({"model": MODEL, "prompt": "@", "max_tokens": 4}).replace("@", "\\ud800"),
        {"model": MODEL, "prompt": "x", "max_tokens": "8"},
    ]

    async def stream(client: httpx.AsyncClient, i: int) -> str:
        body = {**CHAT, "max_tokens": 48, "temperature": 0.9, "seed": i, "stream": True,
                "messages": [{"role": "user", "content": f"Reverse: {'abcdefgh'[: 1 + i]}"}]}  # fmt: skip
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            return "".join([line async for line in response.aiter_lines()])

    async def hostile(client: httpx.AsyncClient) -> list[int]:
        await asyncio.sleep(0.05)
        codes = []
        for _ in range(4):
            for body in bad_bodies:
                content = body if isinstance(body, str) else json.dumps(body)
                codes.append((await client.post("/v1/completions", content=content)).status_code)
        return codes

    async def scenario():
        async with httpx.AsyncClient(base_url=server, headers=HEADERS, timeout=120) as client:
            return await asyncio.gather(hostile(client), *(stream(client, i) for i in range(8)))

    codes, *streams = asyncio.run(scenario())
    assert set(codes) == {400}, codes
    for text in streams:
        assert text.endswith("data: [DONE]") and '"error"' not in text, text[-300:]


def test_tools_for_a_template_without_a_tool_format(server: str) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    error = assert_error(post(server, "/v1/chat/completions", {**CHAT, "tools": tools}), 400, "tools")
    assert "no tool format" in error["message"]
    ok = post(server, "/v1/chat/completions", {**CHAT, "tools": tools, "tool_choice": "none"})
    assert ok.status_code == 200, ok.text
