"""The hand-off between a request's event loop and a backend's one worker thread.

Both continuous-batching backends (transformers, llama.cpp) run their decode steps on one thread and
serve requests on asyncio: a request puts its sequences in the inbox and awaits their chunks, the worker
collects each step's chunks in the outbox and hands them to every waiting event loop in one wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import AsyncIterator
from typing import Any

from gym.engine.backend import Chunk, SamplingParams, Stats
from gym.engine.sequence import Sequence


class WorkerHandoff:
    """Mixin: ``generate`` on the event loop's side, ``_flush`` on the worker's (``tokenizer``, ``eos_ids`` set by the backend)."""

    tokenizer: Any
    eos_ids: set[int]

    def _open_handoff(self) -> None:
        self._outbox: list[tuple[Any, Any, Chunk]] = []  # (loop, queue, chunk), filled by the worker
        self._inbox: queue.Queue[Sequence | None] = queue.Queue()
        self._stats = Stats()

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
                emit=lambda chunk: self._outbox.append((loop, out, chunk)),
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
                seq.cancelled = True  # a disconnected client frees its batch slot at the next step

    def _flush(self) -> None:
        """Hand this step's chunks to each request's event loop in one wake-up instead of one per token."""
        if not self._outbox:
            return
        items, self._outbox = self._outbox, []
        by_loop: dict[Any, list[tuple[Any, Chunk]]] = {}
        for loop, out, chunk in items:
            by_loop.setdefault(loop, []).append((out, chunk))
        for loop, batch in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that request's event loop is gone: nobody listens
                loop.call_soon_threadsafe(_deliver, batch)


def _deliver(items: list[tuple[Any, Chunk]]) -> None:
    for out, chunk in items:
        out.put_nowait(chunk)
