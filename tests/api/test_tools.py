"""Tool calling end to end through the official `openai` client, for Qwen3's template (hermes
``<tool_call>`` blocks) and a Llama-3.1 JSON template.

The server is the production app and batching backend over builtin:tiny steered by a deterministic
logits processor (:class:`tests.api.tool_model.SteeredModel`) to write the tool calls the template
teaches: what a model fine-tuned on this data emits. (Fine-tuning builtin:tiny until it reproduces them
greedily took minutes on the test machine.)"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from gym.data.templates.registry import TEMPLATES
from tests.api.conftest import REPO, free_port, server_env, stop, wait_healthy
from tests.api.tool_model import LLAMA3_JSON_TEMPLATE, ONE, PLAIN, TOOLS, TWO

pytestmark = pytest.mark.slow
STYLES = {"qwen3": TEMPLATES["qwen3"].jinja, "llama3_json": LLAMA3_JSON_TEMPLATE}


@pytest.fixture(scope="module", params=sorted(STYLES))
def tool_client(request, tiny_dir: Path, cache_root: Path, tmp_path_factory) -> Iterator[openai.OpenAI]:
    template = tmp_path_factory.mktemp(request.param) / "template.jinja"
    template.write_text(STYLES[request.param], encoding="utf-8")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("steered_server.py")), str(tiny_dir), str(template), str(port)],
        cwd=REPO, env={**server_env(cache_root), "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    finally:
        stop(process)


def ask(client: openai.OpenAI, question: str, **kwargs):
    return client.chat.completions.create(
        model="tools",
        messages=[{"role": "user", "content": question}],
        temperature=0,
        max_tokens=200,
        **kwargs,
    )


def calls_of(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def streamed_calls(client: openai.OpenAI, question: str, **kwargs) -> tuple[str, list[tuple[str, dict]], str]:
    content, calls, finish = "", {}, None
    for chunk in ask(client, question, stream=True, **kwargs):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": call.id, "name": "", "arguments": ""})
                slot["name"] += call.function.name or ""
                slot["arguments"] += call.function.arguments or ""
                assert call.id is None or call.id.startswith("call_")
            finish = choice.finish_reason or finish
    return content, [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())], finish


def test_the_model_calls_a_tool(tool_client: openai.OpenAI) -> None:
    reply = ask(tool_client, ONE, tools=TOOLS)
    choice = reply.choices[0]
    assert calls_of(choice.message) == [("get_weather", {"city": "Paris"})], choice.message
    assert choice.finish_reason == "tool_calls"
    assert not (choice.message.content or "").replace("<think>\n\n</think>", "").strip()
    assert (
        choice.message.tool_calls[0].id.startswith("call_")
        and choice.message.tool_calls[0].type == "function"
    )
    content, calls, finish = streamed_calls(tool_client, ONE, tools=TOOLS)
    assert calls == calls_of(choice.message) and finish == "tool_calls"
    assert "<tool_call>" not in content and "{" not in content


def test_two_calls_in_one_answer(tool_client: openai.OpenAI) -> None:
    expected = [("get_weather", {"city": "Rome"}), ("get_weather", {"city": "Oslo"})]
    assert calls_of(ask(tool_client, TWO, tools=TOOLS).choices[0].message) == expected
    assert streamed_calls(tool_client, TWO, tools=TOOLS)[1] == expected
    single = ask(tool_client, TWO, tools=TOOLS, parallel_tool_calls=False).choices[0].message
    assert calls_of(single) == expected[:1]


def test_tool_choice(tool_client: openai.OpenAI) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    message = ask(tool_client, ONE, tools=TOOLS, tool_choice=named).choices[0].message
    assert [name for name, _ in calls_of(message)] == ["get_time"]
    assert [name for name, _ in streamed_calls(tool_client, ONE, tools=TOOLS, tool_choice=named)[1]] == [
        "get_time"
    ]
    required = ask(tool_client, PLAIN, tools=TOOLS, tool_choice="required").choices[0]
    assert required.message.tool_calls and required.finish_reason == "tool_calls"
    plain = ask(tool_client, PLAIN, tools=TOOLS, tool_choice="none").choices[0]
    assert plain.message.tool_calls is None and plain.finish_reason in ("stop", "length")
    assert ask(tool_client, PLAIN).choices[0].message.content.endswith("Hello!")  # no tools: plain text
    with pytest.raises(openai.BadRequestError) as caught:
        ask(tool_client, ONE, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
    assert caught.value.body["param"] == "tool_choice"


def test_a_tool_result_goes_back_to_the_model(tool_client: openai.OpenAI) -> None:
    first = ask(tool_client, ONE, tools=TOOLS).choices[0].message
    messages = [
        {"role": "user", "content": ONE},
        first.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": '{"temp_c": 18}'},
    ]
    if "content" not in messages[1]:
        messages[1]["content"] = None
    reply = tool_client.chat.completions.create(
        model="tools", messages=messages, tools=TOOLS, temperature=0, max_tokens=8
    )
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert reply.usage.prompt_tokens > ask(tool_client, ONE, tools=TOOLS).usage.prompt_tokens
