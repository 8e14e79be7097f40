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
from gym.data.templates import IGNORE_INDEX, assistant_spans
from gym.data.templates.masks import encode_texts, labels_for_encoding

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


class _Fit:
    """The search for one over-long conversation's longest suffix of whole exchanges that fits.

    The last exchange alone is tried first (most over-long rows stop there); otherwise a binary search
    finds the fewest oldest exchanges to drop, so a long conversation costs O(log turns) renders
    rather than one per turn. :func:`_fit_conversations` runs the searches of many rows in lockstep,
    so each round tokenizes its candidates in one batch call, and labels only the winner.
    """

    def __init__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> None:
        self.head = [m for m in messages[:1] if m["role"] == "system"]
        self.body = messages[len(self.head) :]
        self.tools = tools
        self.starts = _exchange_starts(self.body)
        self.best: tuple[Any, list[tuple[int, int]]] | None = None  # (encoding, assistant spans)
        self.status = TOO_LONG
        self.low, self.high = 1, len(self.starts) - 1  # the answer lies in [low, high]
        self.next: int | None = len(self.starts) - 1 if len(self.starts) >= 2 else None

    def candidate(self) -> list[dict[str, Any]]:
        assert self.next is not None
        return self.head + self.body[self.starts[self.next] :]

    def record(self, result: tuple[Any, list[tuple[int, int]]] | str) -> None:
        """The outcome of trying ``self.next``: its encoding and spans, or why it does not fit."""
        if self.best is None:  # the first try: the last exchange alone
            if isinstance(result, str):
                self.status, self.next = result, None
                return
            self.best, self.status = result, TRUNCATED
        elif isinstance(result, str):
            self.low = (self.next or 0) + 1
        else:
            self.best, self.high = result, self.next
        self.next = (self.low + self.high) // 2 if self.low < self.high else None

    def result(self) -> tuple[Any, Any, str]:
        if self.best is None:
            return [], [], self.status
        ids, labels = labels_for_encoding(*self.best)
        return ids, labels, self.status


def _fit_conversations(
    tokenizer: Any,
    conversations: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]],
    settings: TokenizeSettings,
) -> list[tuple[list[int], list[int], str]]:
    """Tokens of the longest suffix of whole exchanges that fits ``max_length`` (system kept), per row.

    Called only for rows already known to be too long whole; see :class:`_Fit`.
    """
    fits = [_Fit(messages, tools) for messages, tools in conversations]
    while todo := [fit for fit in fits if fit.next is not None]:
        rendered = [_render_spans(tokenizer, fit.candidate(), fit.tools, settings) for fit in todo]
        encodings = iter(encode_texts(tokenizer, [item[0] for item in rendered if not isinstance(item, str)]))
        for fit, item in zip(todo, rendered, strict=True):
            if isinstance(item, str):
                fit.record(item)
                continue
            encoding = next(encodings)
            fit.record((encoding, item[1]) if len(encoding) <= settings.max_length else TOO_LONG)
    return [fit.result() for fit in fits]


def _fit_conversation(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    settings: TokenizeSettings,
) -> tuple[list[int], list[int], str]:
    """:func:`_fit_conversations` for one row."""
    return _fit_conversations(tokenizer, [(messages, tools)], settings)[0]


def _render_spans(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    settings: TokenizeSettings,
) -> tuple[str, list[tuple[int, int]]] | str:
    """The rendered text and assistant spans, or the failure status when the template rejects it."""
    try:
        return assistant_spans(
            tokenizer, messages, settings.template, tools, settings.end_of_turn, **settings.template_kwargs
        )
    except Exception as error:  # a template that rejects the conversation (role order, content type...)
        return f"{TEMPLATE_FAILED}: {str(error)[:120]}"


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


def _with_status(ids: Any, labels: Any, status: str, method: str) -> dict[str, Any]:
    import numpy as np

    if status in (OK, TRUNCATED) and method in ("sft", "dpo", "rm", "kto") and _loss_tokens(labels) == 0:
        status = NO_LOSS
    return {"input_ids": np.asarray(ids, dtype=np.int32), "labels": np.asarray(labels, dtype=np.int32),
            "status": status}  # fmt: skip


def _loss_tokens(labels: Any) -> int:
    import numpy as np

    return int(np.count_nonzero(np.asarray(labels) != IGNORE_INDEX))


def tokenize_rows(
    tokenizer: Any, rows: list[dict[str, Any]], settings: TokenizeSettings
) -> list[list[dict[str, Any]]]:
    """Tokenized results for each row (text may become several blocks; a skipped row has a bad status).

    All rows of a batch go through one fast-tokenizer call (Rust, multi-threaded); only rows longer
    than ``max_length`` take the slow path that re-renders them without their oldest exchanges.
    """
    if settings.method == "pt":
        encoded = tokenizer([row["text"] for row in rows], add_special_tokens=False)["input_ids"]
        return [_text_blocks(ids, tokenizer, settings.max_length) for ids in encoded]
    conversations = [_conversation(row) for row in rows]
    rendered = [_render_spans(tokenizer, messages, tools, settings) for messages, tools in conversations]
    encodings = iter(encode_texts(tokenizer, [item[0] for item in rendered if not isinstance(item, str)]))
    results: list[list[dict[str, Any]]] = []
    over_long: list[int] = []  # rows to fit by dropping their oldest exchanges, all together at the end
    for number, (row, item) in enumerate(zip(rows, rendered, strict=True)):
        if isinstance(item, str):
            results.append([{"input_ids": [], "labels": [], "status": item}])
            continue
        encoding = next(encodings)
        if len(encoding) <= settings.max_length:
            results.append([_with_status(*labels_for_encoding(encoding, item[1]), OK, settings.method)])
        elif len(_exchange_starts(json.loads(row["messages"]))) < 2:
            results.append([_with_status([], [], TOO_LONG, settings.method)])  # nothing older to drop
        else:
            results.append([])
            over_long.append(number)
    fitted = _fit_conversations(tokenizer, [conversations[number] for number in over_long], settings)
    for number, (ids, labels, status) in zip(over_long, fitted, strict=True):
        results[number].append(_with_status(ids, labels, status, settings.method))
    return results


def tokenize_batch(
    batch: dict[str, list[Any]], *, tokenizer: Any, settings: TokenizeSettings
) -> dict[str, list[Any]]:
    """``datasets.map(batched=True)`` body: input columns in, tokenized rows (same columns kept) out.

    Token columns leave as int32 NumPy arrays: Arrow takes them without a per-token Python object.
    """
    import numpy as np

    names = list(batch)
    rows = [{name: batch[name][position] for name in names} for position in range(len(batch[names[0]]))]
    columns = [*names, "input_ids", "labels", "length", "loss_tokens", "status"]
    out: dict[str, list[Any]] = {name: [] for name in columns}
    for row, results in zip(rows, tokenize_rows(tokenizer, rows, settings), strict=True):
        for result in results:
            for name in names:
                out[name].append(row[name])
            out["input_ids"].append(np.asarray(result["input_ids"], dtype=np.int32))  # one Arrow type for all
            out["labels"].append(np.asarray(result["labels"], dtype=np.int32))
            out["length"].append(len(result["input_ids"]))
            out["loss_tokens"].append(_loss_tokens(result["labels"]))
            out["status"].append(result["status"])
    return out
