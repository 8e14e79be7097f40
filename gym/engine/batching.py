"""The default engine: transformers with iteration-level (continuous) batching on one worker thread.

Requests go into a queue; the worker admits waiting ones between decode steps (prefilling them as
one left-padded batch and splicing their KV cache into the running one), then runs a single forward
pass for every active sequence per step. Finished sequences leave the batch at once, so a short
request never waits for a long one and N concurrent streams cost roughly one forward per token
instead of N. Tokens are handed to the requests' asyncio queues after each step, in one event-loop wake-up.
Prompts that start like a recent one (a shared system prompt, earlier turns of a chat) reuse its
KV cache (:mod:`gym.engine.prefixcache`).
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from gym.engine.attention import use_gqa_sdpa
from gym.engine.backend import TokenizerPrompts
from gym.engine.cputhreads import ThreadPolicy
from gym.engine.handoff import WorkerHandoff
from gym.engine.loading import ModelSource, load_model_and_tokenizer
from gym.engine.prefixcache import PrefixCache
from gym.engine.sequence import Sequence


class TransformersBackend(WorkerHandoff, TokenizerPrompts):
    """A :class:`gym.engine.backend.Backend` over ``AutoModelForCausalLM`` with continuous batching."""

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
        on_cpu = next(model.parameters()).device.type == "cpu"
        self._threads = ThreadPolicy() if on_cpu else None
        if on_cpu:
            use_gqa_sdpa(model)
        self.prefix_cache = PrefixCache()
        self._open_handoff()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._run, name="gym-batching", daemon=True)
        self._worker.start()

    @classmethod
    def from_source(cls, source: ModelSource, device: str | None = None, max_batch_size: int = 32, **_: Any):
        model, tokenizer = load_model_and_tokenizer(source, device=device)
        return cls(model, tokenizer, source.model_id, max_batch_size=max_batch_size)

    def stats(self) -> dict[str, Any]:
        self._stats.queued = self._inbox.qsize()
        self._stats.extra.update(self.prefix_cache.stats())
        return self._stats.as_dict()

    def close(self) -> None:
        self._stop.set()
        self._inbox.put(None)
        self._worker.join(timeout=10)

    # -- the worker -----------------------------------------------------------------------------
    def _run(self) -> None:
        import torch

        from gym.engine.kvbatch import RunningBatch

        batch = RunningBatch(self.model, self.pad_id, self.prefix_cache)
        if self._threads:
            self._threads.apply(force=True)
        with torch.inference_mode():
            while not self._stop.is_set():
                waiting = self._take(block=not batch.seqs)
                if self._threads and (waiting or batch.seqs):
                    self._stats.extra["torch_threads"] = self._threads.apply()
                try:
                    if waiting:
                        self._admit(batch, waiting)
                        self._flush()  # first tokens go out before the next decode step
                    if batch.seqs:
                        self._stats.max_batch_size = max(self._stats.max_batch_size, len(batch.seqs))
                        batch.step()
                        self._stats.steps += 1
                        if batch.shared is not None:  # one copy of a shared prompt prefix for all rows
                            extra = self._stats.extra
                            extra["shared_prefix_steps"] = extra.get("shared_prefix_steps", 0) + 1
                        self._stats.generated_tokens += len(batch.seqs)
                        batch.retire()
                except Exception as error:  # noqa: BLE001 - a failed decode step must not kill the server
                    for seq in batch.seqs + [s for s in waiting if s not in batch.seqs]:
                        seq.fail(f"generation failed: {type(error).__name__}")
                    batch = RunningBatch(self.model, self.pad_id, self.prefix_cache)
                self._stats.active = len(batch.seqs)
                self._flush()

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
            batch.admit(good, admitted=self._flush)  # first tokens out per prefill batch
        except Exception as error:  # noqa: BLE001 - find the sequence that cannot be prefilled
            if len(good) == 1:
                good[0].fail(f"generation failed for this request: {type(error).__name__}")
                return
            joined = set(map(id, batch.seqs))  # prefill batches admitted before the failure stay in
            for seq in good:
                if id(seq) not in joined and not seq.done:
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
