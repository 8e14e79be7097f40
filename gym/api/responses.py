"""From backend :class:`Chunk` events to OpenAI response bodies: whole (``collect``) or as SSE (``sse``).

Both paths share :class:`Shape` (what the request asked for: chat or text, tool parsing, logprobs), so
a streamed answer always adds up to the unstreamed one: the same content, the same ``tool_calls``
(streamed as one delta per call once it is whole), the same logprobs.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from gym.api.intake import RequestRejected
from gym.api.schemas import error_body
from gym.api.tools.parsers import ParsedCall, ToolParser
from gym.api.tools.stream import ToolCallStream
from gym.engine.backend import Chunk, TokenLogprob


@dataclass
class Shape:
    chat: bool
    n: int = 1
    tool_parser: ToolParser | None = None
    forced: str = ""  # text written after the generation prompt (the start of a required call)
    logprobs: bool = False
    usage: bool = False
    single_call: bool = False  # parallel_tool_calls = false: the first call only


class Meta:
    """Ids and counts shared by every chunk of one response."""

    def __init__(self, prefix: str, obj: str, model: str, prompt_tokens: int, n: int) -> None:
        self.id, self.object, self.model = f"{prefix}-{uuid.uuid4().hex}", obj, model
        self.created, self.prompt_tokens, self.n = int(time.time()), prompt_tokens, n
        self.completion_tokens = [0] * n

    def usage(self) -> dict[str, int]:
        done = sum(self.completion_tokens)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": done,
            "total_tokens": self.prompt_tokens + done,
        }

    def envelope(self, choices: list[dict[str, Any]], streaming: bool) -> dict[str, Any]:
        obj = self.object + (".chunk" if streaming and self.object == "chat.completion" else "")
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }


# -- logprobs in OpenAI's two shapes ------------------------------------------------------------
def _token_entry(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def chat_logprobs(entries: list[TokenLogprob]) -> dict[str, Any]:
    content = [
        {**_token_entry(e.text, e.logprob), "top_logprobs": [_token_entry(t, lp) for t, lp in e.top]}
        for e in entries
    ]
    return {"content": content, "refusal": None}


def text_logprobs(entries: list[TokenLogprob], offset: int = 0) -> dict[str, Any]:
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(e.text)
    return {
        "tokens": [e.text for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [dict(e.top) for e in entries],
        "text_offset": offsets,
    }


def _calls_delta(calls: list[ParsedCall], first_index: int) -> list[dict[str, Any]]:
    return [{"index": first_index + k, **call.as_openai()} for k, call in enumerate(calls)]


# -- whole responses ----------------------------------------------------------------------------
async def collect(meta: Meta, stream: AsyncIterator[Chunk], shape: Shape) -> dict[str, Any]:
    texts: list[list[str]] = [[] for _ in range(meta.n)]
    logprobs: list[list[TokenLogprob]] = [[] for _ in range(meta.n)]
    reasons: list[str | None] = [None] * meta.n
    async for chunk in stream:
        if chunk.error:
            raise RequestRejected(500, chunk.error, "server_error")
        texts[chunk.index].append(chunk.text)
        logprobs[chunk.index] += chunk.logprobs or []
        meta.completion_tokens[chunk.index] = chunk.completion_tokens
        reasons[chunk.index] = chunk.finish_reason or reasons[chunk.index]
    choices = []
    for i in range(meta.n):
        text, reason = "".join(texts[i]), reasons[i]
        if shape.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if shape.tool_parser is not None:
                parsed = shape.tool_parser.parse(shape.forced + text)
                if shape.single_call:
                    parsed.calls = parsed.calls[:1]
                if parsed.calls:
                    message = {"role": "assistant", "content": parsed.content,
                               "tool_calls": [c.as_openai() for c in parsed.calls]}  # fmt: skip
                    reason = "tool_calls" if reason == "stop" else reason
            lp = chat_logprobs(logprobs[i]) if shape.logprobs else None
            choices.append({"index": i, "message": message, "finish_reason": reason, "logprobs": lp})
        else:
            lp = text_logprobs(logprobs[i]) if shape.logprobs else None
            choices.append({"index": i, "text": text, "finish_reason": reason, "logprobs": lp})
    return {**meta.envelope(choices, streaming=False), "usage": meta.usage()}


# -- server-sent events -------------------------------------------------------------------------
def _event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class _ChoiceStream:
    """One choice of a streamed response: turns its chunks into OpenAI choice deltas."""

    def __init__(self, index: int, shape: Shape) -> None:
        self.index, self.shape = index, shape
        self.tools = ToolCallStream(shape.tool_parser, shape.forced) if shape.tool_parser else None
        self.logprobs: list[TokenLogprob] = []
        self.calls_sent, self.text_offset = 0, 0

    def deltas(self, chunk: Chunk) -> list[dict[str, Any]]:
        self.logprobs += chunk.logprobs or []
        done = chunk.finish_reason is not None
        content, calls = chunk.text, []
        if self.tools is not None:
            content, calls = self.tools.feed(chunk.text, final=done)
            if self.shape.single_call:
                calls = calls[: max(0, 1 - self.calls_sent)]
        out = []
        if content or calls or done or (self.logprobs and self.tools is None):
            out.append(self._choice(content, calls, None))
        reason = chunk.finish_reason
        if done:
            if self.calls_sent and reason == "stop":
                reason = "tool_calls"
            if out:
                out[-1]["finish_reason"] = reason
        return out

    def _choice(self, content: str, calls: list[ParsedCall], reason: str | None) -> dict[str, Any]:
        lp_entries, self.logprobs = self.logprobs, []
        if not self.shape.chat:
            lp = text_logprobs(lp_entries, self.text_offset) if self.shape.logprobs else None
            self.text_offset += sum(len(e.text) for e in lp_entries)
            return {"index": self.index, "text": content, "finish_reason": reason, "logprobs": lp}
        delta: dict[str, Any] = {}
        if content:
            delta["content"] = content
        if calls:
            delta["tool_calls"] = _calls_delta(calls, self.calls_sent)
            self.calls_sent += len(calls)
        lp = chat_logprobs(lp_entries) if self.shape.logprobs else None
        return {"index": self.index, "delta": delta, "finish_reason": reason, "logprobs": lp}


_MARK = "\x00gym-text\x00"
_MARK_JSON = json.dumps(_MARK, ensure_ascii=False)[1:-1]


class _TextEvents:
    """The SSE bytes of a plain text delta (no tools, no logprobs, not the last chunk) from a template:
    the envelope is encoded once per choice, and each token only has its text escaped into it. Byte for
    byte what :func:`_event` writes for the same delta, at a fraction of the per-token cost."""

    def __init__(self, meta: Meta, shape: Shape) -> None:
        self.templates = []
        for index in range(meta.n):
            if shape.chat:
                choice = {
                    "index": index,
                    "delta": {"content": _MARK},
                    "finish_reason": None,
                    "logprobs": None,
                }
            else:
                choice = {"index": index, "text": _MARK, "finish_reason": None, "logprobs": None}
            head, tail = _event(meta.envelope([choice], streaming=True)).decode().split(_MARK_JSON)
            self.templates.append((head.encode(), tail.encode()))

    def event(self, index: int, text: str) -> bytes:
        head, tail = self.templates[index]
        return head + json.dumps(text, ensure_ascii=False)[1:-1].encode() + tail


async def sse(meta: Meta, stream: AsyncIterator[Chunk], shape: Shape) -> AsyncIterator[bytes]:
    choices = [_ChoiceStream(i, shape) for i in range(meta.n)]
    plain = _TextEvents(meta, shape) if shape.tool_parser is None and not shape.logprobs else None
    if shape.chat:
        for i in range(meta.n):
            first = {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                     "logprobs": None}  # fmt: skip
            yield _event(meta.envelope([first], streaming=True))
    async for chunk in stream:
        if chunk.error:
            yield _event(error_body(chunk.error, "server_error"))
            break
        meta.completion_tokens[chunk.index] = chunk.completion_tokens
        if plain is not None and chunk.text and chunk.finish_reason is None:
            yield plain.event(chunk.index, chunk.text)
            continue
        for choice in choices[chunk.index].deltas(chunk):
            yield _event(meta.envelope([choice], streaming=True))
    if shape.usage:
        yield _event({**meta.envelope([], streaming=True), "usage": meta.usage()})
    yield b"data: [DONE]\n\n"
