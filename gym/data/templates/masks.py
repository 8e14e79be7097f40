"""Assistant-only loss masks for any Jinja chat template, named or the tokenizer's own.

The named templates (:data:`TEMPLATES`) wrap exactly the text that carries loss in
``{% generation %}`` ... ``{% endgeneration %}``, so for them one render gives the text and the spans
(transformers reports each block's character span). Other templates (the tokenizer's own, a user's
.jinja) mostly have no markers, and where they do they follow their own conventions (some leave the
end-of-turn out), so they are never trusted: the conversation is rendered once (the training text)
and each assistant turn is located by rendering prefixes: ``messages[:i]`` with the generation prompt
ends where the answer begins, and ``messages[:i+1]`` ends where it (plus the separator after it)
ends. This needs nothing from the template but its output. Either way, character spans then map to
tokens through the fast tokenizer's offsets.

Some templates render earlier turns differently once a later turn exists (qwen3 drops the thinking
block of assistant turns before the last user query; with ``enable_thinking=False`` the generation
prompt holds an empty thinking block that earlier turns lack). When a prefix is not a prefix of the
full text, that turn is located by string search instead, in order: its start after the longest part
of the generation header that the full text repeats (or at its content), its end after the first
end-of-turn that follows its content.

The end-of-turn string (``<|im_end|>``, ``</s>``, ...) carries loss so the model learns to stop; the
generation header and the whitespace separating the turn from the next one do not.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from gym.data.byte_offsets import byte_lengths, encode_without_offsets
from gym.data.templates.registry import TEMPLATES
from gym.data.templates.render import render_chat, render_chat_generation

IGNORE_INDEX = -100
_PROBE = "GYM_PROBE_ANSWER_7F3A"


def probe_end_of_turn(tokenizer: Any, template: str | None, **template_kwargs: Any) -> str:
    """What a template writes right after an assistant answer to close the turn, minus the separator whitespace.

    Found by rendering a probe conversation, so it works for unknown templates; falls back to the
    tokenizer's EOS when the probe cannot be rendered. Text that only the last message gets (phi3
    writes EOS after the whole conversation) is no part of a turn's end: what follows the answer is
    cut to what also follows it when a user turn comes next.
    """
    probe = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": _PROBE}]
    try:
        text = render_chat(tokenizer, probe, template, **template_kwargs)
    except Exception:
        text = ""
    if _PROBE not in text:
        return getattr(tokenizer, "eos_token", None) or ""
    tail = text[text.rindex(_PROBE) + len(_PROBE) :]
    following = _safe_render(
        tokenizer, [*probe, {"role": "user", "content": "Hi"}], template, **template_kwargs
    )
    if following is not None and _PROBE in following:
        shared = os.path.commonprefix([tail, following[following.index(_PROBE) + len(_PROBE) :]])
        if shared != tail:
            tail = _whole_tags(shared)
    return tail.rstrip()


def _whole_tags(text: str) -> str:
    """``text`` cut after its last tag end or whitespace: ``'<|end|>\\n<|'`` -> ``'<|end|>\\n'``."""
    cuts = [k + 1 for k, char in enumerate(text) if char in ">]" or char.isspace()]
    return text[: cuts[-1]] if cuts else ""


def _safe_render(
    tokenizer: Any, messages: list[dict[str, Any]], template: str | None, **kw: Any
) -> str | None:
    if not messages:
        return ""
    try:
        return render_chat(tokenizer, messages, template, **kw)
    except Exception:  # a prefix may be invalid for a strict template; the search path copes
        return None


def assistant_spans(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    template: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    end_of_turn: str | None = None,
    **template_kwargs: Any,
) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character span of each assistant turn (answer + end-of-turn).

    One render for a named template (its generation markers); otherwise the prefix-diff search, whose
    prefix renders are memoised, so a one-turn conversation costs two renders. The two give the same
    spans for the named templates (tested), so the choice is only a matter of speed.
    """
    if _marked(template) and not (messages and messages[0].get("role") == "assistant"):
        found = _marker_spans(tokenizer, messages, template, tools, end_of_turn, **template_kwargs)
        if found is not None:
            return found
    return _prefix_spans(tokenizer, messages, template, tools, end_of_turn, **template_kwargs)


@lru_cache(maxsize=32)
def _marked(template: str | None) -> bool:
    """Whether ``template`` is a registered template with ``{% generation %}`` markers."""
    return (
        template is not None
        and "generation" in template
        and any(template == named.jinja for named in TEMPLATES.values())
    )


