"""alpaca rows: ``instruction`` (+ optional ``input``) is the user turn, ``output`` the answer, with
optional ``system`` and ``history`` ([[prompt, response], ...]) columns. The prompt builder is shared
with plain-string preference rows and the prompt format, which name their columns the same way."""

from __future__ import annotations

from typing import Any

from gym.data.example import Example, Message
from gym.data.formats.base import Context, attach_media, check_answers, maybe_json, require, text_of
from gym.data.report import BadRow


def alpaca_prompt(row: dict[str, Any], ctx: Context, prompt_default: str = "instruction") -> list[Message]:
    """System, history turns and the user turn ``instruction\\ninput`` (LLaMA-Factory's joining)."""
    prompt_column = ctx.column("prompt", prompt_default)
    instruction = text_of(row.get(prompt_column) or "", prompt_column)
    query_column = ctx.column("query", "input")
    query = text_of(row.get(query_column) or "", query_column)
    user = "\n".join(part for part in (instruction, query) if part)
    if not user.strip():
        raise BadRow("missing field", f"no {prompt_column!r} value")
    messages: list[Message] = []
    system = row.get(ctx.column("system", "system"))
    if isinstance(system, str) and system:
        messages.append(Message(role="system", content=ctx.fill(system)))
    history = maybe_json(row.get(ctx.column("history", "history")) or [], "history")
    if not isinstance(history, list):
        raise BadRow("wrong field type", "history should be a list of [prompt, response] pairs")
    for turn, pair in enumerate(history):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise BadRow("wrong field type", f"history item {turn} should be a [prompt, response] pair")
        messages.append(Message(role="user", content=ctx.fill(pair[0])))
        messages.append(Message(role="assistant", content=ctx.fill(pair[1])))
    messages.append(Message(role="user", content=ctx.fill(user)))
    return messages


def convert_alpaca(row: dict[str, Any], ctx: Context) -> Example:
    """One SFT example; history answers are kept as assistant turns (and trained on, as in LLaMA-Factory)."""
    messages = alpaca_prompt(row, ctx)
    response_column = ctx.column("response", "output")
    response = text_of(require(row, response_column), response_column)
    messages.append(Message(role="assistant", content=ctx.fill(response)))
    check_answers(messages)
    return attach_media(Example(messages=messages), row, ctx)
