"""Thin vLLM and SGLang adapters behind :class:`gym.api.backend.Backend`, used when installed.

Both engines batch and page their own KV cache; Gym only maps its request and chunk types onto
theirs. Selecting one without its package installed fails at once with an actionable message
instead of an ImportError deep in a request. (Neither runs on CPU-only machines; the test suite
checks only that message.)
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

from gym.api.backend import BackendUnavailable, Chunk, SamplingParams, Stats, TokenizerPrompts
from gym.api.loading import ModelSource

_ids = itertools.count()


def _require(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise BackendUnavailable(
            f"--backend {extra} needs the '{extra}' package, which is not installed in this environment "
            f"(pip install {extra}; it needs a CUDA GPU). Use --backend transformers to serve without it."
        ) from None


class _EngineAdapter(TokenizerPrompts):
    """Shared tokenizer handling: chat templates come from the served model's own tokenizer."""

    name = "engine"

    def __init__(self, source: ModelSource) -> None:
        from transformers import AutoConfig, AutoTokenizer

        self.source, self.model_id = source, source.model_id
        self.tokenizer = AutoTokenizer.from_pretrained(source.tokenizer_path)
        config = AutoConfig.from_pretrained(source.base)
        self.context_length = getattr(config, "max_position_embeddings", 2048)
        self._stats = Stats()

    def stats(self) -> dict[str, Any]:
        return self._stats.as_dict()


class VLLMBackend(_EngineAdapter):
    name = "vllm"

    @classmethod
    def from_source(cls, source: ModelSource, **_: Any) -> VLLMBackend:
        _require("vllm", "vllm")
        return cls(source)

    def __init__(self, source: ModelSource) -> None:
        super().__init__(source)
        from vllm import AsyncEngineArgs, AsyncLLMEngine

        args = AsyncEngineArgs(
            model=source.base, tokenizer=source.tokenizer_path, enable_lora=bool(source.adapter)
        )
        self.engine = AsyncLLMEngine.from_engine_args(args)
        self.lora = None
        if source.adapter:
            from vllm.lora.request import LoRARequest

            self.lora = LoRARequest("adapter", 1, source.adapter)

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, n: int = 1
    ) -> AsyncIterator[Chunk]:
        from vllm import SamplingParams as VSampling

        self._stats.requests += 1
        sampling = VSampling(
            n=n, temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
            stop=list(params.stop) or None, seed=params.seed,
        )  # fmt: skip
        sent = [0] * n
        request = {"prompt_token_ids": prompt_ids}
        async for output in self.engine.generate(
            request, sampling, f"gym-{next(_ids)}", lora_request=self.lora
        ):
            for choice in output.outputs:
                text = choice.text[sent[choice.index] :]
                sent[choice.index] = len(choice.text)
                yield Chunk(choice.index, text, choice.finish_reason, len(choice.token_ids))

    def close(self) -> None:
        shutdown = getattr(self.engine, "shutdown", None)
        if shutdown:
            shutdown()


class SGLangBackend(_EngineAdapter):
    name = "sglang"

    @classmethod
    def from_source(cls, source: ModelSource, **_: Any) -> SGLangBackend:
        _require("sglang", "sglang")
        return cls(source)

    def __init__(self, source: ModelSource) -> None:
        super().__init__(source)
        import sglang

        lora = {"lora_paths": [source.adapter]} if source.adapter else {}
        self.engine = sglang.Engine(model_path=source.base, tokenizer_path=source.tokenizer_path, **lora)

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, n: int = 1
    ) -> AsyncIterator[Chunk]:
        self._stats.requests += 1
        sampling = {
            "temperature": params.temperature, "top_p": params.top_p, "max_new_tokens": params.max_tokens,
            "stop": list(params.stop) or None, "n": 1,
        }  # fmt: skip
        for index in range(n):  # one stream per choice keeps chunk order simple
            extra = {"sampling_seed": params.seed + index} if params.seed is not None else {}
            stream = await self.engine.async_generate(
                input_ids=prompt_ids, sampling_params={**sampling, **extra}, stream=True
            )
            sent = 0
            async for item in stream:
                text = item["text"]
                meta = item.get("meta_info", {})
                finish = meta.get("finish_reason")
                reason = finish.get("type") if isinstance(finish, dict) else finish
                yield Chunk(index, text[sent:], reason, meta.get("completion_tokens", 0))
                sent = len(text)

    def close(self) -> None:
        self.engine.shutdown()
