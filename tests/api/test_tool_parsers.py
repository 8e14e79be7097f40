"""Tool-call parsers read back exactly what the models' own chat templates write.

Each case renders an assistant turn with tool calls through a real template (Qwen3's and Qwen2.5's as
their tokenizers carry them, Gym's packaged qwen3/qwen2.5, and a Llama-3.1-style JSON template), cuts
out the assistant's text, and parses it: whole, and streamed in every split of the text.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gym.api.tools.parsers import (
    TOOL_PARSERS,
    HermesParser,
    Llama3JsonParser,
    get_tool_parser,
    parser_for_template,
)
from gym.api.tools.stream import ToolCallStream
from gym.data.templates.registry import TEMPLATES
from gym.data.templates.render import render_chat
from tests.api.tool_model import LLAMA3_JSON_TEMPLATE

CALLS = [
    {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
    {
        "name": "search",
        "arguments": {"query": "tour Eiffel — hauteur", "top_k": 3, "filters": {"lang": ["fr"]}},
    },
]
TOOLS = [
    {
        "type": "function",
        "function": {"name": c["name"], "description": "d", "parameters": {"type": "object"}},
    }
    for c in CALLS
]


class _Tok:
    special_tokens_map = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}


def _assistant_text(template: str, calls: list[dict], content: str = "") -> str:
    """What the model writes for one assistant turn: the rendering with the turn minus the one without."""
    user = [{"role": "user", "content": "Weather in Paris, and how tall is the Eiffel tower?"}]
    turn = {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"type": "function", "function": c} for c in calls],
    }
    prompt = render_chat(_Tok(), user, template, tools=TOOLS, add_generation_prompt=True)
    full = render_chat(_Tok(), [*user, turn], template, tools=TOOLS)
    assert full.startswith(prompt), "the template does not render the prompt as a prefix of the turn"
    text = full[len(prompt) :]
    for end in ("<|im_end|>\n", "<|eot_id|>"):
        text = text.removesuffix(end)
    return text


def _templates(fixtures_dir: Path) -> dict[str, tuple[str, str]]:
    read = lambda name: (fixtures_dir / "chat_templates" / name).read_text(encoding="utf-8")  # noqa: E731
    return {
        "qwen3 (model's own)": (read("qwen3.jinja"), "hermes"),
        "qwen2.5 (model's own)": (read("qwen2.5-instruct.jinja"), "hermes"),
        "qwen3 (gym)": (TEMPLATES["qwen3"].jinja, "hermes"),
        "qwen2.5 (gym)": (TEMPLATES["qwen2.5"].jinja, "hermes"),
        "llama3.1 json": (LLAMA3_JSON_TEMPLATE, "llama3_json"),
    }


def _expected(calls: list[dict]) -> list[tuple[str, dict]]:
    return [(c["name"], c["arguments"]) for c in calls]


def _got(parsed_calls) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in parsed_calls]


def _stream(parser, text: str, cuts: list[int], markers_never_shown: bool = True) -> tuple[str, list]:
    stream, content, calls, last = ToolCallStream(parser), "", [], 0
    for cut in [*cuts, len(text)]:
        piece, last = text[last:cut], cut
        got_content, got_calls = stream.feed(piece, final=cut == len(text))
        content += got_content
        calls += got_calls
        if markers_never_shown:
            assert "<tool_" not in content and "<|python" not in content, content
    return content, calls


@pytest.mark.parametrize("calls", [CALLS[:1], CALLS], ids=["one call", "two calls"])
def test_rendered_tool_calls_parse_back(fixtures_dir: Path, calls: list[dict]) -> None:
    rng = random.Random(0)
    for label, (template, parser_name) in _templates(fixtures_dir).items():
        assert parser_for_template(template) == parser_name, label
        parser = get_tool_parser(parser_name)
        text = _assistant_text(template, calls)
        parsed = parser.parse(text)
        assert _got(parsed.calls) == _expected(calls), (label, text)
        # Qwen3 writes an (empty) thinking block before the calls; it stays in the content as without tools
        assert (parsed.content or "").replace("<think>\n\n</think>", "").strip() == "", (
            label,
            parsed.content,
        )
        for cuts in ([], list(range(1, len(text))), sorted(rng.sample(range(1, len(text)), 5))):
            content, streamed = _stream(parser, text, cuts)
            assert _got(streamed) == _expected(calls), (label, cuts)
            assert content.replace("<think>\n\n</think>", "").strip() == "", (label, content)


def test_content_before_a_call_is_kept(fixtures_dir: Path) -> None:
    template = (fixtures_dir / "chat_templates" / "qwen2.5-instruct.jinja").read_text(encoding="utf-8")
    text = _assistant_text(template, CALLS[:1], content="Let me look that up.")
    parsed = HermesParser().parse(text)
    assert parsed.content.strip() == "Let me look that up." and _got(parsed.calls) == _expected(CALLS[:1])
    content, calls = _stream(HermesParser(), text, list(range(1, len(text))))
    assert content.strip() == "Let me look that up." and _got(calls) == _expected(CALLS[:1])


def test_text_that_is_not_a_call_stays_content() -> None:
    hermes, llama = HermesParser(), Llama3JsonParser()
    for parser, text in [
        (hermes, "The answer is 4."),
        (hermes, "<tool_call>\nnot json\n</tool_call>"),  # an unreadable call is shown, not dropped
        (hermes, "I would use <tool_ but no."),
        (llama, '{"answer": 4}'),  # a JSON answer that names no function
        (llama, '{"name": "f", "parameters": {"a": 1}} and some words'),
        (llama, "Paris is in France."),
    ]:
        assert parser.parse(text).calls == [] and parser.parse(text).content == text, text
        content, calls = _stream(parser, text, list(range(1, len(text))), markers_never_shown=False)
        assert calls == [] and content == text, text


def test_forced_prefix_continues_into_a_call() -> None:
    for parser in (HermesParser(), Llama3JsonParser()):
        prefix = parser.forced_prefix("get_weather")
        rest = '{"city": "Paris"}}' + ("\n</tool_call>" if parser.name == "hermes" else "")
        assert _got(parser.parse(prefix + rest).calls) == [("get_weather", {"city": "Paris"})]
        stream = ToolCallStream(parser, prefix)
        content, calls = stream.feed(rest[:5])
        assert content == "" and calls == []
        content, calls = stream.feed(rest[5:], final=True)
        assert content == "" and _got(calls) == [("get_weather", {"city": "Paris"})]


def test_registry_and_detection(fixtures_dir: Path) -> None:
    assert {"hermes", "llama3_json"} <= set(TOOL_PARSERS)
    no_tools = (fixtures_dir / "chat_templates" / "llama-3-instruct.jinja").read_text(encoding="utf-8")
    assert parser_for_template(no_tools) is None
    assert parser_for_template(TEMPLATES["chatml"].jinja) is None
    with pytest.raises(ValueError, match="unknown tool parser 'nope'; available: hermes, llama3_json"):
        get_tool_parser("nope")
