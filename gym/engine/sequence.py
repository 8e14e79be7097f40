"""One choice being generated: its tokens, sampling state, stop handling and incremental text.

Text is re-decoded from the generated ids each step (exact for byte-level BPE, cheap at serving
lengths) and released only up to a point that cannot be the start of a stop string or a half-decoded
UTF-8 character, so streamed text never contains what the final answer would cut off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gym.engine.backend import Chunk, SamplingParams, TokenLogprob


@dataclass(eq=False)
class Sequence:
    index: int
    prompt_ids: list[int]
    params: SamplingParams
    seed: int | None
    emit: Callable[[Chunk], Any]
    tokenizer: Any
    eos_ids: set[int]
    generated: list[int] = field(default_factory=list)
    sent: int = 0
    finished: bool = False
    cancelled: bool = False
    _generator: Any = None
    _logprobs: list[TokenLogprob] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.finished or self.cancelled

    def generator(self):
        """A per-request RNG, so ``seed`` reproduces the same sample whatever else is in the batch."""
        if self._generator is None and self.seed is not None:
            import torch

            # any int64 seed (and seed + choice index) maps onto torch's unsigned 64-bit range
            self._generator = torch.Generator().manual_seed(self.seed % (1 << 64))
        return self._generator

    def sample(self, logits):  # logits: 1-D float tensor
        import torch

        params = self.params
        if params.greedy:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.float() / params.temperature, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < params.top_p
            keep[0] = True
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
        return int(torch.multinomial(probs.cpu(), 1, generator=self.generator()))

    def token_logprob(self, token: int, logits) -> TokenLogprob | None:
        """``token``'s log-probability (and the top ``params.logprobs`` alternatives), when asked for."""
        k = self.params.logprobs
        if k is None or token in self.eos_ids:
            return None
        import torch

        logprobs = torch.log_softmax(logits.float(), dim=-1)
        top: tuple[tuple[str, float], ...] = ()
        if k:
            values, ids = torch.topk(logprobs, min(k, logprobs.shape[-1]))
            top = tuple(
                (self._piece(i), float(v)) for v, i in zip(values.tolist(), ids.tolist(), strict=True)
            )
        return TokenLogprob(self._piece(token), float(logprobs[token]), top)

    def _piece(self, token: int) -> str:
        return self.tokenizer.decode([token], skip_special_tokens=False)

    def push(self, token: int, logprob: TokenLogprob | None = None) -> None:
        """Record a sampled token, stream what is safe to show, and finish on EOS, stop or length."""
        if self.done:
            return
        if token in self.eos_ids:
            self._finish("stop")
            return
        self.generated.append(token)
        if logprob is not None:
            self._logprobs.append(logprob)
        text = self.decode()
        for stop in self.params.stop:
            at = text.find(stop)
            if at != -1:
                self._finish("stop", text[:at])
                return
        if len(self.generated) >= self.params.max_tokens:
            self._finish("length", text)
            return
        safe = len(text) - self._holdback(text)
        if safe > self.sent:
            self.emit(
                Chunk(self.index, text[self.sent : safe], completion_tokens=len(self.generated),
                      logprobs=self._take_logprobs())
            )  # fmt: skip
            self.sent = safe

    def decode(self) -> str:
        return self.tokenizer.decode(self.generated, skip_special_tokens=self.params.skip_special_tokens)

    def _take_logprobs(self) -> list[TokenLogprob] | None:
        if self.params.logprobs is None:
            return None
        taken, self._logprobs = self._logprobs, []
        return taken

    def _holdback(self, text: str) -> int:
        if text.endswith("\ufffd"):
            return 1
        hold = 0
        for stop in self.params.stop:
            for k in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:k]):
                    hold = max(hold, k)
                    break
        return hold

    def _finish(self, reason: str, text: str | None = None) -> None:
        if text is None:
            text = self.decode()
        self.finished = True
        tail = text[self.sent :] if len(text) > self.sent else ""
        self.emit(
            Chunk(self.index, tail, finish_reason=reason, completion_tokens=len(self.generated),
                  logprobs=self._take_logprobs())
        )  # fmt: skip

    def fail(self, message: str) -> None:
        if not self.finished:
            self.finished = True
            self.emit(Chunk(self.index, "", error=message, completion_tokens=len(self.generated)))
