"""The official `openai` client against a real `gym serve builtin:tiny` on a loopback port."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.api.conftest import API_KEY

pytestmark = pytest.mark.slow
MODEL = "builtin:tiny"


@pytest.fixture(scope="module")
def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


def test_models_and_health(client: openai.OpenAI, server: str) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    health = httpx.get(server + "/health").json()
    assert health["status"] == "ok" and health["backend"] == "transformers"


def test_chat_streamed_matches_unstreamed(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Reverse: a b c"}]
    full = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0)
    assert full.object == "chat.completion"
    assert full.choices[0].message.role == "assistant"
    assert full.choices[0].finish_reason in ("stop", "length")
    assert full.usage.completion_tokens <= 12 and full.usage.prompt_tokens > 0
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces) == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == full.usage.completion_tokens


def test_sampling_parameters(client: openai.OpenAI) -> None:
    kwargs = dict(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=10, temperature=0.9, top_p=0.9
    )
    a = client.chat.completions.create(n=3, seed=7, **kwargs)
    b = client.chat.completions.create(n=3, seed=7, **kwargs)
    assert len(a.choices) == 3 and [c.index for c in a.choices] == [0, 1, 2]
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    text = (
        client.completions.create(model=MODEL, prompt="The quick brown", max_tokens=20, temperature=0)
        .choices[0]
        .text
    )
    if len(text) > 3:  # a stop string taken from the greedy output cuts the answer right before it
        cut = client.completions.create(
            model=MODEL, prompt="The quick brown", max_tokens=20, temperature=0, stop=[text[2:4]]
        )
        assert cut.choices[0].text == text[: text.find(text[2:4])]
        assert cut.choices[0].finish_reason == "stop"


def test_completions_streamed(client: openai.OpenAI) -> None:
    full = client.completions.create(model=MODEL, prompt="Gym fine-tunes", max_tokens=8, temperature=0)
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=MODEL, prompt="Gym fine-tunes", max_tokens=8, temperature=0, stream=True
        )
        if c.choices
    )
    assert streamed == full.choices[0].text and full.object == "text_completion"


def _assert_openai_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code:
        assert error["code"] == code


def test_errors(client: openai.OpenAI, server: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    _assert_openai_error(httpx.post(server + "/v1/chat/completions", json=body), 401, "invalid_api_key")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server + "/v1", api_key="wrong", max_retries=0).models.list()
    headers = {"Authorization": f"Bearer {API_KEY}"}
    _assert_openai_error(
        httpx.post(server + "/v1/chat/completions", json={**body, "model": "nope"}, headers=headers),
        404,
        "model_not_found",
    )
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=body["messages"], max_tokens=4)
    long_prompt = "a b c d e f g " * 2000
    response = httpx.post(
        server + "/v1/completions",
        json={"model": MODEL, "prompt": long_prompt, "max_tokens": 4},
        headers=headers,
    )
    _assert_openai_error(response, 400, "context_length_exceeded")
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": long_prompt}], max_tokens=4
        )
    for bad in ({"temperature": 5}, {"top_p": 0}, {"n": 0}, {"max_tokens": -1}, {"stop": ["a"] * 5}):
        response = httpx.post(server + "/v1/chat/completions", json={**body, **bad}, headers=headers)
        _assert_openai_error(response, 400)
        assert response.json()["error"]["param"] == next(iter(bad))
    assert API_KEY not in response.text


def test_chat_logprobs_streamed_and_not(client: openai.OpenAI) -> None:
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "Reverse: a b c"}], max_tokens=8,
                  temperature=0, logprobs=True, top_logprobs=3)  # fmt: skip
    full = client.chat.completions.create(**kwargs)
    entries = full.choices[0].logprobs.content
    assert "".join(e.token for e in entries) == full.choices[0].message.content
    assert len(entries) == full.usage.completion_tokens
    for e in entries:
        assert len(e.top_logprobs) == 3 and e.logprob <= 0
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == pytest.approx(e.logprob)
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob
        assert bytes(e.bytes) == e.token.encode()
    streamed = [
        e for chunk in client.chat.completions.create(stream=True, **kwargs) for c in chunk.choices
        if c.logprobs for e in c.logprobs.content
    ]  # fmt: skip
    assert [(e.token, round(e.logprob, 5)) for e in streamed] == [
        (e.token, round(e.logprob, 5)) for e in entries
    ]
    plain = client.chat.completions.create(**{**kwargs, "logprobs": False, "top_logprobs": None})
    assert plain.choices[0].logprobs is None


def test_completion_logprobs_match_the_model(client: openai.OpenAI, tiny_dir) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompt = "The quick brown"
    full = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=6, temperature=0.8, seed=5, logprobs=2
    )
    lp = full.choices[0].logprobs
    assert "".join(lp.tokens) == full.choices[0].text and len(lp.tokens) == full.usage.completion_tokens
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    assert all(len(top) <= 2 for top in lp.top_logprobs)
    # the reported numbers are the model's own log-probabilities of the sampled tokens
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    generated = tokenizer.encode(full.choices[0].text, add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([ids + generated])).logits[0, len(ids) - 1 : -1]
    expected = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(generated)[:, None])[:, 0]
    assert lp.token_logprobs == pytest.approx(expected.tolist(), abs=1e-3)
    streamed = [
        c.logprobs for chunk in client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=6, temperature=0.8, seed=5, logprobs=2, stream=True)
        for c in chunk.choices if c.logprobs
    ]  # fmt: skip
    assert sum((s.tokens for s in streamed), []) == lp.tokens
    assert sum((s.text_offset for s in streamed), []) == lp.text_offset
