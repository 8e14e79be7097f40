"""Hypothesis against a real `gym serve`: mutated request bodies and headers, sent raw and through the
official `openai` client, never get a 5xx; every refusal is OpenAI's error shape; /health stays OK;
streams running meanwhile all finish. Bounded (a few dozen examples each) to stay fast."""

from __future__ import annotations

import json
import threading

import httpx
import openai
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.api.conftest import API_KEY

pytestmark = pytest.mark.slow
MODEL = "builtin:tiny"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True
)

# every code point, lone surrogates included (JSON can spell them as \udXXX escapes), and the values
# that broke servers before: empty text, surrogates, NUL, numbers as strings, seeds just outside int64
any_text = st.one_of(
    st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=40),
    st.sampled_from(["", "\ud800", "a\udfffb", "\x00", "yes", "8", "\u202e", "<|im_end|>", "<tool_call>"]),
)
edge_ints = st.sampled_from([0, -1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1, 10**30])
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), edge_ints,
    st.floats(allow_nan=False, allow_infinity=False), any_text,
)  # fmt: skip
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)
CHAT_KEYS = ["model", "messages", "max_tokens", "temperature", "top_p", "n", "stream", "stop", "seed",
             "logprobs", "top_logprobs", "tools", "tool_choice", "response_format", "stream_options",
             "max_completion_tokens", "presence_penalty", "user", "frobnicate"]  # fmt: skip
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "tool", "developer", "robot"]),
         "content": st.one_of(any_text, json_values)},
    ),
    min_size=0, max_size=3,
)  # fmt: skip


def small_tokens(value):
    """Keep generation short: a fuzzed integer token budget is clamped (its type is kept)."""
    return min(value, 4) if isinstance(value, int) and not isinstance(value, bool) else value


@st.composite
def chat_bodies(draw) -> dict:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    if draw(st.booleans()):  # a valid body but for hostile text or an edge seed
        body["messages"] = [{"role": "user", "content": draw(any_text)}]
        body["seed"] = draw(edge_ints | st.none())
    for key in draw(st.lists(st.sampled_from(CHAT_KEYS), max_size=3, unique=True)):
        body[key] = draw(messages if key == "messages" else json_values)
    for key in ("max_tokens", "max_completion_tokens"):
        if key in body:
            body[key] = small_tokens(body[key])
    if not isinstance(body.get("max_tokens"), int) or isinstance(body.get("max_tokens"), bool):
        body.setdefault("max_completion_tokens", 3)
    if isinstance(body.get("n"), int):
        body["n"] = min(body["n"], 3)
    return body


def check_response(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text[:500]
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and isinstance(error["message"], str)
    elif response.headers.get("content-type", "").startswith("text/event-stream"):
        assert response.text.rstrip().endswith("data: [DONE]"), response.text[-300:]
    else:
        assert "choices" in response.json()


class BackgroundStreams:
    """Streams that run through the whole fuzz session; each must end with [DONE] and no error."""

    def __init__(self, server: str, count: int = 3) -> None:
        self.server, self.stop, self.results = server, threading.Event(), []
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(count)]

    def _loop(self, i: int) -> None:
        body = {"model": MODEL, "stream": True, "max_tokens": 32, "temperature": 0.8, "seed": i,
                "messages": [{"role": "user", "content": f"Reverse: {'abcdef'[: i + 2]}"}]}  # fmt: skip
        with httpx.Client(base_url=self.server, headers=AUTH, timeout=120) as client:
            while not self.stop.is_set():
                with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    text = "".join(response.iter_lines())
                self.results.append(
                    (response.status_code, text.endswith("data: [DONE]") and '"error"' not in text)
                )

    def __enter__(self) -> BackgroundStreams:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)


def test_fuzzed_requests_never_break_the_server(server: str) -> None:
    raw = httpx.Client(base_url=server, timeout=60)

    hi = [{"role": "user", "content": "hi"}]

    @FUZZ
    @given(body=chat_bodies(), route=st.sampled_from(["/v1/chat/completions", "/v1/completions"]))
    # the campaign's findings, always tried first
    @example(
        body={"model": MODEL, "messages": [{"role": "user", "content": "\ud800"}]},
        route="/v1/chat/completions",
    )
    @example(body={"model": MODEL, "messages": "", "max_tokens": 3}, route="/v1/completions")
    @example(
        body={"model": MODEL, "messages": hi, "max_tokens": 3, "seed": 2**64}, route="/v1/chat/completions"
    )
    @example(body={"model": MODEL, "messages": hi, "max_tokens": "8"}, route="/v1/chat/completions")
    def bodies(body: dict, route: str) -> None:
        if route == "/v1/completions":
            prompt = body.pop("messages", "x")
            body = {**body, "prompt": prompt}
        check_response(raw.post(route, content=json.dumps(body), headers=AUTH))

    @FUZZ
    @given(payload=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
    def raw_bytes(payload: bytes) -> None:
        check_response(raw.post("/v1/chat/completions", content=payload, headers=AUTH))

    # printable ASCII; no leading/trailing blanks, which HTTP itself (and so httpx) does not allow
    header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40).map(str.strip)

    @FUZZ
    @given(headers=st.dictionaries(
        st.sampled_from(["authorization", "content-type", "accept", "x-request-id", "accept-encoding",
                         "openai-organization", "user-agent"]),
        header_text, max_size=4))  # fmt: skip
    def headers(headers: dict) -> None:
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        response = raw.post("/v1/chat/completions", content=body, headers=headers)
        check_response(response)
        if headers.get("authorization") != f"Bearer {API_KEY}":
            assert response.status_code == 401

    with BackgroundStreams(server) as streams:
        bodies()
        raw_bytes()
        headers()
        assert raw.get("/health").json()["status"] == "ok"
    assert streams.results and all(status == 200 and ok for status, ok in streams.results), streams.results


def test_fuzzed_calls_through_the_openai_client(server: str) -> None:
    client = openai.OpenAI(base_url=server + "/v1", api_key=API_KEY, max_retries=0, timeout=60)

    @FUZZ
    @given(body=chat_bodies(), stream=st.booleans())
    def calls(body: dict, stream: bool) -> None:
        body.pop("stream", None)
        known = {k: body.pop(k) for k in ("model", "messages") if k in body}
        try:
            result = client.chat.completions.create(
                model=known.get("model", MODEL),
                messages=known.get("messages", []),
                stream=stream,
                extra_body=body,
            )
            if stream:
                for _ in result:
                    pass
        except UnicodeEncodeError:  # the client itself cannot send a lone surrogate (raw HTTP test does)
            return
        except openai.APIStatusError as error:
            assert error.status_code < 500, error
            assert isinstance(error.body, dict) and error.body.get("message"), error.body
        except openai.APIError as error:  # an error event inside a stream would land here
            raise AssertionError(f"stream failed: {error}") from None

    calls()
    assert httpx.get(server + "/health").json()["status"] == "ok"