def _marker_spans(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    template: str | None,
    tools: list[dict[str, Any]] | None,
    end_of_turn: str | None,
    **template_kwargs: Any,
) -> tuple[str, list[tuple[int, int]]] | None:
    """Spans from the template's generation blocks, one per assistant message (else None).

    A given ``end_of_turn`` cuts each block as :func:`_prefix_spans` cuts a turn (after its last
    end-of-turn, else before trailing whitespace), which leaves a named template's blocks as they are.
    """
    text, blocks = render_chat_generation(tokenizer, messages, template, tools, **template_kwargs)
    if len(blocks) != sum(1 for message in messages if message.get("role") == "assistant"):
        return None
    if end_of_turn is None:
        return text, blocks
    eot, spans = end_of_turn.strip(), []
    for start, end in blocks:
        turn = text[start:end]
        spans.append(
            (start, start + (turn.rindex(eot) + len(eot) if eot and eot in turn else len(turn.rstrip())))
        )
    return text, spans


def _prefix_spans(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    template: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    end_of_turn: str | None = None,
    **template_kwargs: Any,
) -> tuple[str, list[tuple[int, int]]]:
    """:func:`assistant_spans` by rendering prefixes, for templates without trusted markers."""
    kw = {"tools": tools, **template_kwargs}
    text = render_chat(tokenizer, messages, template, **kw)
    eot = (end_of_turn if end_of_turn is not None else probe_end_of_turn(tokenizer, template, **kw)).strip()
    renders: dict[tuple[int, bool], str | None] = {(len(messages), False): text}

    def render(count: int, generation: bool = False) -> str | None:
        if (count, generation) not in renders:
            renders[count, generation] = _safe_render(
                tokenizer, messages[:count], template, add_generation_prompt=generation, **kw
            )
        return renders[count, generation]

    spans: list[tuple[int, int]] = []
    cursor = 0
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        prompt, upto = render(i, True), render(i + 1)
        if prompt is not None and upto is not None and text.startswith(prompt) and text.startswith(upto):
            start, end = max(cursor, len(prompt)), len(upto)
            turn = text[start:end]
            end = start + (turn.rindex(eot) + len(eot) if eot and eot in turn else len(turn.rstrip()))
        elif prompt is not None and text.startswith(prompt) and len(prompt) >= cursor and eot:
            # the answer starts after the generation prompt, but the conversation up to it is no prefix
            # (phi3 ends every conversation with EOS): its end is the first end-of-turn after its content
            start = len(prompt)
            end = _search_turn(text, start, message, "", eot, i)[1]
        else:
            base = render(i)
            if base is not None and text.startswith(base):
                cursor = max(cursor, len(base))
            header = (
                prompt[len(base) :]
                if prompt is not None and base is not None and prompt.startswith(base)
                else ""
            )
            start, end = _search_turn(text, cursor, message, header, eot, i)
        spans.append((start, end))
        cursor = end
    return text, spans


def _after_header(text: str, header: str, lo: int, hi: int | None) -> int | None:
    """Where the answer begins after the generation header in ``text[lo:hi]``, or None.

    The header's first line (``<|im_start|>assistant\n``) is looked for (the last one before ``hi``,
    else the first after ``lo``), then extended by as many further whole lines of the header as the
    text repeats there (whole lines, so ``<think>`` in the header never half-matches ``<tool_call>``).
    """
    cuts = [k + 1 for k, char in enumerate(header) if char == "\n" and header[: k + 1].strip()] + [
        len(header)
    ]
    pos = text.rfind(header[: cuts[0]], lo, hi) if hi is not None else text.find(header[: cuts[0]], lo)
    if pos < 0:
        return None
    window = text[pos:hi]
    return pos + max(cut for cut in cuts if window.startswith(header[:cut]))


def _search_turn(
    text: str, cursor: int, message: dict[str, Any], header: str, eot: str, index: int
) -> tuple[int, int]:
    """Locate one assistant turn in ``text`` after ``cursor`` when prefix rendering is inconsistent.

    The turn starts after the last (longest) piece of the generation header before its content, so a
    thinking block the full text keeps stays in the span; with no content (a tool-call-only turn) it
    starts after the next header; with no header, at its content and the spaces written before it. It ends after the first end-of-turn that follows its content.
    """
    content = (message.get("content") or "").strip()
    found = text.find(content, cursor) if content else -1
    if content and found < 0:
        raise ValueError(
            f"assistant message {index}: its content does not appear in the rendered conversation"
        )
    start = _after_header(text, header, cursor, found if content else None) if header else None
    if start is None:
        start = found if content else cursor
        while content and start > cursor and text[start - 1] == " ":
            start -= 1  # the space a template writes before the answer (mistral's "[/INST] answer")
    after = found + len(content) if content else start
    stop = text.find(eot, after) if eot else -1
    if stop < 0:
        raise ValueError(
            f"assistant message {index}: no end-of-turn {eot!r} after its content in the rendered conversation"
        )
    return start, stop + len(eot)


