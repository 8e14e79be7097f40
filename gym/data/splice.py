"""Measuring a conversation that lost its oldest exchanges from the tokens of the whole one.

An over-long row is fitted by rendering it without its oldest exchanges, possibly several times
(see ``_Fit`` in :mod:`gym.data.tokenize`). With chat templates that open every turn with a special
token (``<|im_start|>``, ``<|start_header_id|>``, ``[INST]`` ...), that rendering is the whole text with
one stretch taken out, and both cuts fall just before a special token. A fast tokenizer splits the
text at its added tokens before any pre-tokenizer or BPE sees it, so the tokens of such a text are
exactly the whole text's tokens with the tokens of that stretch taken out: the row is measured, and
its ids and labels are built, without tokenizing it again.

Every condition of that argument is checked on the texts and the whole text's encoding; when one
does not hold (a template that renders kept turns differently, a token that strips the whitespace
before it, an added token that could match across the cut), :func:`splice` returns None and the
caller tokenizes the text as before. Either way the tokens are the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AddedTokens:
    """The tokenizer's added tokens, and which of them a cut may fall before."""

    strings: tuple[str, ...]  # every added token's text: none may match across a cut
    safe: dict[str, int]  # text -> id of the tokens matched as they are (no lstrip, no single_word)

    @classmethod
    def of(cls, tokenizer: Any) -> AddedTokens | None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        decoder = getattr(tokenizer, "added_tokens_decoder", None)
        if backend is None or not decoder:
            return None
        unnormalized = backend.normalizer is None
        safe = {
            token.content: token_id
            for token_id, token in decoder.items()
            if token.content
            and not token.lstrip
            and not token.single_word
            and (unnormalized or not token.normalized)
        }
        strings = tuple(token.content for token in decoder.values() if token.content)
        return cls(strings, safe) if safe else None


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, by halving (each comparison is one C-level slice compare)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _common_suffix(a: str, b: str) -> int:
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[len(a) - middle : len(a) - low] == b[len(b) - middle : len(b) - low]:
            low = middle
        else:
            high = middle - 1
    return low


def _crossed(text: str, at: int, added: AddedTokens) -> bool:
    """Whether some added token occurs in ``text`` starting before ``at`` and ending after it."""
    return any(
        text.find(token, max(0, at - len(token) + 1), at + len(token) - 1) != -1
        for token in added.strings
        if len(token) > 1
    )


def _added_token_at(encoding: Any, ids: Any, char: int, token_id: int) -> int | None:
    """The index of the token ``token_id`` starting exactly at ``char`` in ``encoding``, else None."""
    index = encoding.char_to_token(char)
    if index is None or int(ids[index]) != token_id or encoding.token_to_chars(index)[0] != char:
        return None
    return index


def _spans_match(whole: list[tuple[int, int]], spans: list[tuple[int, int]], cut: int, gap: int) -> bool:
    """Whether ``spans`` are ``whole``'s spans with those in the removed stretch dropped (none crossing)."""
    expected = []
    for start, end in whole:
        if end <= cut:
            expected.append((start, end))
        elif start >= cut + gap:
            expected.append((start - gap, end - gap))
        elif not (start >= cut and end <= cut + gap):
            return False  # a span crosses a cut
    return expected == list(spans)


def splice(
    whole_text: str,
    whole_encoding: Any,
    whole_ids: Any,
    whole_spans: list[tuple[int, int]],
    text: str,
    spans: list[tuple[int, int]],
    added: AddedTokens,
) -> tuple[int, int] | None:
    """``(i, j)`` such that ``text``'s tokens are the whole tokens ``[:i] + [j:]`` (and its assistant
    spans those of the whole text, shifted), or None when that cannot be shown.
    """
    gap = len(whole_text) - len(text)
    if gap <= 0:
        return None
    prefix = _common_prefix(whole_text, text)
    lowest = len(text) - _common_suffix(whole_text, text)  # text[q:] == whole_text[q + gap:] for q >= lowest
    if lowest > prefix:
        return None
    for token, token_id in added.safe.items():
        at = text.find(token, lowest, prefix + len(token))
        while 0 <= at <= prefix:
            if whole_text.startswith(token, at) and not (
                _crossed(text, at, added)
                or _crossed(whole_text, at, added)
                or _crossed(whole_text, at + gap, added)
            ):
                first = _added_token_at(whole_encoding, whole_ids, at, token_id)
                second = _added_token_at(whole_encoding, whole_ids, at + gap, token_id)
                if first is not None and second is not None and _spans_match(whole_spans, spans, at, gap):
                    return first, second
            at = text.find(token, at + 1, prefix + len(token))
    return None
