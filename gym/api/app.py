"""The FastAPI app factory: OpenAI-compatible routes over any :class:`gym.api.backend.Backend`.

(No ``from __future__ import annotations`` here: FastAPI resolves the route annotations at runtime,
and some of them are imported inside :func:`create_app` to keep fastapi out of `gym --help`.)

`gym serve` runs it under uvicorn; the generated Space mounts its Gradio chat on the same app, so
the API a user tests locally is byte for byte the one the Space serves.
"""

import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from gym.api.backend import Backend, Chunk, SamplingParams
from gym.api.schemas import ChatCompletionRequest, CompletionRequest, error_body

DEFAULT_MAX_TOKENS = 1024


class APIError(Exception):
    def __init__(
        self, status: int, message: str, type_: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.body = status, error_body(message, type_, param, code)


def create_app(backend: Backend, api_key: str | None = None, default_max_tokens: int = DEFAULT_MAX_TOKENS,
               system_prompt: str | None = None):  # fmt: skip
    """Build the app. ``api_key``: when set, /v1 routes need ``Authorization: Bearer <key>``.

    ``system_prompt`` (a training-free GRPO experience library, `gym serve --experiences`) is merged
    into every chat conversation by :func:`gym.train.experiences.with_experiences`.
    """
    from contextlib import asynccontextmanager

    from fastapi import Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        backend.close()

    app = FastAPI(title=f"Gym · {backend.model_id}", lifespan=lifespan)
    app.state.backend = backend
    created = int(time.time())

    @app.exception_handler(APIError)
    async def _api_error(_request: Request, error: APIError):
        return JSONResponse(error.body, status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, error: RequestValidationError):
        first = error.errors()[0] if error.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = ".".join(loc) or None
        message = (
            f"{param}: {first.get('msg', 'invalid request')}"
            if param
            else first.get("msg", "invalid request")
        )
        return JSONResponse(
            error_body(message, "invalid_request_error", param, "invalid_value"), status_code=400
        )

    @app.exception_handler(HTTPException)
    async def _http(_request: Request, error: HTTPException):
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(error.detail), kind), status_code=error.status_code)

    async def authorize(request: Request) -> None:
        if not api_key:
            return
        header = request.headers.get("authorization", "")
        given = header[7:] if header.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(given.encode(), api_key.encode()):
            raise APIError(
                401, "Invalid or missing API key.", "authentication_error", None, "invalid_api_key"
            )

    def model_card() -> dict[str, Any]:
        return {"id": backend.model_id, "object": "model", "created": created, "owned_by": "gym"}

    def check_model(name: str) -> None:
        if name != backend.model_id:
            raise APIError(
                404, f"The model '{name}' does not exist; this server serves '{backend.model_id}'.",
                "invalid_request_error", "model", "model_not_found",
            )  # fmt: skip

    def sampling(body: Any, prompt_len: int, param: str) -> SamplingParams:
        room = backend.context_length - prompt_len
        wanted = body.wanted_tokens()
        if room < 1 or (wanted is not None and wanted > room):
            raise APIError(
                400,
                f"This model's maximum context length is {backend.context_length} tokens; the prompt has "
                f"{prompt_len} tokens and {wanted or 1} more were requested.",
                "invalid_request_error", param, "context_length_exceeded",
            )  # fmt: skip
        return SamplingParams(
            max_tokens=wanted or min(room, default_max_tokens),
            temperature=body.temperature,
            top_p=body.top_p,
            stop=body.stop_list(),
            seed=body.seed,
        )

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": backend.model_id, "backend": backend.name, **backend.stats()}

    @app.get("/v1/models", dependencies=[Depends(authorize)])
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{name:path}", dependencies=[Depends(authorize)])
    async def model(name: str) -> dict[str, Any]:
        check_model(name)
        return model_card()

    @app.post("/v1/chat/completions", dependencies=[Depends(authorize)])
    async def chat(body: ChatCompletionRequest):
        check_model(body.model)
        messages = [m.as_template_message() for m in body.messages]
        images: list[Any] = []
        if getattr(backend, "accepts_images", False):  # a VL model: image parts kept (gym/api/vision.py)
            from gym.api.vision import split_images

            try:
                messages, images = split_images(body.messages)
            except ValueError as error:
                raise APIError(400, str(error), "invalid_request_error", "messages") from None
        if system_prompt:
            from gym.train.experiences import with_experiences

            messages = with_experiences(messages, system_prompt)
        try:
            prompt = backend.encode_chat(messages)
            length = backend.check_images(prompt, images) if images else len(prompt)
        except ValueError as error:
            raise APIError(400, str(error), "invalid_request_error", "messages") from None
        params = sampling(body, length, "messages")
        meta = Meta("chatcmpl", "chat.completion", backend.model_id, length, body.n)
        stream = backend.generate(prompt, params, n=body.n, **({"images": images} if images else {}))
        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                sse(meta, stream, chat=True, usage=usage), media_type="text/event-stream"
            )
        return await collect(meta, stream, chat=True)

    @app.post("/v1/completions", dependencies=[Depends(authorize)])
    async def completions(body: CompletionRequest):
        check_model(body.model)
        prompt = backend.encode_text(body.prompt)  # type: ignore[arg-type]
        params = sampling(body, len(prompt), "prompt")
        meta = Meta("cmpl", "text_completion", backend.model_id, len(prompt), body.n)
        stream = backend.generate(prompt, params, n=body.n)
        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                sse(meta, stream, chat=False, usage=usage), media_type="text/event-stream"
            )
        return await collect(meta, stream, chat=False)

    return app


