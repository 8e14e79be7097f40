"""The door: every request body is read, sized, decoded and validated here before any work is queued.

What is refused here can never reach the batch worker, where one bad sequence would share a step with
every other request in flight. Each refusal is OpenAI's error shape naming the field (``param``):

* a body over the size limit: 413, read no further than the limit (no 50 MB string in memory);
* not JSON, or JSON that is not an object: 400;
* more than :data:`MAX_MESSAGES` messages, :data:`MAX_VALUES` JSON values or :data:`MAX_DEPTH` levels of
  nesting, counted before validation so the refusal costs one decode: 400;
* an integer literal longer than :data:`MAX_INT_DIGITS` digits (``"max_tokens": 999...``): 400 naming it;
* a lone UTF-16 surrogate (``"\\ud800"``), which JSON can spell but no tokenizer can encode: 400;
* a wrong type (strict models: ``"stream": "yes"`` is not coerced) or a value out of range: 400;
* a field Gym does not implement (``response_format`` json, penalties, ...): 400.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gym.api.schemas import Unsupported

DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_MESSAGES = 4096  # per chat request
MAX_VALUES = 100_000  # JSON values (objects, arrays, strings, numbers) in one body
MAX_DEPTH = 64  # nesting levels (tool parameter schemas are the deepest legitimate part)
MAX_INT_DIGITS = 4300  # Python's own int-from-string limit: longer literals cannot even be converted

M = TypeVar("M", bound=BaseModel)


class RequestRejected(Exception):
    """An OpenAI-shaped error answer: status, message, type, param, code."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code


async def read_body(request: Any, limit: int) -> bytes:
    """The raw body, refusing (413) as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise RequestRejected(400, "Content-Length is not a number.") from None
        if size > limit:
            raise too_large(limit)
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(limit: int) -> RequestRejected:
    return RequestRejected(
        413,
        f"The request body is larger than this server's limit of {limit:,} bytes "
        "(gym serve --max-request-mb raises it).",
        code="request_too_large",
    )


def parse_body(raw: bytes, model: type[M]) -> M:
    """JSON bytes to a validated request model, or a :class:`RequestRejected` naming the field.

    The shape is screened (:func:`screen`) before pydantic sees it, so a body of 100k messages costs
    one JSON decode and a count, not 100k validated models."""
    try:
        data = json.loads(raw, parse_int=_bounded_int)
    except UnicodeDecodeError:
        raise RequestRejected(400, "The request body is not valid UTF-8.") from None
    except (json.JSONDecodeError, RecursionError) as error:
        detail = error.msg if isinstance(error, json.JSONDecodeError) else "nested too deeply"
        raise RequestRejected(400, f"The request body is not valid JSON ({detail}).") from None
    if not isinstance(data, dict):
        raise RequestRejected(400, "The request body must be a JSON object.")
    messages = data.get("messages")
    if isinstance(messages, list) and len(messages) > MAX_MESSAGES:
        raise RequestRejected(
            400, f"messages: {len(messages):,} messages; this server accepts at most {MAX_MESSAGES:,} per request.",
            param="messages", code="too_many_messages",
        )  # fmt: skip
    screen(data)
    try:
        body = model.model_validate(data)
    except ValidationError as error:
        raise validation_rejection(error, data) from None
    except RecursionError:
        raise RequestRejected(400, "The request body is nested too deeply.") from None
    try:
        body.unsupported()  # type: ignore[attr-defined]
    except Unsupported as error:
        raise RequestRejected(400, str(error), param=error.param, code="unsupported_parameter") from None
    return body


class _HugeInt:
    """An integer literal too long for Python to convert (its digit count), found later by :func:`screen`."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _bounded_int(text: str) -> int | _HugeInt:
    digits = len(text.lstrip("-"))
    return _HugeInt(digits) if digits > MAX_INT_DIGITS else int(text)


