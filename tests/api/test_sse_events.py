"""Streamed text deltas come from a per-choice byte template (the per-token fast path); they must be byte
for byte the events the general encoder writes, whatever the text holds (quotes, escapes, emoji)."""

from __future__ import annotations

import asyncio
import json

import pytest

from gym.api.responses import Meta, Shape, _ChoiceStream, _event, sse
from gym.engine.backend import Chunk

TEXTS = ["ab", 'a "quote" and a \\ backslash', "é€😀", "\n\t\x01\x1f", "</s>", " "]


def chunks(count: int) -> list[Chunk]:
    out = [Chunk(i % 2, TEXTS[i % len(TEXTS)], None, i // 2 + 1) for i in range(count)]
    return out + [Chunk(0, "end", "length", count // 2), Chunk(1, "", "stop", count // 2)]


async def events(meta: Meta, shape: Shape, items: list[Chunk]) -> list[bytes]:
    async def stream():
        for item in items:
            yield item

    return [event async for event in sse(meta, stream(), shape)]


def general_encoder(meta: Meta, shape: Shape, items: list[Chunk]) -> list[bytes]:
    """The events without the fast path: every delta through :class:`_ChoiceStream` and ``json.dumps``."""
    choices = [_ChoiceStream(i, shape) for i in range(meta.n)]
    out = []
    if shape.chat:
        for i in range(meta.n):
            first = {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                     "logprobs": None}  # fmt: skip
            out.append(_event(meta.envelope([first], streaming=True)))
    for item in items:
        out += [
            _event(meta.envelope([choice], streaming=True)) for choice in choices[item.index].deltas(item)
        ]
    return out + [b"data: [DONE]\n\n"]


@pytest.mark.parametrize("chat", [True, False])
def test_text_deltas_are_byte_identical_to_the_general_encoder(chat: bool) -> None:
    kind = "chat.completion" if chat else "text_completion"
    meta = Meta("chatcmpl", kind, 'a "quoted" model/name', 12, 2)
    shape = Shape(chat=chat, n=2)
    items = chunks(40)
    streamed = asyncio.run(events(meta, shape, items))
    assert streamed == general_encoder(meta, shape, items)
    text = {0: "", 1: ""}
    for event in streamed[:-1]:
        choice = json.loads(event[len(b"data: ") :])["choices"][0]
        text[choice["index"]] += (choice["delta"].get("content", "") if chat else choice["text"]) or ""
    assert text == {i: "".join(c.text for c in items if c.index == i) for i in (0, 1)}