class Meta:
    """Ids and counts shared by every chunk of one response."""

    def __init__(self, prefix: str, obj: str, model: str, prompt_tokens: int, n: int) -> None:
        self.id, self.object, self.model = f"{prefix}-{uuid.uuid4().hex}", obj, model
        self.created, self.prompt_tokens, self.n = int(time.time()), prompt_tokens, n
        self.completion_tokens = [0] * n

    def usage(self) -> dict[str, int]:
        done = sum(self.completion_tokens)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": done,
            "total_tokens": self.prompt_tokens + done,
        }

    def envelope(self, choices: list[dict[str, Any]], streaming: bool) -> dict[str, Any]:
        obj = self.object + (".chunk" if streaming and self.object == "chat.completion" else "")
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }


def _choice(chunk: Chunk, chat: bool, delta: bool) -> dict[str, Any]:
    if chat:
        key = "delta" if delta else "message"
        content: dict[str, Any] = {"content": chunk.text} if chunk.text or not delta else {}
        if not delta:
            content["role"] = "assistant"
        return {"index": chunk.index, key: content, "finish_reason": chunk.finish_reason, "logprobs": None}
    return {"index": chunk.index, "text": chunk.text, "finish_reason": chunk.finish_reason, "logprobs": None}


async def collect(meta: Meta, stream: AsyncIterator[Chunk], chat: bool) -> dict[str, Any]:
    texts: list[list[str]] = [[] for _ in range(meta.n)]
    reasons: list[str | None] = [None] * meta.n
    async for chunk in stream:
        if chunk.error:
            raise APIError(500, chunk.error, "server_error")
        texts[chunk.index].append(chunk.text)
        meta.completion_tokens[chunk.index] = chunk.completion_tokens
        reasons[chunk.index] = chunk.finish_reason or reasons[chunk.index]
    choices = [_choice(Chunk(i, "".join(texts[i]), reasons[i]), chat, delta=False) for i in range(meta.n)]
    return {**meta.envelope(choices, streaming=False), "usage": meta.usage()}


async def sse(meta: Meta, stream: AsyncIterator[Chunk], chat: bool, usage: bool) -> AsyncIterator[bytes]:
    def event(data: dict[str, Any]) -> bytes:
        return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

    if chat:
        for i in range(meta.n):
            first = {
                "index": i,
                "delta": {"role": "assistant", "content": ""},
                "finish_reason": None,
                "logprobs": None,
            }
            yield event(meta.envelope([first], streaming=True))
    async for chunk in stream:
        if chunk.error:
            yield event(error_body(chunk.error, "server_error"))
            break
        meta.completion_tokens[chunk.index] = chunk.completion_tokens
        if not chunk.text and chunk.finish_reason is None:
            continue
        yield event(meta.envelope([_choice(chunk, chat, delta=True)], streaming=True))
    if usage:
        yield event({**meta.envelope([], streaming=True), "usage": meta.usage()})
    yield b"data: [DONE]\n\n"
