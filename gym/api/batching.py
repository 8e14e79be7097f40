"""The default engine: transformers with iteration-level (continuous) batching on one worker thread.

Requests go into a queue; the worker admits waiting ones between decode steps (prefilling them as
one left-padded batch and splicing their KV cache into the running one), then runs a single forward
pass for every active sequence per step. Finished sequences leave the batch at once, so a short
request never waits for a long one and N concurrent streams cost roughly one forward per token
instead of N. Tokens are handed to each request's asyncio queue as they are produced.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator
from typing import Any

from gym.api.backend import Chunk, SamplingParams, Stats, TokenizerPrompts
from gym.api.loading import ModelSource, load_model_and_tokenizer
from gym.api.sequence import Sequence


def _limit_cpu_threads(model: Any) -> None:
    """On CPU use half the cores for torch (``GYM_TORCH_THREADS`` overrides).

    Measured on 2 cores: with torch's default of every core, its spinning OpenMP workers fight the
    event loop and tokenizer for the CPU and one 64-token reply takes ~3 s instead of ~0.2 s.
    """
    import os

    import torch

    if next(model.parameters()).device.type != "cpu":
        return
    wanted = os.environ.get("GYM_TORCH_THREADS")
    threads = int(wanted) if wanted else max(1, (os.cpu_count() or 2) // 2)
    torch.set_num_threads(threads)


class TransformersBackend(TokenizerPrompts):
    """A :class:`gym.api.backend.Backend` over ``AutoModelForCausalLM`` with continuous batching."""

    name = "transformers"
    supports_logprobs = True

    def __init__(self, model: Any, tokenizer: Any, model_id: str, max_batch_size: int = 32) -> None:
        self.model, self.tokenizer, self.model_id = model, tokenizer, model_id
        self.max_batch_size = max_batch_size
        config = model.config
        limit = getattr(config, "max_position_embeddings", None) or 2048
        tok_limit = getattr(tokenizer, "model_max_length", None)
        self.context_length = min(limit, tok_limit) if tok_limit and tok_limit < 10**8 else limit
        eos = model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_ids = eos_ids
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids or {0})
        _limit_cpu_threads(model)
        self._stats = Stats()
        self._inbox: queue.Queue[Sequence | None] = queue.Queue()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._run, name="gym-batching", daemon=True)
        self._worker.start()

    @classmethod
    def from_source(cls, source: ModelSource, device: str | None = None, max_batch_size: int = 32, **_: Any):
        model, tokenizer = load_model_and_tokenizer(source, device=device)
        return cls(model, tokenizer, source.model_id, max_batch_size=max_batch_size)

    # -- the Backend protocol -------------------------------------------------------------------
    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, n: int = 1
    ) -> AsyncIterator[Chunk]:
        loop = asyncio.get_running_loop()
        out: asyncio.Queue[Chunk] = asyncio.Queue()
        seqs = [
            Sequence(
                index=i,
                prompt_ids=list(prompt_ids),
                params=params,
                seed=None if params.seed is None else params.seed + i,
                emit=lambda chunk: loop.call_soon_threadsafe(out.put_nowait, chunk),
                tokenizer=self.tokenizer,
                eos_ids=self.eos_ids,
            )
            for i in range(n)
        ]
        self._stats.requests += 1
        for seq in seqs:
            self._inbox.put(seq)
        remaining = n
        try:
            while remaining:
                chunk = await out.get()
                if chunk.finish_reason is not None or chunk.error is not None:
                    remaining -= 1
                yield chunk
        finally:
            for seq in seqs:
                seq.cancelled = True  # a disconnected client frees its batch slots at the next step

    def stats(self) -> dict[str, Any]:
        self._stats.queued = self._inbox.qsize()
        return self._stats.as_dict()

    def close(self) -> None:
        self._stop.set()
        self._inbox.put(None)
        self._worker.join(timeout=10)

    # -- the worker -----------------------------------------------------------------------------
    def _run(self) -> None:
        import torch

        from gym.api.kvbatch import RunningBatch

        batch = RunningBatch(self.model, self.pad_id)
        with torch.inference_mode():
            while not self._stop.is_set():
                waiting = self._take(block=not batch.seqs)
                try:
                    if waiting:
                        self._admit(batch, waiting)
                    if batch.seqs:
                        self._stats.max_batch_size = max(self._stats.max_batch_size, len(batch.seqs))
                        batch.step()
                        self._stats.steps += 1
                        self._stats.generated_tokens += len(batch.seqs)
                        batch.retire()
                except Exception as error:  # noqa: BLE001 - a failed decode step must not kill the server
                    for seq in batch.seqs + [s for s in waiting if s not in batch.seqs]:
                        seq.fail(f"generation failed: {type(error).__name__}")
                    batch = RunningBatch(self.model, self.pad_id)
                self._stats.active = len(batch.seqs)

    def _admit(self, batch: Any, waiting: list[Sequence]) -> None:
        """Prefill ``waiting`` together; when that fails, each alone, so only the culprit fails."""
        vocab = self.model.get_input_embeddings().num_embeddings
        good = []
        for seq in waiting:
            if not seq.prompt_ids or not all(0 <= t < vocab for t in seq.prompt_ids):
                seq.fail("the prompt is empty or holds token ids this model does not have")
            else:
                good.append(seq)
        if not good:
            return
        try:
            batch.admit(good)
        except Exception as error:  # noqa: BLE001 - find the sequence that cannot be prefilled
            if len(good) == 1:
                good[0].fail(f"generation failed for this request: {type(error).__name__}")
                return
            for seq in good:
                self._admit(batch, [seq])

    def _take(self, block: bool) -> list[Sequence]:
        """Waiting sequences to admit now: block for the first one only when the batch is idle."""
        taken: list[Sequence] = []
        room = self.max_batch_size - self._stats.active
        try:
            item = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
        except queue.Empty:
            return taken
        while item is not None:
            if not item.cancelled:
                taken.append(item)
            if len(taken) >= max(room, 1):
                break
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
        return taken
