"""The FastAPI app factory: OpenAI-compatible routes over any :class:`gym.engine.backend.Backend`.

(No ``from __future__ import annotations`` here: FastAPI resolves the route annotations at runtime,
and some of them are imported inside :func:`create_app` to keep fastapi out of `gym --help`.)

`gym serve` runs it under uvicorn; the generated Space mounts its Gradio chat on the same app, so
the API a user tests locally is byte for byte the one the Space serves.
"""

import asyncio
import hmac
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gym.api.accesslog import redact_access_log
from gym.api.content import accepted_media, template_messages
from gym.api.intake import DEFAULT_MAX_REQUEST_BYTES, RequestRejected, parse_body, read_body
from gym.api.remote_images import FETCH_WORKERS, MAX_REMOTE_IMAGES, FetchPolicy
from gym.api.responses import Meta, Shape, collect, sse
from gym.api.schemas import ChatCompletionRequest, CompletionRequest, NamedToolChoice, error_body
from gym.api.tools.parsers import get_tool_parser, parser_for_template
from gym.engine.backend import Backend, SamplingParams

DEFAULT_MAX_TOKENS = 1024
INLINE_PARSE_BYTES = 16 * 1024
APIError = RequestRejected  # the name other modules knew


def create_app(backend: Backend, api_key: str | None = None, default_max_tokens: int = DEFAULT_MAX_TOKENS,
               system_prompt: str | None = None, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
               tool_parser: str | None = None, fetch_remote_images: bool = False,
               image_fetch: FetchPolicy | None = None):  # fmt: skip
    """Build the app. ``api_key``: when set, /v1 routes need ``Authorization: Bearer <key>``.

    ``system_prompt`` (a training-free GRPO experience library, `gym serve --experiences`) is merged
    into every chat conversation by :func:`gym.train.experiences.with_experiences`.
    ``max_request_bytes``: larger bodies are refused with a 413 before they are read.
    ``tool_parser``: the tool-call format (:data:`gym.api.tools.parsers.TOOL_PARSERS`); None picks it
    from the chat template.
    ``fetch_remote_images``: a VL model's server fetches http(s) ``image_url`` parts itself
    (`gym serve --fetch-remote-images`), under ``image_fetch`` (deadline, allowed non-public hosts;
    :mod:`gym.api.remote_images`) and in a pool of its own, so slow image hosts never hold the threads
    text requests use; otherwise only ``data:`` URLs are accepted.
    Access log lines never show credential query values (:mod:`gym.api.accesslog`).
    """
    from contextlib import asynccontextmanager

    from fastapi import Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException

    try:  # chat templates are Jinja (transformers renders them with jinja2)
        from jinja2 import TemplateError
    except ImportError:  # pragma: no cover - no jinja2, no chat templates either
        TemplateError = ValueError  # noqa: N806

    if tool_parser is not None:
        get_tool_parser(tool_parser)  # an unknown name fails at start-up, not at the first request

    redact_access_log()
    fetch = (image_fetch or FetchPolicy()) if fetch_remote_images else None
    fetch_pool = ThreadPoolExecutor(FETCH_WORKERS, thread_name_prefix="gym-image-fetch") if fetch else None

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        if fetch_pool is not None:
            fetch_pool.shutdown(wait=False, cancel_futures=True)
        backend.close()

    app = FastAPI(title=f"Gym · {backend.model_id}", lifespan=lifespan)
    app.state.backend = backend
    created = int(time.time())

    @app.exception_handler(RequestRejected)
    async def _rejected(_request: Request, error: RequestRejected):
        body = error_body(error.message, error.type, error.param, error.code)
        return JSONResponse(body, status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, error: RequestValidationError):
        first = error.errors()[0] if error.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = ".".join(loc) or None
        message = f"{param}: {first.get('msg', 'invalid request')}" if param else "invalid request"
        return JSONResponse(
            error_body(message, "invalid_request_error", param, "invalid_value"), status_code=400
        )

    @app.exception_handler(HTTPException)
    async def _http(_request: Request, error: HTTPException):
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(error.detail), kind), status_code=error.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, error: Exception):
        import logging

        logging.getLogger("gym.api").error(
            "request failed", exc_info=error
        )  # for the operator, not the client
        message = f"internal error ({type(error).__name__}); the request was not completed"
        return JSONResponse(error_body(message, "server_error"), status_code=500)

    async def authorize(request: Request) -> None:
        if not api_key:
            return
        header = request.headers.get("authorization", "")
        given = header[7:] if header.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(given.encode("utf-8", "replace"), api_key.encode()):
            raise RequestRejected(
                401, "Invalid or missing API key.", "authentication_error", None, "invalid_api_key"
            )

    def model_card() -> dict[str, Any]:
        return {"id": backend.model_id, "object": "model", "created": created, "owned_by": "gym"}

    def check_model(name: str) -> None:
        if name != backend.model_id:
            raise RequestRejected(
                404, f"The model '{name}' does not exist; this server serves '{backend.model_id}'.",
                "invalid_request_error", "model", "model_not_found",
            )  # fmt: skip

    def sampling(body: Any, prompt_len: int, param: str, **extra: Any) -> SamplingParams:
        if prompt_len < 1:
            raise RequestRejected(400, f"{param}: encodes to no tokens; send some text.", param=param)
        if body.logprob_count() is not None and not getattr(backend, "supports_logprobs", False):
            raise RequestRejected(
                400, f"logprobs: not supported by the {backend.name} backend of this server",
                param="logprobs", code="unsupported_parameter",
            )  # fmt: skip
        room = backend.context_length - prompt_len
        wanted = body.wanted_tokens()
        if room < 1 or (wanted is not None and wanted > room):
            raise RequestRejected(
                400,
                f"This model's maximum context length is {backend.context_length} tokens; the prompt "
                f"({param}) has {prompt_len} tokens and {wanted or 1} more were requested.",
                "invalid_request_error", param, "context_length_exceeded",
            )  # fmt: skip
        return SamplingParams(
            max_tokens=wanted or min(room, default_max_tokens),
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            stop=body.stop_list(),
            seed=body.seed,
            logprobs=body.logprob_count(),
            **extra,
        )

    tokenizer = getattr(backend, "tokenizer", None)
    longest_token = max((len(t) for t in tokenizer.get_vocab()), default=0) if tokenizer is not None else 0

    def surely_too_long(texts: list[str], param: str) -> None:
        """Refuse, without tokenizing, a prompt that cannot fit: no token spells more characters than the
        vocabulary's longest entry, so ``chars / longest`` is a lower bound on its token count."""
        chars = sum(len(t) for t in texts)
        if longest_token and chars > longest_token * backend.context_length:
            raise RequestRejected(
                400, f"This model's maximum context length is {backend.context_length} tokens; the prompt "
                f"({param}) has {chars:,} characters, at least {chars // longest_token:,} tokens.",
                "invalid_request_error", param, "context_length_exceeded",
            )  # fmt: skip

    def tool_setup(body: ChatCompletionRequest) -> tuple[list[dict[str, Any]] | None, Any, str]:
        """Tools for the template, the parser for the answer, and a forced call prefix (tool_choice)."""
        if not body.tools or body.tool_choice == "none":
            return None, None, ""
        template = backend.chat_template_text()
        if not template or "tools" not in template:
            raise RequestRejected(
                400, "tools: this model's chat template has no tool format, so tools cannot be offered "
                "to it (train with a template that has one, e.g. qwen3 or qwen2.5).", param="tools",
                code="unsupported_parameter",
            )  # fmt: skip
        name = tool_parser or parser_for_template(template)
        if name is None:
            raise RequestRejected(
                400, "tools: no tool-call parser recognises this model's chat template; start the server "
                "with --tool-parser NAME (hermes or llama3_json).", param="tools", code="unsupported_parameter",
            )  # fmt: skip
        parser = get_tool_parser(name)
        choice = body.tool_choice
        forced = ""
        if choice == "required":
            forced = parser.forced_prefix(None)
        elif isinstance(choice, NamedToolChoice):
            forced = parser.forced_prefix(choice.function.name)
        return [t.model_dump(exclude_none=True) for t in body.tools], parser, forced

    def shape(body: Any, chat: bool, parser: Any = None, forced: str = "") -> Shape:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return Shape(chat=chat, n=body.choices, tool_parser=parser, forced=forced,
                     logprobs=body.logprob_count() is not None, usage=usage,
                     single_call=body.parallel_tool_calls is False if chat else False)  # fmt: skip

    async def parsed(raw: bytes, model: Any) -> Any:
        """The validated body; a large one is decoded off the event loop so other streams go on meanwhile."""
        if len(raw) <= INLINE_PARSE_BYTES:  # a few milliseconds at most: cheaper than a thread hop
            return parse_body(raw, model)
        return await asyncio.to_thread(parse_body, raw, model)

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
    async def chat(request: Request):
        body = await parsed(await read_body(request, max_request_bytes), ChatCompletionRequest)
        check_model(body.model)
        images: list[Any] = []
        if getattr(backend, "accepts_images", False):  # a VL model: image parts decoded (api/images.py)
            from gym.api.images import image_urls, is_remote, split_images

            remote = sum(is_remote(url) for url in image_urls(body.messages))
            if fetch and remote > MAX_REMOTE_IMAGES:
                raise RequestRejected(
                    400, f"messages: {remote} remote image URLs; this server fetches at most "
                    f"{MAX_REMOTE_IMAGES} per request (send the others as data: URLs).", param="messages",
                )  # fmt: skip
            pool = fetch_pool if fetch and remote else None  # text and data: images keep the default pool
            try:  # off the event loop: decoding (and fetching, when allowed) must not stall other streams
                loop = asyncio.get_running_loop()
                messages, images = await loop.run_in_executor(pool, split_images, body.messages, fetch)
            except ValueError as error:
                raise RequestRejected(400, str(error), param="messages") from None
        else:
            messages = template_messages(body.messages, accepted_media(backend))
        surely_too_long([m["content"] for m in messages if isinstance(m["content"], str)], "messages")
        if system_prompt:
            from gym.train.experiences import with_experiences

            messages = with_experiences(messages, system_prompt)
        tools, parser, forced = tool_setup(body)
        args = (messages,) if tools is None and not forced else (messages, tools, forced)
        try:  # off the event loop: a long prompt must not stall /health or other streams
            prompt = await asyncio.to_thread(backend.encode_chat, *args)
        except (ValueError, TemplateError) as error:  # the template refused it (raise_exception, ...)
            message = f"messages: the model's chat template cannot render this conversation: {error}"
            raise RequestRejected(400, message, param="messages") from None
        try:
            length = backend.check_images(prompt, images) if images else len(prompt)
        except ValueError as error:
            raise RequestRejected(400, str(error), param="messages") from None
        params = sampling(body, length, "messages", skip_special_tokens=parser is None)
        meta = Meta("chatcmpl", "chat.completion", backend.model_id, length, body.choices)
        extra = {"images": images} if images else {}
        return await respond(meta, backend.generate(prompt, params, n=body.choices, **extra),
                             shape(body, True, parser, forced), body.streaming)  # fmt: skip

    @app.post("/v1/completions", dependencies=[Depends(authorize)])
    async def completions(request: Request):
        body = await parsed(await read_body(request, max_request_bytes), CompletionRequest)
        check_model(body.model)
        surely_too_long([body.prompt], "prompt")  # type: ignore[list-item]
        prompt = await asyncio.to_thread(backend.encode_text, body.prompt)  # type: ignore[arg-type]
        params = sampling(body, len(prompt), "prompt")
        meta = Meta("cmpl", "text_completion", backend.model_id, len(prompt), body.choices)
        return await respond(meta, backend.generate(prompt, params, n=body.choices), shape(body, False),
                             body.streaming)  # fmt: skip

    async def respond(meta: Meta, stream: Any, how: Shape, streaming: bool):
        if streaming:
            return StreamingResponse(sse(meta, stream, how), media_type="text/event-stream")
        return await collect(meta, stream, how)

    return app
