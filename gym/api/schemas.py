"""Request bodies of the OpenAI routes, validated by pydantic (a failure becomes a 400, OpenAI-shaped).

Only what Gym implements is accepted with meaning; other OpenAI fields (``presence_penalty``,
``user``, ...) are tolerated and ignored so unchanged clients keep working.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_STOP = 4
MAX_N = 16


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = "text"
    text: str = ""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    def as_template_message(self) -> dict[str, str]:
        content = self.content
        if isinstance(content, list):
            content = "".join(part.text for part in content if part.type == "text")
        role = "system" if self.role == "developer" else self.role
        return {"role": role, "content": content or ""}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=MAX_N)
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None

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


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def wanted_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    prompt: str | list[str]
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI's default for /v1/completions

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str:
        if isinstance(value, list):
            if len(value) != 1:
                raise ValueError("expected one prompt (a string or a list of one string)")
            return value[0]
        return value


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error JSON: what the official client parses into ``APIStatusError``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
