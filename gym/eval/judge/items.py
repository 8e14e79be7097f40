"""The judge's prompts file (``eval.judge.prompts``): one JSON object a line, checked line by line.

A line holds ``prompt`` (text, sent as one user message) or ``messages`` (a chat: role/content objects,
ending with a user turn), an optional ``reference`` answer and an optional ``category``. Each prompt is
identified by the hash of its messages, which is how answers generated now are matched with the
champion's recorded ones.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym.eval.errors import EvalError

MAX_PROMPTS_BYTES = 50_000_000
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class JudgeItem:
    """One prompt to judge on."""

    messages: list[dict[str, str]] = field(hash=False)
    reference: str | None = None
    category: str | None = None

    @property
    def key(self) -> str:
        """The prompt's identity: the same messages are the same prompt, whatever file holds them."""
        blob = json.dumps(self.messages, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def question(self) -> str:
        """The request as the judge reads it: the text of a single user turn, else the conversation."""
        if len(self.messages) == 1:
            return self.messages[0]["content"]
        return "\n".join(f"{m['role']}: {m['content']}" for m in self.messages)


def read_items(path: Path, shown: str, limit: int = 0) -> list[JudgeItem]:
    """The prompts of ``path`` (``shown`` is how the sentence names it); EvalError naming the line otherwise."""
    try:
        if path.stat().st_size > MAX_PROMPTS_BYTES:
            raise EvalError(
                f"eval.judge.prompts: {shown} is more than {MAX_PROMPTS_BYTES:,} bytes; judge a sample"
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EvalError(
            f"eval.judge.prompts: {shown} does not exist; write one JSON object a line with 'prompt' "
            "(and optionally 'reference'), or fix the path"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else "not UTF-8 text"
        raise EvalError(f"eval.judge.prompts: cannot read {shown} ({why})") from None
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(_item(json.loads(line)))
        except (ValueError, RecursionError) as error:
            why = str(error) if isinstance(error, _BadRow) else "not a JSON object"
            raise EvalError(f"eval.judge.prompts: {shown} line {number}: {why}") from None
        if limit and len(items) == limit:
            break
    if not items:
        raise EvalError(
            f"eval.judge.prompts: {shown} holds no prompt; write one JSON object a line with 'prompt'"
        )
    return items


class _BadRow(ValueError):
    pass


def _item(row: Any) -> JudgeItem:
    if not isinstance(row, dict):
        raise _BadRow("not a JSON object")
    if isinstance(row.get("prompt"), str) and row["prompt"].strip():
        messages = [{"role": "user", "content": row["prompt"]}]
    elif isinstance(row.get("messages"), list) and row["messages"]:
        messages = [_message(m) for m in row["messages"]]
        if messages[-1]["role"] != "user":
            raise _BadRow("'messages' must end with a user turn (the one the models answer)")
    else:
        raise _BadRow("expected 'prompt' (non-empty text) or 'messages' (a non-empty list of chat turns)")
    for name in ("reference", "category"):
        if row.get(name) is not None and not isinstance(row[name], str):
            raise _BadRow(f"{name!r} must be text")
    return JudgeItem(messages, row.get("reference") or None, row.get("category") or None)


def _message(message: Any) -> dict[str, str]:
    if (
        not isinstance(message, dict)
        or message.get("role") not in ROLES
        or not isinstance(message.get("content"), str)
    ):
        raise _BadRow(f"each turn of 'messages' needs a role ({', '.join(ROLES)}) and text content")
    return {"role": message["role"], "content": message["content"]}