def tokenize_with_mask(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    template: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    end_of_turn: str | None = None,
    **template_kwargs: Any,
) -> tuple[list[int], list[int]]:
    """Token ids of the rendered conversation and labels that are -100 except on assistant turns.

    ``template`` is Jinja text (None = the tokenizer's own). ``end_of_turn`` is found from the
    template when not given. A token carries loss when it starts inside an assistant span, so a
    token that straddles the end of an answer (e.g. ``</s>`` merged with a newline) still does.
    Needs a fast tokenizer (for offsets); the text is tokenized without extra special tokens, as
    ``apply_chat_template`` does, since the template writes BOS itself.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("assistant-only loss masks need a fast tokenizer (offset mapping); got a slow one")
    text, spans = assistant_spans(tokenizer, messages, template, tools, end_of_turn, **template_kwargs)
    ids, labels = labels_for_encoding(encode_texts(tokenizer, [text])[0], spans)
    return ids.tolist(), labels.tolist()


def encode_texts(tokenizer: Any, texts: list[str]) -> list[Any]:
    """The ``Encoding`` of each text (ids and positions), in one batch call, without extra special tokens.

    Calls the fast tokenizer's backend directly: ``tokenizer(texts, return_offsets_mapping=True)``
    would convert every token's offsets (and attention mask) into Python objects, which cost more
    than the tokenization itself; the labels need only a few lookups per assistant span
    (:func:`labels_for_encoding`). A byte-level BPE tokenizer is not even asked for offsets: its
    tokens' byte lengths give them (gym/data/byte_offsets.py). Padding and truncation are switched
    off as ``tokenizer(...)`` switches them off for an unpadded, untruncated call.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not getattr(tokenizer, "is_fast", False):
        raise ValueError("assistant-only loss masks need a fast tokenizer (offset mapping); got a slow one")
    if not texts:
        return []
    if backend.truncation is not None:
        backend.no_truncation()
    if backend.padding is not None:
        backend.no_padding()
    lengths = byte_lengths(tokenizer)
    if lengths is not None:
        return encode_without_offsets(backend, lengths, texts)
    return backend.encode_batch(texts, add_special_tokens=False)


def _first_token(encoding: Any, start: int, end: int) -> int | None:
    """Index of the first token that starts inside [start, end), None when none does."""
    for char in range(start, end):
        token = encoding.char_to_token(char)
        if token is not None:
            return token + 1 if encoding.token_to_chars(token)[0] < start else token
    return None


def _last_token(encoding: Any, start: int, end: int) -> int | None:
    """Index of the last token that starts before ``end`` and covers a character of [start, end)."""
    for char in range(end - 1, start - 1, -1):
        token = encoding.char_to_token(char)
        if token is not None:
            return token
    return None


def labels_for_encoding(encoding: Any, spans: list[tuple[int, int]]) -> tuple[Any, Any]:
    """``(input_ids, labels)`` as int32 arrays: labels copy the ids of tokens that start inside a span.

    The same rule as :func:`labels_for_spans` (a token straddling the end of an answer carries loss, one
    straddling its start does not), found with two character-to-token lookups per span instead of a
    Python pass over every token's offsets.
    """
    import numpy as np

    ids = np.asarray(encoding.ids, dtype=np.int32)
    labels = np.full(ids.shape, IGNORE_INDEX, dtype=np.int32)
    for start, end in spans:
        first, last = _first_token(encoding, start, end), _last_token(encoding, start, end)
        if first is not None and last is not None and first <= last:
            labels[first : last + 1] = ids[first : last + 1]
    return ids, labels


def labels_for_spans(
    input_ids: list[int], offsets: list[tuple[int, int]], spans: list[tuple[int, int]]
) -> list[int]:
    """Labels that copy ``input_ids`` where a token starts inside a span, -100 elsewhere.

    Split out so batch tokenization (one fast-tokenizer call for many rows) can reuse it.
    """
    labels = [IGNORE_INDEX] * len(input_ids)
    span_iter = iter(spans)
    span = next(span_iter, None)
    for k, (tok_start, tok_end) in enumerate(offsets):
        while span is not None and tok_start >= span[1]:
            span = next(span_iter, None)
        if span is None:
            break
        if tok_end > tok_start and span[0] <= tok_start < span[1]:
            labels[k] = input_ids[k]
    return labels
