"""The door: every request body is read, sized, decoded and validated here before any work is queued.

What is refused here can never reach the batch worker, where one bad sequence would share a step with
every other request in flight. Each refusal is OpenAI's error shape naming the field (``param``):

* a body over the size limit: 413, read no further than the limit (no 50 MB string in memory);
* not JSON, or JSON that is not an object: 400;
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
    """JSON bytes to a validated request model, or a :class:`RequestRejected` naming the field."""
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise RequestRejected(400, "The request body is not valid UTF-8.") from None
    except (json.JSONDecodeError, RecursionError) as error:
        detail = error.msg if isinstance(error, json.JSONDecodeError) else "nested too deeply"
        raise RequestRejected(400, f"The request body is not valid JSON ({detail}).") from None
    if not isinstance(data, dict):
        raise RequestRejected(400, "The request body must be a JSON object.")
    where = surrogate_path(data)
    if where is not None:
        raise RequestRejected(
            400, f"{where or 'body'}: contains a lone UTF-16 surrogate, which is not valid text.", param=where
        )
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


def surrogate_path(value: Any, path: str = "") -> str | None:
    """Where in a decoded JSON value a string (or key) holds a lone surrogate, or None."""
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return where
        elif isinstance(item, dict):
            for key, sub in item.items():
                name = f"{where}.{key}" if where else str(key)
                if _has_surrogate(key):
                    return where
                stack.append((sub, name))
        elif isinstance(item, list):
            stack.extend((sub, f"{where}[{i}]") for i, sub in enumerate(item))
    return None


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
