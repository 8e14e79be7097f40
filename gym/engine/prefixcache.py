"""Prefix caching for the transformers engine: KV of recent prompts, reused by prompts that start alike.

Chat traffic repeats itself at the front: the same system prompt on every request, and every turn of a
conversation resending the turns before it. Prefilling those tokens again is the largest avoidable
cost of serving on CPU, so the KV of each admitted prompt is kept (unpadded, one row) under its token
ids, and a new prompt that shares at least ``min_tokens`` leading tokens with a kept one prefills only
the rest. Entries are evicted least-recently-used beyond a byte budget (``GYM_PREFIX_CACHE_MB``,
default 256; 0 turns caching off).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass(eq=False)
class PrefixEntry:
    tokens: tuple[int, ...]
    keys: list[Any]  # per layer, (1, heads, len(tokens), head_dim)
    values: list[Any]
    nbytes: int


def common_prefix(a: tuple[int, ...], b: list[int] | tuple[int, ...]) -> int:
    """Length of the common start of ``a`` and ``b`` (compared in C-speed slices, then narrowed)."""
    limit = min(len(a), len(b))
    b = tuple(b[:limit])
    if a[:limit] == b:
        return limit
    low, high = 0, limit  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid
    return low


class PrefixCache:
    def __init__(self, budget_bytes: int | None = None, min_tokens: int = 16, block: int = 32) -> None:
        if budget_bytes is None:
            budget_bytes = int(float(os.environ.get("GYM_PREFIX_CACHE_MB", "256")) * 2**20)
        self.budget, self.min_tokens, self.block = budget_bytes, min_tokens, block
        self.entries: OrderedDict[tuple[int, ...], PrefixEntry] = OrderedDict()
        # A reuse is a whole number of blocks, so it shares at least the first block: entries indexed by
        # it make a lookup cost the candidates only, not every kept prompt (hundreds on a small model).
        self._by_head: dict[tuple[int, ...], dict[tuple[int, ...], PrefixEntry]] = {}
        self.used = 0
        self.hits = self.reused_tokens = 0

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def lookup(self, prompt: list[int]) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest start with ``prompt`` and how many tokens to reuse.

        At least one prompt token is always left to prefill: its logits give the first sampled token.
        The length is rounded down to a multiple of ``block`` so that prompts sharing a system prompt
        but not the first characters of their question reuse the same length, and are prefilled
        together as one group instead of one forward pass each.
        """
        best, best_len = self._longest(prompt)
        if best is None:
            return None, 0
        self.entries.move_to_end(best.tokens)
        self.count_hit(best_len)
        return best, best_len

    def match(self, prompt: list[int]) -> int:
        """How many of ``prompt``'s tokens :meth:`lookup` would reuse (without counting a hit)."""
        return self._longest(prompt)[1]

    def count_hit(self, tokens: int) -> None:
        self.hits += 1
        self.reused_tokens += tokens

    def _longest(self, prompt: list[int]) -> tuple[PrefixEntry | None, int]:
        best, best_len = None, 0
        head = self._head(prompt)
        for entry in self._by_head.get(head, {}).values() if head else ():
            shared = min(common_prefix(entry.tokens, prompt), len(prompt) - 1)
            if shared > best_len:
                best, best_len = entry, shared
        best_len = best_len // self.block * self.block
        if best is None or best_len < max(self.min_tokens, 1):
            return None, 0
        return best, best_len

    def store(self, tokens: list[int], keys: list[Any], values: list[Any]) -> None:
        """Keep one prompt's KV (per layer, ``(1, heads, len(tokens), head_dim)``, owned by the cache)."""
        if not self.enabled or len(tokens) < self.min_tokens:
            return
        key = tuple(tokens)
        if key in self.entries:
            self.entries.move_to_end(key)
            return
        nbytes = sum(t.numel() * t.element_size() for t in (*keys, *values))
        if nbytes > self.budget:
            return
        self.entries[key] = entry = PrefixEntry(key, keys, values, nbytes)
        head = self._head(key)
        if head:
            self._by_head.setdefault(head, {})[key] = entry
        self.used += nbytes
        while self.used > self.budget:
            _, old = self.entries.popitem(last=False)
            self.used -= old.nbytes
            same_head = self._by_head.get(self._head(old.tokens))
            if same_head is not None:
                same_head.pop(old.tokens, None)
                if not same_head:
                    del self._by_head[self._head(old.tokens)]

    def _head(self, tokens: list[int] | tuple[int, ...]) -> tuple[int, ...] | None:
        """The index key of ``tokens``: its first block (None when shorter, so nothing to reuse)."""
        size = max(self.block, 1)
        return tuple(tokens[:size]) if len(tokens) >= size else None

    def stats(self) -> dict[str, int]:
        return {"prefix_cache_entries": len(self.entries), "prefix_cache_hits": self.hits,
                "prefix_cache_reused_tokens": self.reused_tokens}  # fmt: skip