def validation_rejection(error: ValidationError, data: Any) -> RequestRejected:
    first = error.errors(include_url=False)[0]
    param = dotted(first.get("loc", ()), data)
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        return RequestRejected(
            400, f"{param}: unrecognized request argument supplied.", param=param, code="unknown_parameter"
        )
    message = first.get("msg", "invalid value")
    return RequestRejected(
        400, f"{param}: {message}" if param else message, param=param, code="invalid_value"
    )


def dotted(loc: tuple[Any, ...] | list[Any], data: Any) -> str | None:
    """pydantic's error location as OpenAI names a param: ``messages[0].content``.

    The location is followed through the request itself, so the labels pydantic inserts for union
    branches (``str``, ``list[str]``, ``TextPart``) are dropped and an unknown key is still named.
    """
    out, node = "", data
    for part in loc:
        if isinstance(part, int) and isinstance(node, list) and 0 <= part < len(node):
            out, node = out + f"[{part}]", node[part]
        elif isinstance(part, str) and isinstance(node, dict) and part in node:
            out, node = (f"{out}.{part}" if out else part), node[part]
    return out or None


def screen(data: Any) -> None:
    """One bounded walk over the decoded body before any validation: refuse (400) a lone surrogate, an
    integer too long to convert, nesting deeper than :data:`MAX_DEPTH` or more than :data:`MAX_VALUES`
    values, naming where. Paths are spelled only for the refusal (a key may be a megabyte long)."""
    stack: list[_Node] = [_Node(data, None, "", 0)]
    seen = 1
    while stack:
        node = stack.pop()
        item = node.value
        if node.depth > MAX_DEPTH:
            top = node.path().split(".")[0].split("[")[0]  # the field, not a path of 64 keys
            raise RequestRejected(
                400, f"{top}: nested more than {MAX_DEPTH} levels deep; this server's limit.", param=top,
                code="request_too_complex",
            )  # fmt: skip
        if isinstance(item, str):
            if _has_surrogate(item):
                raise _surrogate(node.path())
        elif isinstance(item, _HugeInt):
            where = _cut(node.path())
            raise RequestRejected(
                400, f"{where}: an integer of {item.digits:,} digits; at most {MAX_INT_DIGITS:,} are accepted.",
                param=where, code="invalid_value",
            )  # fmt: skip
        elif isinstance(item, dict | list):
            seen += len(item)
            if seen > MAX_VALUES:
                raise RequestRejected(
                    400, f"The request body holds more than {MAX_VALUES:,} JSON values; this server's limit.",
                    code="request_too_complex",
                )  # fmt: skip
            if isinstance(item, dict):
                for key, sub in item.items():
                    if _has_surrogate(key):
                        raise _surrogate(node.path())
                    stack.append(_Node(sub, node, key, node.depth + 1))
            else:
                stack.extend(_Node(sub, node, i, node.depth + 1) for i, sub in enumerate(item))


class _Node:
    """A value met by :func:`screen`, with its parent and key, so its path can be spelled on demand."""

    __slots__ = ("value", "parent", "key", "depth")

    def __init__(self, value: Any, parent: _Node | None, key: str | int, depth: int) -> None:
        self.value, self.parent, self.key, self.depth = value, parent, key, depth

    def path(self) -> str:
        keys: list[str | int] = []
        node: _Node | None = self
        while node is not None and node.parent is not None:
            keys.append(node.key)
            node = node.parent
        out = ""
        for key in reversed(keys):
            out += f"[{key}]" if isinstance(key, int) else (f"{out and '.'}{key}")
        return out


def _cut(where: str, limit: int = 120) -> str:
    """A path as short as a sentence allows (keys are client text and may be megabytes long)."""
    return where if len(where) <= limit else where[: limit - 1] + "…"


def _surrogate(where: str) -> RequestRejected:
    return RequestRejected(
        400,
        f"{_cut(where) or 'body'}: contains a lone UTF-16 surrogate, which is not valid text.",
        param=_cut(where) or None,
    )


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
