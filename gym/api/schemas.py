"""Request bodies of the OpenAI routes, validated strictly by pydantic (a failure is a 400 naming the field).

Strict on purpose: OpenAI answers ``"stream": "yes"`` or ``"max_tokens": "8"`` with a 400, and so does
Gym, instead of guessing. A field Gym does not implement is refused with the field named (``param``)
rather than silently ignored; fields that change nothing about the answer (``user``, ``metadata``,
``store``, ...) are accepted. Penalties and ``logit_bias`` are accepted only at their neutral values.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_STOP = 4
MAX_N = 16
MAX_TOP_LOGPROBS = 20  # OpenAI's limit for chat; /v1/completions allows 5
MAX_COMPLETION_LOGPROBS = 5
INT64 = (-(2**63), 2**63 - 1)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Unsupported(ValueError):
    """A well-formed request asking for something this server does not do (a 400 naming ``param``)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


# -- message content ---------------------------------------------------------------------------
class TextPart(Strict):
    type: Literal["text"]
    text: str


class MediaPart(BaseModel):
    """An image, audio or file part: accepted by the schema, judged by :mod:`gym.api.content`."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: Literal["image_url", "input_image", "input_audio", "file", "image", "audio", "video"]


class FunctionCall(Strict):
    name: str
    arguments: str


class ToolCall(Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart | MediaPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None
    reasoning_content: str | None = None


# -- tools -------------------------------------------------------------------------------------
class FunctionDefinition(Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Strict):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(Strict):
    name: str


class NamedToolChoice(Strict):
    type: Literal["function"]
    function: NamedFunction


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    type: Literal["text", "json_object", "json_schema"]


class StreamOptions(Strict):
    include_usage: bool = False
    continuous_usage_stats: bool = False


# -- the two request bodies --------------------------------------------------------------------
class _Sampling(Strict):
    model: str
    temperature: float | None = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float | None = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    n: int | None = Field(default=1, ge=1, le=MAX_N)
    seed: int | None = Field(default=None, ge=INT64[0], le=INT64[1])
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        if len(stops) > MAX_STOP or any(not s for s in stops):
            raise ValueError(f"expected at most {MAX_STOP} non-empty stop strings")
        return stops

    def stop_list(self) -> tuple[str, ...]:
        return tuple(self.stop or ())  # type: ignore[arg-type]

    def wanted_tokens(self) -> int | None:
        return self.max_tokens

    @property
    def choices(self) -> int:
        return self.n or 1

    @property
    def streaming(self) -> bool:
        return bool(self.stream)

    def unsupported(self) -> None:
        """Raise :class:`Unsupported` for a field whose value would change the answer Gym cannot give."""
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name):
                raise Unsupported(name, f"{name}: not supported by this server; omit it or send 0")
        if self.logit_bias:
            raise Unsupported("logit_bias", "logit_bias: not supported by this server; omit it")
        if self.stream_options is not None and not self.stream:
            raise Unsupported("stream_options", "stream_options: only allowed when stream is true")


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    modalities: list[Literal["text"]] | None = None

    def wanted_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def logprob_count(self) -> int | None:
        """None: no logprobs; k: the sampled token's logprob and the ``k`` most likely alternatives."""
        return (self.top_logprobs or 0) if self.logprobs else None

    def unsupported(self) -> None:
        super().unsupported()
        if self.top_logprobs is not None and not self.logprobs:
            raise Unsupported("top_logprobs", "top_logprobs: requires logprobs to be true")
        if self.response_format is not None and self.response_format.type != "text":
            raise Unsupported(
                "response_format",
                f"response_format: type {self.response_format.type!r} is not supported by this server "
                "(constrained decoding is not implemented); omit response_format or use type 'text'",
            )
        choice = self.tool_choice
        if choice is not None and not self.tools and choice != "none":
            raise Unsupported("tool_choice", "tool_choice: requires tools")
        names = {tool.function.name for tool in self.tools or []}
        if isinstance(choice, NamedToolChoice) and self.tools and choice.function.name not in names:
            raise Unsupported(
                "tool_choice", f"tool_choice: names function {choice.function.name!r}, which is not in tools"
            )


class CompletionRequest(_Sampling):
    prompt: str | list[str]
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI's default for /v1/completions
    logprobs: int | None = Field(default=None, ge=0, le=MAX_COMPLETION_LOGPROBS)
    echo: bool | None = False
    best_of: int | None = Field(default=None, ge=1, le=MAX_N)
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str:
        if isinstance(value, list):
            if len(value) != 1:
                raise ValueError("expected one prompt (a string or a list of one string)")
            value = value[0]
        if not value:
            raise ValueError("the prompt is empty; send at least one character")
        return value

    def logprob_count(self) -> int | None:
        return self.logprobs

    def unsupported(self) -> None:
        super().unsupported()
        if self.echo:
            raise Unsupported("echo", "echo: not supported by this server; omit it or send false")
        if self.best_of not in (None, 1, self.n):
            raise Unsupported("best_of", "best_of: only best_of equal to n is supported")
        if self.suffix:
            raise Unsupported("suffix", "suffix: not supported by this server (no fill-in-the-middle)")


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error JSON: what the official client parses into ``APIStatusError``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
