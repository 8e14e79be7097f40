"""The small contract every serving engine meets, and the registry `--backend` picks from.

The HTTP layer (:mod:`gym.api.app`) only ever talks to a :class:`Backend`: it turns a request into
prompt token ids and :class:`SamplingParams`, and reads :class:`Chunk` events back. The batching
transformers engine, vLLM, SGLang and llama.cpp (GGUF files) are interchangeable behind it, so `gym serve` and the Space run
the same routes whatever generates the tokens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class BackendUnavailable(RuntimeError):
    """A backend was selected whose package is not installed (or cannot run on this machine)."""


@dataclass(frozen=True)
class SamplingParams:
    """Per-request decoding settings, already validated by the API layer."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: int | None = None  # None: off; k: the sampled token's logprob plus the k likeliest
    skip_special_tokens: bool = True  # False while parsing tool calls: markers may be special tokens

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log-probability under the model, and the likeliest alternatives."""

    text: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass
class Chunk:
    """A piece of one choice's output; the last chunk of a choice carries ``finish_reason``.

    ``logprobs`` (when asked for) covers the tokens generated since the previous chunk of the choice.
    """

    index: int
    text: str
    finish_reason: str | None = None
    completion_tokens: int = 0
    error: str | None = None
    logprobs: list[TokenLogprob] | None = None


@dataclass
class Stats:
    """Counters shown on /health: they prove that concurrent requests were batched together."""

    requests: int = 0
    active: int = 0
    queued: int = 0
    steps: int = 0
    max_batch_size: int = 0
    generated_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "extra"}
        return {**data, **self.extra}


class TokenizerPrompts:
    """Prompt encoding shared by every backend that holds a Hugging Face tokenizer (``self.tokenizer``).

    The chat template is the one saved with the tokenizer, i.e. the one training used.
    """

    tokenizer: Any

    def encode_chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    continue_with: str = "") -> list[int]:  # fmt: skip
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("this model's tokenizer has no chat template; use /v1/completions instead")
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True, tokenize=False
        )
        return self.tokenizer.encode(text + continue_with, add_special_tokens=False)

    def chat_template_text(self) -> str | None:
        """The Jinja the chat route renders with (tool support and tool-call format are read from it)."""
        template = getattr(self.tokenizer, "chat_template", None)
        if isinstance(template, dict):  # several named templates: the tool one when present
            return template.get("tool_use") or template.get("default")
        return template

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)


class Backend(Protocol):
    """What the HTTP layer needs from an engine."""

    name: str
    model_id: str
    context_length: int

    def encode_chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    continue_with: str = "") -> list[int]:  # fmt: skip
        """Token ids of ``messages`` (and ``tools``) rendered with the model's own chat template, generation
        prompt on, followed by ``continue_with`` (text the answer must start with)."""
        ...

    def chat_template_text(self) -> str | None: ...

    def encode_text(self, text: str) -> list[int]:
        """Token ids of a raw completion prompt."""
        ...

    def generate(self, prompt_ids: list[int], params: SamplingParams, n: int = 1) -> AsyncIterator[Chunk]:
        """Stream chunks of ``n`` choices; cancelling the iterator cancels the generation."""
        ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


BackendFactory = Callable[..., Backend]
BACKENDS: dict[str, BackendFactory] = {}


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make ``--backend NAME`` available; ``factory(source, **options)`` returns a started backend."""
    BACKENDS[name] = factory


def create_backend(name: str, source: Any, **options: Any) -> Backend:
    """Build backend ``name`` for a resolved :class:`gym.engine.loading.ModelSource`."""
    _register_defaults()
    if name not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {name!r}; available: {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name](source, **options)


def _register_defaults() -> None:
    if BACKENDS:
        return

    def transformers(source: Any, **options: Any) -> Backend:
        from gym.engine.batching import TransformersBackend
        from gym.engine.vision import VisionBackend
        from gym.model.folders import is_vision_folder

        if is_vision_folder(source.base):  # image parts need the processor; see gym/engine/vision.py
            return VisionBackend.from_source(source, **options)
        return TransformersBackend.from_source(source, **options)

    def vllm(source: Any, **options: Any) -> Backend:
        from gym.engine.engines import VLLMBackend

        return VLLMBackend.from_source(source, **options)

    def sglang(source: Any, **options: Any) -> Backend:
        from gym.engine.engines import SGLangBackend

        return SGLangBackend.from_source(source, **options)

    def llamacpp(source: Any, **options: Any) -> Backend:
        from gym.engine.llamacpp_backend import LlamaCppBackend

        return LlamaCppBackend.from_source(source, **options)

    register_backend("transformers", transformers)
    register_backend("vllm", vllm)
    register_backend("sglang", sglang)
    register_backend("llamacpp", llamacpp)


BACKEND_NAMES = ("transformers", "vllm", "sglang", "llamacpp")
