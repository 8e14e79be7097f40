"""Examples -> token ids and loss labels, per training method, without ever cutting an answer.

Works on batches of flat columns (:func:`example_to_row`, conversations as JSON text: Arrow cannot hold
the varying shapes of tool calls), in threads, worker processes or ``datasets.map``, and gives back
``input_ids``, ``labels``, ``length``, ``full_length`` and a ``status``. One rule for every method: a
conversation longer than ``max_length`` loses its oldest exchanges first (counted as truncated);
when even its last exchange does not fit, the row is skipped and counted, never cut in the middle of
an answer. A preference row (dpo, rm) is two sequences, prompt + chosen and prompt + rejected, and
both must fit; a GRPO/PPO prompt is measured with the generation prompt and must leave the method's
``max_completion_length`` tokens free for the completions sampled from it. The conversation as
kept is written back to ``messages``, so trainers that tokenize rows themselves (TRL's DPO, KTO,
reward and GRPO trainers) receive exactly what was measured and their own truncation never acts.
Plain text for continued pretraining is split into ``max_length`` blocks instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gym.data.example import Example
from gym.data.splice import AddedTokens, splice
from gym.data.templates import IGNORE_INDEX, assistant_spans
from gym.data.templates.masks import encode_texts, labels_for_encoding
from gym.data.templates.render import render_chat

OK, TRUNCATED = "ok", "truncated (oldest turns dropped)"
TOO_LONG = "longer than max_length"
TOO_LONG_PROMPT = "prompt longer than max_length minus grpo.max_completion_length"
SKIPPED = (TOO_LONG, TOO_LONG_PROMPT)
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
    # Tokens kept free for what the model generates during training (GRPO/PPO rollouts): prompts are
    # measured with the generation prompt and must fit in max_length minus this.
    reserve: int = 0

    @property
    def generation(self) -> bool:
        """Whether rows are prompts the trainer completes (measured with the generation prompt)."""
        return self.method in PROMPT_METHODS

    @property
    def limit(self) -> int:
        return self.max_length - self.reserve


PROMPT_METHODS = ("grpo", "ppo")
PAIRED_METHODS = ("dpo", "rm")  # trained on both answers: both sequences must fit


@dataclass
class Measured:
    """One row (or one candidate suffix of it) rendered and measured against ``max_length``.

    ``text``, ``encoding`` and ``spans`` are those of its first sequence (prompt + chosen answer for
    preference rows); ``length`` is the length of its longest sequence. A candidate measured by
    :func:`~gym.data.splice.splice` has no encoding of its own: its tokens are ``source``'s with the
    tokens ``cut`` = (i, j) taken out.
    """

    text: str
    spans: list[tuple[int, int]]
    length: int
    encoding: Any = None
    sequences: int = 1
    source: Measured | None = None
    cut: tuple[int, int] | None = None
    _tokens: tuple[Any, Any] | None = None

    def tokens(self) -> tuple[Any, Any]:
        """``(input_ids, labels)`` as int32 arrays (labels copy the ids inside the assistant spans)."""
        if self._tokens is None:
            if self.source is None or self.cut is None:
                self._tokens = labels_for_encoding(self.encoding, self.spans)
            else:
                import numpy as np

                (ids, labels), (i, j) = self.source.tokens(), self.cut
                self._tokens = np.concatenate([ids[:i], ids[j:]]), np.concatenate([labels[:i], labels[j:]])
        return self._tokens

    def ids(self) -> Any:
        return self.tokens()[0]


def _exchange_starts(messages: list[dict[str, Any]]) -> list[int]:
    return [i for i, m in enumerate(messages) if m["role"] == "user"]


@dataclass
class _Shape:
    """How one row is measured: the conversation that may lose its oldest exchanges, and what it must hold.

    ``endings`` are appended to the conversation for each sequence the trainer will see: a preference
    row is two sequences (prompt + chosen, prompt + rejected) and both must fit; other rows are one.
    ``tail`` is kept in the stored conversation but not measured: the reference answer of an SFT row
    used as a GRPO/PPO prompt, which the trainer reads as a reward target and never tokenizes.
    """

    head: list[dict[str, Any]]
    body: list[dict[str, Any]]
    endings: list[list[dict[str, Any]]]
    tail: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None

    @classmethod
    def of(cls, row: dict[str, Any], settings: TokenizeSettings) -> _Shape:
        messages = json.loads(row["messages"])
        tail: list[dict[str, Any]] = []
        if settings.generation and messages and messages[-1]["role"] == "assistant":
            messages, tail = messages[:-1], messages[-1:]
        answers = ("chosen", "rejected") if settings.method in PAIRED_METHODS else ("chosen",)
        endings = [[json.loads(row[key])] for key in answers if row.get(key)] or [[]]
        head = [m for m in messages[:1] if m["role"] == "system"]
        return cls(head, messages[len(head) :], endings, tail, json.loads(row["tools"]) or None)

    @property
    def starts(self) -> list[int]:
        return _exchange_starts(self.body)

    def sequences(self, start: int) -> list[list[dict[str, Any]]]:
        prompt = self.head + self.body[start:]
        return [prompt + ending for ending in self.endings]

    def kept(self, start: int) -> list[dict[str, Any]]:
        """The stored conversation once the exchanges before ``start`` are dropped."""
        return self.head + self.body[start:] + self.tail


def _spliced(whole: Measured | None, text: str, spans: list[tuple[int, int]], added: AddedTokens | None
             ) -> Measured | None:  # fmt: skip
    """``text`` measured from the tokens of ``whole`` (the same row before any exchange was dropped)."""
    if whole is None or added is None or whole.sequences != 1 or whole.encoding is None:
        return None
    cut = splice(whole.text, whole.encoding, whole.ids(), whole.spans, text, spans, added)
    if cut is None:
        return None
    i, j = cut
    return Measured(text, spans, i + len(whole.encoding) - j, source=whole, cut=cut)


def _measure(
    tokenizer: Any,
    items: list[tuple[_Shape, int]],
    settings: TokenizeSettings,
    wholes: list[Measured] | None = None,
    added: AddedTokens | None = None,
) -> list[Measured | str]:
    """Each (shape, start) rendered and tokenized, every sequence of every row in one tokenizer call.

    With ``wholes`` (each row measured whole), a candidate that is its whole text with a stretch taken
    out at special tokens is measured from those tokens instead (:mod:`gym.data.splice`).
    """
    results: list[Measured | str | None] = []
    plans: list[list[tuple[str, list[tuple[int, int]]]]] = []
    texts: list[str] = []
    for number, (shape, start) in enumerate(items):
        rendered = [
            _render(tokenizer, sequence, shape.tools, settings) for sequence in shape.sequences(start)
        ]
        failed = next((item for item in rendered if isinstance(item, str)), None)
        if failed is not None:
            results.append(failed)
            continue
        if len(rendered) == 1 and wholes is not None:
            text, spans = rendered[0]  # type: ignore[misc]
            spliced = _spliced(wholes[number], text, spans, added)
            if spliced is not None:
                results.append(spliced)
                continue
        results.append(None)
        plans.append(rendered)  # type: ignore[arg-type]
        texts.extend(text for text, _ in rendered)  # type: ignore[misc]
    encodings = iter(encode_texts(tokenizer, texts))
    plan_iter = iter(plans)
    measured: list[Measured | str] = []
    for result in results:
        if result is not None:
            measured.append(result)
            continue
        plan = next(plan_iter)
        sequences = [next(encodings) for _ in plan]
        (text, spans), first = plan[0], sequences[0]
        measured.append(Measured(text, spans, max(len(e) for e in sequences), first, len(plan)))
    return measured


class _Fit:
    """The search for one over-long row's longest suffix of whole exchanges that fits.

    The last exchange alone is tried first (most over-long rows stop there); otherwise a binary search
    finds the fewest oldest exchanges to drop, so a long conversation costs O(log turns) renders
    rather than one per turn. :func:`_fit_rows` runs the searches of many rows in lockstep, so each
    round tokenizes its candidates in one batch call (candidates that :mod:`gym.data.splice` can
    measure from the whole row's tokens are not tokenized at all), and labels only the winner.
    """

    def __init__(self, shape: _Shape, whole: Measured) -> None:
        self.shape = shape
        self.whole = whole
        self.starts = shape.starts
        self.best: tuple[Measured, int] | None = None
        self.status = TOO_LONG
        self.low, self.high = 1, len(self.starts) - 1  # the answer lies in [low, high]
        self.next: int | None = len(self.starts) - 1 if len(self.starts) >= 2 else None

    @property
    def start(self) -> int:
        assert self.next is not None
        return self.starts[self.next]

    def record(self, result: Measured | str) -> None:
        """The outcome of trying ``self.next``: its measurement, or why it does not fit."""
        if self.best is None:  # the first try: the last exchange alone
            if isinstance(result, str):
                self.status, self.next = result, None
                return
            self.best, self.status = (result, self.start), TRUNCATED
        elif isinstance(result, str):
            self.low = (self.next or 0) + 1
        else:
            self.best, self.high = (result, self.start), self.next
        self.next = (self.low + self.high) // 2 if self.low < self.high else None

    def result(self) -> tuple[Any, Any, str, int]:
        """(ids, labels, status, start of the kept exchanges)."""
        if self.best is None:
            return [], [], self.status, 0
        measured, start = self.best
        ids, labels = measured.tokens()
        return ids, labels, self.status, start


def _fit_rows(
    tokenizer: Any, shapes: list[_Shape], wholes: list[Measured], settings: TokenizeSettings, too_long: str
) -> list[tuple[list[int], list[int], str, int]]:
    """Tokens of the longest suffix of whole exchanges whose every sequence fits, per row (system kept).

    Called only for rows already known to be too long whole; see :class:`_Fit`.
    """
    fits = [_Fit(shape, whole) for shape, whole in zip(shapes, wholes, strict=True)]
    added = AddedTokens.of(tokenizer) if fits else None
    while todo := [fit for fit in fits if fit.next is not None]:
        measured = _measure(
            tokenizer, [(fit.shape, fit.start) for fit in todo], settings, [fit.whole for fit in todo], added
        )
        for fit, item in zip(todo, measured, strict=True):
            fit.record(item if isinstance(item, str) or item.length <= settings.limit else too_long)
    results = [fit.result() for fit in fits]
    return [
        (ids, labels, too_long if status == TOO_LONG else status, start)
        for ids, labels, status, start in results
    ]


def _render(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    settings: TokenizeSettings,
) -> tuple[str, list[tuple[int, int]]] | str:
    """The rendered text and assistant spans, or the failure status when the template rejects it.

    Prompts for generation (GRPO/PPO) are rendered as the trainer renders them, with the generation
    prompt, and carry no spans: nothing in them is trained on.
    """
    try:
        if settings.generation:
            text = render_chat(
                tokenizer,
                messages,
                settings.template,
                tools,
                add_generation_prompt=True,
                **settings.template_kwargs,
            )
            return text, []
        return assistant_spans(
            tokenizer, messages, settings.template, tools, settings.end_of_turn, **settings.template_kwargs
        )
    except Exception as error:  # a template that rejects the conversation (role order, content type...)
        return f"{TEMPLATE_FAILED}: {str(error)[:120]}"


def _text_blocks(ids: list[int], tokenizer: Any, max_length: int) -> list[dict[str, Any]]:
    if tokenizer.eos_token_id is not None:
        ids = [*ids, tokenizer.eos_token_id]
    blocks = [ids[i : i + max_length] for i in range(0, len(ids), max_length)]
    status = OK if len(blocks) == 1 else "split into blocks"
    return [{"input_ids": b, "labels": list(b), "status": status} for b in blocks]


def _with_status(ids: Any, labels: Any, status: str, method: str) -> dict[str, Any]:
    import numpy as np

    labels = np.asarray(labels, dtype=np.int32)
    loss_tokens = _loss_tokens(labels)
    if status in (OK, TRUNCATED) and method in ("sft", "dpo", "rm", "kto") and loss_tokens == 0:
        status = NO_LOSS
    return {"input_ids": np.asarray(ids, dtype=np.int32), "labels": labels, "status": status,
            "loss_tokens": loss_tokens}  # fmt: skip


def _loss_tokens(labels: Any) -> int:
    import numpy as np

    return int(np.count_nonzero(np.asarray(labels) != IGNORE_INDEX))


def tokenize_rows(
    tokenizer: Any, rows: list[dict[str, Any]], settings: TokenizeSettings
) -> list[list[dict[str, Any]]]:
    """Tokenized results for each row (text may become several blocks; a skipped row has a bad status).

    All rows of a batch go through one fast-tokenizer call (Rust, multi-threaded); only rows longer
    than the limit take the slow path that re-renders them without their oldest exchanges. Every
    result carries ``full_length``, the row's longest sequence before any exchange was dropped (what
    ``max_length`` would have to be to keep it whole), and ``messages``, the conversation as kept.
    """
    if settings.method == "pt":
        encoded = tokenizer([row["text"] for row in rows], add_special_tokens=False)["input_ids"]
        return [_text_blocks(ids, tokenizer, settings.max_length) for ids in encoded]
    too_long = TOO_LONG_PROMPT if settings.generation else TOO_LONG
    shapes = [_Shape.of(row, settings) for row in rows]
    whole = _measure(tokenizer, [(shape, 0) for shape in shapes], settings)
    results: list[list[dict[str, Any]]] = []
    over_long: list[int] = []  # rows to fit by dropping their oldest exchanges, all together at the end
    for number, (shape, item) in enumerate(zip(shapes, whole, strict=True)):
        if isinstance(item, str):
            results.append([{"input_ids": [], "labels": [], "status": item, "full_length": 0}])
            continue
        if item.length <= settings.limit:
            result = _with_status(*item.tokens(), OK, settings.method)
        elif len(shape.starts) < 2:
            result = _with_status([], [], too_long, settings.method)  # nothing older to drop
        else:
            over_long.append(number)
            result = {}
        results.append([{**result, "full_length": item.length}])
    fitted = _fit_rows(
        tokenizer,
        [shapes[n] for n in over_long],
        [whole[n] for n in over_long],
        settings,
        too_long,  # type: ignore[misc]
    )
    for number, (ids, labels, status, start) in zip(over_long, fitted, strict=True):
        kept = {"messages": json.dumps(shapes[number].kept(start), ensure_ascii=False)} if len(ids) else {}
        results[number][0].update(_with_status(ids, labels, status, settings.method), **kept)
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
    columns = [*names, "input_ids", "labels", "length", "full_length", "loss_tokens", "status"]
    out: dict[str, list[Any]] = {name: [] for name in dict.fromkeys(columns)}
    for row, results in zip(rows, tokenize_rows(tokenizer, rows, settings), strict=True):
        for result in results:
            for name in names:
                out[name].append(result.get(name, row[name]))  # ``messages``: as kept after fitting
            out["input_ids"].append(np.asarray(result["input_ids"], dtype=np.int32))  # one Arrow type for all
            out["labels"].append(np.asarray(result["labels"], dtype=np.int32))
            out["length"].append(len(result["input_ids"]))
            out["full_length"].append(result.get("full_length", len(result["input_ids"])))
            counted = result.get("loss_tokens")
            out["loss_tokens"].append(_loss_tokens(result["labels"]) if counted is None else counted)
            out["status"].append(result["status"])
    return out
