"""Tool-call output formats: a plain dict of parsers, filled by :func:`register_tool_parser`.

A parser knows one way models write calls (the way their chat template teaches in its tools
preamble) and answers three questions:

* ``parse(text)``: the finished output as content plus calls;
* ``hold_from(text)``: where in a partial output a call starts or might start, so a stream never shows
  the user half of a ``<tool_call>`` marker as content;
* ``complete_calls(text)``: the calls already closed in a partial output, so a stream can send each
  as soon as it is whole;

and ``forced_prefix(name)``: the text that commits the model to a call when ``tool_choice`` requires
one (written after the generation prompt; the model continues from inside the call).

The format follows the chat template, so the parser is chosen from the template text
(:func:`parser_for_template`) unless ``gym serve --tool-parser`` names one.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text of an object, as OpenAI sends it
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def as_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class Parsed:
    content: str | None
    calls: list[ParsedCall]


class ToolParser(Protocol):
    name: str

    def parse(self, text: str) -> Parsed: ...

    def hold_from(self, text: str) -> int: ...

    def complete_calls(self, text: str) -> list[ParsedCall]: ...

    def forced_prefix(self, function: str | None) -> str: ...


@dataclass(frozen=True)
class ParserSpec:
    factory: Callable[[], ToolParser]
    detect: Callable[[str], bool]


TOOL_PARSERS: dict[str, ParserSpec] = {}


def register_tool_parser(name: str, factory: Callable[[], ToolParser], detect: Callable[[str], bool]) -> None:
    """Make ``--tool-parser NAME`` available; ``detect(template)`` says whether a template writes this format."""
    TOOL_PARSERS[name] = ParserSpec(factory, detect)


def get_tool_parser(name: str) -> ToolParser:
    if name not in TOOL_PARSERS:
        raise ValueError(f"unknown tool parser {name!r}; available: {', '.join(sorted(TOOL_PARSERS))}")
    return TOOL_PARSERS[name].factory()


def parser_for_template(template: str | None) -> str | None:
    """The parser whose format ``template`` teaches in its tools preamble, or None."""
    if not template or "tools" not in template:
        return None
    for name, spec in TOOL_PARSERS.items():
        if spec.detect(template):
            return name
    return None


def _call(name: Any, arguments: Any) -> ParsedCall | None:
    if not isinstance(name, str) or not name:
        return None
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(name, json.dumps(arguments, ensure_ascii=False))


def _partial_marker_at_end(text: str, marker: str) -> int:
    """Index where a prefix of ``marker`` ends ``text`` (len(text) if none)."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return len(text) - k
    return len(text)


class HermesParser:
    """``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks (Qwen2.5, Qwen3, Hermes)."""

    name = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def _block(self, body: str) -> ParsedCall | None:
        try:
            data = json.loads(body.strip())
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        return _call(data.get("name"), data.get("arguments", data.get("parameters")))

    def parse(self, text: str) -> Parsed:
        calls: list[ParsedCall] = []
        content, last = [], 0
        for match in self.BLOCK.finditer(text):
            call = self._block(match.group(1))
            if call is None:
                continue  # an unreadable block stays in the content, where the user can see it
            calls.append(call)
            content.append(text[last : match.start()])
            last = match.end()
        tail = text[last:]
        if calls and self.OPEN in tail and self.CLOSE not in tail:  # cut off inside a call (length)
            opened = tail.index(self.OPEN)
            body = self._block(tail[opened + len(self.OPEN) :])
            if body is not None:
                calls.append(body)
                tail = tail[:opened]
        content.append(tail)
        joined = "".join(content)
        if not calls:
            return Parsed(text, [])
        return Parsed(joined if joined.strip() else None, calls)

    def hold_from(self, text: str) -> int:
        at = text.find(self.OPEN)
        return at if at != -1 else _partial_marker_at_end(text, self.OPEN)

    def complete_calls(self, text: str) -> list[ParsedCall]:
        return [call for m in self.BLOCK.finditer(text) if (call := self._block(m.group(1))) is not None]

    def forced_prefix(self, function: str | None) -> str:
        if function is None:
            return self.OPEN + "\n"
        return f'{self.OPEN}\n{{"name": {json.dumps(function)}, "arguments": '


class Llama3JsonParser:
    """Llama 3.x JSON calls: the answer *is* ``{"name": ..., "parameters": {...}}`` (``;``-separated when
    several), optionally after ``<|python_tag|>``. Anything else is an ordinary answer."""

    name = "llama3_json"
    TAG = "<|python_tag|>"

    def _objects(self, text: str) -> tuple[list[ParsedCall], bool, int]:
        """Calls decoded from the start of ``text``, whether the whole text was calls, and how many of
        the calls a ``;`` already separates from a next one (those are final while streaming)."""
        body = text.strip()
        if body.startswith(self.TAG):
            body = body[len(self.TAG) :].lstrip()
        decoder, calls, at, separated = json.JSONDecoder(), [], 0, 0
        while at < len(body):
            try:
                data, end = decoder.raw_decode(body, at)
            except ValueError:
                return calls, False, separated
            if not isinstance(data, dict):
                return calls, False, separated
            call = _call(data.get("name"), data.get("parameters", data.get("arguments")))
            if call is None:
                return calls, False, separated
            calls.append(call)
            at = end
            while at < len(body) and body[at] in " \t\r\n;":
                if body[at] == ";":
                    separated = len(calls)
                at += 1
        return calls, True, separated

    def parse(self, text: str) -> Parsed:
        stripped = text.strip()
        if not (stripped.startswith("{") or stripped.startswith(self.TAG)):
            return Parsed(text, [])
        calls, whole, _ = self._objects(text)
        if not calls or not whole:
            return Parsed(text, [])
        return Parsed(None, calls)

    def hold_from(self, text: str) -> int:
        stripped = text.lstrip()
        if not stripped or stripped.startswith("{") or self.TAG.startswith(stripped[: len(self.TAG)]):
            return 0  # the answer may be a call: hold all of it (leading whitespace included)
        return len(text)

    def complete_calls(self, text: str) -> list[ParsedCall]:
        calls, _, separated = self._objects(text)
        return calls[:separated]  # the last call is final only once the answer is (text may follow)

    def forced_prefix(self, function: str | None) -> str:
        if function is None:
            return '{"name": '
        return f'{{"name": {json.dumps(function)}, "parameters": '


register_tool_parser("hermes", HermesParser, detect=lambda template: "<tool_call>" in template)
register_tool_parser(
    "llama3_json",
    Llama3JsonParser,
    detect=lambda template: (
        "<|python_tag|>" in template or ("<|start_header_id|>" in template and '"parameters"' in template)
    ),
)
