"""Examples -> token ids and loss labels, per training method, without ever cutting an answer.

Runs inside ``datasets.map(batched=True)``, so rows travel as flat columns (:func:`example_to_row`,
conversations as JSON text: Arrow cannot hold the varying shapes of tool calls) and come back with
``input_ids``, ``labels``, ``length`` and a ``status``. A conversation longer than ``max_length``
loses its oldest exchanges first (counted as truncated); when even its last exchange does not fit,
the row is skipped and counted, never cut in the middle of an assistant answer. Plain text for
continued pretraining is split into ``max_length`` blocks instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gym.data.example import Example
from gym.data.templates import IGNORE_INDEX, assistant_spans, labels_for_spans, tokenize_with_mask

OK, TRUNCATED = "ok", "truncated (oldest turns dropped)"
TOO_LONG = "longer than max_length"
NO_LOSS = "no assistant tokens to learn from"
TEMPLATE_FAILED = "chat template failed to render"
KEPT = (OK, TRUNCATED, "split into blocks")


def example_to_row(example: Example) -> dict[str, Any]:
    """An Example as flat, Arrow-friendly columns (nested parts as JSON text)."""

    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    return {
        "messages": dump([m.to_chat() for m in example.messages]),
        "tools": dump(example.tools),
        "chosen": dump(example.chosen.to_chat()) if example.chosen else "",
        "rejected": dump(example.rejected.to_chat()) if example.rejected else "",
        "label": example.label,
        "text": example.text or "",
        "reference": example.reference or "",
        "images": example.images,
        "source": example.source,
        "index": example.index,
    }


@dataclass
class TokenizeSettings:
    """Everything that decides the tokens: part of the cache key."""

    method: str
    max_length: int
    template: str  # Jinja text
    end_of_turn: str
    template_kwargs: dict[str, Any] = field(default_factory=dict)


def _exchange_starts(messages: list[dict[str, Any]]) -> list[int]:
    return [i for i, m in enumerate(messages) if m["role"] == "user"]


def _fit_conversation(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, settings: TokenizeSettings
) -> tuple[list[int], list[int], str]:
    """Tokens of the longest suffix of whole exchanges that fits ``max_length`` (system kept).

    Called only for rows already known to be too long whole. The last exchange alone is tried first
    (most over-long rows stop there); otherwise a binary search finds the fewest oldest exchanges to
    drop, so a long conversation costs O(log turns) renders rather than one per turn.
    """
    head = [m for m in messages[:1] if m["role"] == "system"]
    body = messages[len(head) :]
    starts = _exchange_starts(body)

    def attempt(drop: int) -> tuple[list[int], list[int]] | str:
        try:
            ids, labels = tokenize_with_mask(
                tokenizer, head + body[starts[drop] :], settings.template, tools, settings.end_of_turn,
                **settings.template_kwargs,
            )  # fmt: skip
        except Exception as error:  # a template that rejects the conversation (role order, content type...)
            return f"{TEMPLATE_FAILED}: {str(error)[:120]}"
        return (ids, labels) if len(ids) <= settings.max_length else TOO_LONG

    if len(starts) < 2:
        return [], [], TOO_LONG
    best = attempt(len(starts) - 1)
    if isinstance(best, str):
        return [], [], best
    low, high = 1, len(starts) - 1  # the answer (fewest exchanges dropped that fit) lies in [low, high]
    while low < high:
        middle = (low + high) // 2
        result = attempt(middle)
        if isinstance(result, str):
            low = middle + 1
        else:
            best, high = result, middle
    return best[0], best[1], TRUNCATED


def _conversation(row: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    messages = json.loads(row["messages"])
    if row["chosen"]:  # preference rows: measured and previewed as prompt + chosen answer
        messages = [*messages, json.loads(row["chosen"])]
    return messages, json.loads(row["tools"]) or None


def _text_blocks(ids: list[int], tokenizer: Any, max_length: int) -> list[dict[str, Any]]:
    if tokenizer.eos_token_id is not None:
        ids = [*ids, tokenizer.eos_token_id]
    blocks = [ids[i : i + max_length] for i in range(0, len(ids), max_length)]
    status = OK if len(blocks) == 1 else "split into blocks"
    return [{"input_ids": b, "labels": list(b), "status": status} for b in blocks]


def _with_status(ids: list[int], labels: list[int], status: str, method: str) -> dict[str, Any]:
    if status in (OK, TRUNCATED) and method in ("sft", "dpo", "rm", "kto"):
        if all(label == IGNORE_INDEX for label in labels):
            status = NO_LOSS
    return {"input_ids": ids, "labels": labels, "status": status}


def tokenize_rows(tokenizer: Any, rows: list[dict[str, Any]], settings: TokenizeSettings) -> list[list[dict[str, Any]]]:
    """Tokenized results for each row (text may become several blocks; a skipped row has a bad status).

    All rows of a batch go through one fast-tokenizer call (Rust, multi-threaded); only rows longer
    than ``max_length`` take the slow path that re-renders them without their oldest exchanges.
    """
    if settings.method == "pt":
        encoded = tokenizer([row["text"] for row in rows], add_special_tokens=False)["input_ids"]
        return [_text_blocks(ids, tokenizer, settings.max_length) for ids in encoded]
    rendered: list[tuple[str, list[tuple[int, int]]] | str] = []
    for row in rows:
        messages, tools = _conversation(row)
        try:
            rendered.append(
                assistant_spans(tokenizer, messages, settings.template, tools, settings.end_of_turn, **settings.template_kwargs)
            )
        except Exception as error:  # a template that rejects the conversation (role order, content type...)
            rendered.append(f"{TEMPLATE_FAILED}: {str(error)[:120]}")
    texts = [item[0] for item in rendered if not isinstance(item, str)]
    encoding = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True) if texts else None
    results: list[list[dict[str, Any]]] = []
    position = 0
    for row, item in zip(rows, rendered, strict=True):
        if isinstance(item, str):
            results.append([{"input_ids": [], "labels": [], "status": item}])
            continue
        assert encoding is not None
        ids, offsets = encoding["input_ids"][position], encoding["offset_mapping"][position]
        position += 1
        if len(ids) <= settings.max_length:
            labels, status = labels_for_spans(ids, offsets, item[1]), OK
        elif len(_exchange_starts(json.loads(row["messages"]))) < 2:
            ids, labels, status = [], [], TOO_LONG  # nothing older to drop
        else:
            ids, labels, status = _fit_conversation(tokenizer, *_conversation(row), settings)
        results.append([_with_status(ids, labels, status, settings.method)])
    return results


def tokenize_batch(batch: dict[str, list[Any]], *, tokenizer: Any, settings: TokenizeSettings) -> dict[str, list[Any]]:
    """``datasets.map(batched=True)`` body: input columns in, tokenized rows (same columns kept) out."""
    names = list(batch)
    rows = [{name: batch[name][position] for name in names} for position in range(len(batch[names[0]]))]
    out: dict[str, list[Any]] = {name: [] for name in [*names, "input_ids", "labels", "length", "status"]}
    for row, results in zip(rows, tokenize_rows(tokenizer, rows, settings), strict=True):
        for result in results:
            for name in names:
                out[name].append(row[name])
            out["input_ids"].append(result["input_ids"])
            out["labels"].append(result["labels"])
            out["length"].append(len(result["input_ids"]))
            out["status"].append(result["status"])
    return out
