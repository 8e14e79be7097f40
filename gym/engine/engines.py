"""Thin vLLM and SGLang adapters behind :class:`gym.engine.backend.Backend`, used when installed.

Both engines batch and page their own KV cache; Gym only maps its request and chunk types onto
theirs. Selecting one without its package installed fails at once with an actionable message
instead of an ImportError deep in a request. (Neither runs on CPU-only machines; the test suite
checks only that message.)
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gym.engine.backend import (
    BackendUnavailable,
    Chunk,
    SamplingParams,
    Stats,
    TokenizerPrompts,
    TokenLogprob,
)
from gym.engine.loading import ModelSource
from gym.model.folders import ADAPTER_CONFIG

_ids = itertools.count()
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM's LoRA kernels are built for


def adapter_rank(adapter_dir: str | Path) -> int:
    """The largest LoRA rank in an adapter folder: ``r`` and any per-module ``rank_pattern`` override."""
    config = json.loads((Path(adapter_dir) / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    ranks = [int(config.get("r") or 8), *(int(r) for r in (config.get("rank_pattern") or {}).values())]
    return max(ranks)


def vllm_engine_args(source: ModelSource) -> dict:
    """Keyword arguments of vLLM's ``AsyncEngineArgs`` for ``source``.

    vLLM sizes its LoRA buffers for ``max_lora_rank`` (16 unless told) and refuses a larger adapter at
    the first request; the adapter's own rank, rounded up to a size vLLM supports, is passed instead.
    """
    args: dict = {"model": source.base, "tokenizer": source.tokenizer_path}
    if source.adapter:
        rank = adapter_rank(source.adapter)
        supported = [r for r in VLLM_LORA_RANKS if r >= rank]
        if not supported:
            raise BackendUnavailable(
                f"the adapter's LoRA rank is {rank}, above the largest rank vLLM serves "
                f"({VLLM_LORA_RANKS[-1]}); use --backend transformers, or gym export --merge and serve the merge"
            )
        args.update(enable_lora=True, max_lora_rank=supported[0], max_loras=1)
    return args


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
    supports_logprobs = True

    @classmethod
    def from_source(cls, source: ModelSource, **_: Any) -> VLLMBackend:
        _require("vllm", "vllm")
        return cls(source)

    def __init__(self, source: ModelSource) -> None:
        super().__init__(source)
        from vllm import AsyncEngineArgs, AsyncLLMEngine

        args = AsyncEngineArgs(**vllm_engine_args(source))
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
            stop=list(params.stop) or None, seed=params.seed, logprobs=params.logprobs,
            skip_special_tokens=params.skip_special_tokens,
        )  # fmt: skip
        sent, sent_lp = [0] * n, [0] * n
        request = {"prompt_token_ids": prompt_ids}
        async for output in self.engine.generate(
            request, sampling, f"gym-{next(_ids)}", lora_request=self.lora
        ):
            for choice in output.outputs:
                i = choice.index
                text = choice.text[sent[i] :]
                sent[i] = len(choice.text)
                logprobs = None
                if params.logprobs is not None and choice.logprobs is not None:
                    logprobs = [
                        self._token_logprob(token, step, params.logprobs)
                        for token, step in zip(
                            choice.token_ids[sent_lp[i] :], choice.logprobs[sent_lp[i] :], strict=False
                        )
                    ]
                    sent_lp[i] = len(choice.logprobs)
                yield Chunk(i, text, choice.finish_reason, len(choice.token_ids), logprobs=logprobs)

    def _token_logprob(self, token: int, step: dict, k: int) -> TokenLogprob:
        """vLLM's ``{token_id: Logprob}`` for one position as Gym's :class:`TokenLogprob`."""
        piece = lambda t: self.tokenizer.decode([t], skip_special_tokens=False)  # noqa: E731
        ranked = sorted(step.items(), key=lambda item: -item[1].logprob)[:k]
        return TokenLogprob(
            piece(token), step[token].logprob, tuple((piece(t), lp.logprob) for t, lp in ranked)
        )

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
            "stop": list(params.stop) or None, "n": 1, "skip_special_tokens": params.skip_special_tokens,
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
