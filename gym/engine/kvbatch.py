"""The running batch of the transformers engine: left-padded KV cache that sequences join and leave.

Every active sequence has one sampled token not yet in the cache (``pending``). A step feeds all of
them in one forward pass. New sequences are prefilled together (those reusing the same cached prompt
prefix as one group: only their own tokens go through the model, see :mod:`gym.engine.prefixcache`),
then their cache rows are spliced in by left-padding both caches to a common length (padding is
masked out, and positions come from the mask, so each row computes exactly what it would alone).
Rows of finished sequences are dropped and all-padding columns on the left trimmed, so the cache
never grows beyond the live sequences.

Full-attention layers keep their KV in growing buffers with spare columns, so a decode step writes one
column in place instead of concatenating (copying) the whole cache; the attention mask is kept the
same way. Prefill asks the model for the last position's logits only. Every touch of transformers'
cache classes goes through :mod:`gym.engine.cache_compat`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any

from gym.engine.attention import NAME as ATTENTION_NAME
from gym.engine.attention import shared_prefix
from gym.engine.cache_compat import (
    cache_from_kv,
    cache_kwargs,
    growing_layer_class,
    growing_layers_supported,
    is_plain_layer,
    output_cache,
    replace_kv,
)
from gym.engine.prefixcache import PrefixCache, PrefixEntry, common_prefix
from gym.engine.sequence import Sequence

_ROOM = 64  # spare columns reserved whenever a buffer is (re)built: one rebuild per 64 decode steps


def _by_length(
    seqs: list[Sequence], shared: int, slack: float = 0.25, free: int = 32
) -> list[list[Sequence]]:
    """``seqs`` in prefill batches of similar length: a batch is left-padded to its longest prompt, so
    one batch of very unequal prompts spends most of its matmuls on padding. Sorted by length, a new
    batch starts when the padding would exceed ``slack`` of the real tokens (plus ``free`` tokens)."""
    ranked = sorted(seqs, key=lambda seq: len(seq.prompt_ids))
    parts: list[list[Sequence]] = []
    real = 0
    for seq in ranked:
        length = len(seq.prompt_ids) - shared
        if parts and (len(parts[-1]) + 1) * length - (real + length) > slack * (real + length) + free:
            parts.append([])
            real = 0
        if not parts:
            parts.append([])
        parts[-1].append(seq)
        real += length
    return parts


def _same_prefix(a: PrefixEntry | None, b: PrefixEntry | None) -> bool:
    return a is b or (a is not None and b is not None and a.tokens == b.tokens)


def _prepend(cache: Any, mask: Any, prefix: PrefixEntry) -> Any:
    """Put ``prefix``'s KV in front of every row of ``cache`` (in place); returns the widened mask."""
    import torch

    rows = mask.shape[0]
    for layer, keys, values in zip(cache.layers, prefix.keys, prefix.values, strict=True):
        new_keys = torch.cat([keys.expand(rows, -1, -1, -1), layer.keys], dim=2)
        new_values = torch.cat([values.expand(rows, -1, -1, -1), layer.values], dim=2)
        replace_kv(layer, new_keys, new_values)
    ones = torch.ones((rows, len(prefix.tokens)), dtype=mask.dtype, device=mask.device)
    return torch.cat([ones, mask], dim=-1)


class RunningBatch:
    def __init__(self, model: Any, pad_id: int, prefix_cache: PrefixCache | None = None) -> None:
        self.model, self.pad_id = model, pad_id
        self.device = next(model.parameters()).device
        self.prefix_cache = prefix_cache if prefix_cache is not None else PrefixCache(budget_bytes=0)
        self.seqs: list[Sequence] = []
        self.pending: list[int] = []
        self.cache: Any = None
        self._mask: Any = None  # (batch, width + room) long; columns past ``width`` are spare
        self.width = 0
        self._growing = growing_layer_class(_ROOM)
        self._grow = growing_layers_supported()
        self._plain_model: bool | None = None
        self._last_only = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._cascade = getattr(model.config, "_attn_implementation", None) == ATTENTION_NAME
        self.shared: PrefixEntry | None = None  # the prompt prefix every row starts with, kept once

    @property
    def mask(self) -> Any:
        return None if self._mask is None else self._mask[:, : self.width]

    def _set_mask(self, mask: Any) -> None:
        import torch.nn.functional as F

        self._mask, self.width = F.pad(mask, (0, _ROOM)), mask.shape[-1]

    def admit(self, new: list[Sequence], admitted: Callable[[], None] | None = None) -> None:
        """Prefill ``new`` (grouped by reusable prefix and length), sample their first tokens, splice them
        in. ``admitted`` is called after each prefill batch, so its first tokens can go out at once."""
        leader = self._leader(new)
        if leader is not None:  # its prompt's KV, once cached, serves the others arriving with it
            self.admit([leader], admitted)
            new = [seq for seq in new if seq is not leader]
        groups: dict[tuple[int, ...], tuple[Any, int, list[Sequence]]] = {}
        for seq in new:
            entry, shared = self._reuse(seq.prompt_ids)
            key = tuple(seq.prompt_ids[:shared])  # same reused tokens: one prefill group
            groups.setdefault(key, (entry, shared, []))[2].append(seq)
        ordered = sorted(groups.values(), key=lambda group: -len(group[2]))
        parts = [
            (entry, shared, part) for entry, shared, seqs in ordered for part in _by_length(seqs, shared)
        ]
        for entry, shared, seqs in parts:
            cache, mask, logits, prefix = self._prefill(seqs, entry, shared)
            tokens = self._sample(seqs, logits)
            self._remember(seqs, cache, mask, prefix)
            if self.cache is None:
                self.cache, self.shared = cache, prefix
                self._adopt(cache)
                self._set_mask(mask)
            else:
                if not _same_prefix(self.shared, prefix) and not self._share(prefix):
                    if self.shared is not None:  # rows of one batch share one prefix or none
                        self._flatten()
                    if prefix is not None:
                        mask = _prepend(cache, mask, prefix)
                self._splice(cache, mask)
            self.seqs += seqs
            self.pending += tokens
            if admitted is not None:
                admitted()
        self.retire()

    def _reuse(self, prompt: list[int]) -> tuple[Any, int]:
        """The cached prefix ``prompt`` can reuse: the batch's shared one when it starts with it (its rows
        then keep sharing one copy), else the prefix cache's longest match."""
        shared = self.shared
        size = len(shared.tokens) if shared is not None else 0
        if (
            size
            and len(prompt) > size
            and prompt[0] == shared.tokens[0]
            and tuple(prompt[:size]) == shared.tokens
        ):
            self.prefix_cache.count_hit(size)
            return shared, size
        return self.prefix_cache.lookup(prompt) if self.prefix_cache.entries else (None, 0)

    def _leader(self, new: list[Sequence]) -> Sequence | None:
        """Among new prompts that share a long start but have no cached prefix yet, the one to prefill first
        (and cache), so that the rest reuse its KV instead of each prefilling the same tokens."""
        cache = self.prefix_cache
        if len(new) < 2 or not cache.enabled or self._plain_model is False:
            return None
        least = max(cache.min_tokens, cache.block)
        cold = [seq for seq in new if cache.match(seq.prompt_ids) < least]
        if self.shared is not None:
            size = len(self.shared.tokens)
            cold = [seq for seq in cold if tuple(seq.prompt_ids[:size]) != self.shared.tokens]
        best, best_count = None, 0
        for seq in cold:
            prompt = tuple(seq.prompt_ids)
            count = sum(
                1 for other in cold if other is not seq and common_prefix(prompt, other.prompt_ids) >= least
            )
            if count > best_count:
                best, best_count = seq, count
        return best

    def _prefill(self, seqs: list[Sequence], entry: Any, shared: int) -> tuple[Any, Any, Any, Any]:
        """Prefill the tokens after the ``shared`` reused ones. Returns the new rows' cache and mask, the
        last logits, and the reused prefix (a :class:`PrefixEntry` cut to ``shared`` tokens) when it is
        kept apart from the rows (cascade attention), or None when the rows hold it or there is none."""
        import torch

        suffixes = [seq.prompt_ids[shared:] for seq in seqs]
        width = max(len(s) for s in suffixes)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), shared + width), dtype=torch.long)
        mask[:, :shared] = 1
        for row, suffix in enumerate(suffixes):
            ids[row, width - len(suffix) :] = torch.tensor(suffix)
            mask[row, shared + width - len(suffix) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, shared:]
        kwargs: dict[str, Any] = {"logits_to_keep": 1} if self._last_only else {}
        prefix, context = None, contextlib.nullcontext()
        if entry is not None and self._cascade:
            prefix = PrefixEntry(
                entry.tokens[:shared], [k[:, :, :shared] for k in entry.keys],
                [v[:, :, :shared] for v in entry.values], 0,
            )  # fmt: skip
            mask = mask[:, shared:]
            context = shared_prefix(prefix.keys, prefix.values)
        elif entry is not None:
            rows = len(seqs)
            kwargs |= cache_kwargs(
                cache_from_kv(
                    (k[:, :, :shared].expand(rows, -1, -1, -1), v[:, :, :shared].expand(rows, -1, -1, -1))
                    for k, v in zip(entry.keys, entry.values, strict=True)
                )
            )
        with context:
            out = self.model(
                input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **kwargs
            )
        if self._plain_model is None:  # prefix reuse only for models made of full-attention layers
            self._plain_model = all(is_plain_layer(layer) for layer in output_cache(out).layers)
        return output_cache(out), mask, out.logits[:, -1, :], prefix

    def _remember(self, seqs: list[Sequence], cache: Any, mask: Any, prefix: Any) -> None:
        """Keep each new prompt's KV (its unpadded columns) for later prompts that start the same way."""
        if not (self.prefix_cache.enabled and self._plain_model):
            return
        import torch

        for row, seq in enumerate(seqs):
            columns = mask[row].nonzero().squeeze(-1)
            keys = [layer.keys[row : row + 1, :, columns] for layer in cache.layers]
            values = [layer.values[row : row + 1, :, columns] for layer in cache.layers]
            if prefix is not None:
                keys = [torch.cat([p, k], dim=2) for p, k in zip(prefix.keys, keys, strict=True)]
                values = [torch.cat([p, v], dim=2) for p, v in zip(prefix.values, values, strict=True)]
            self.prefix_cache.store(seq.prompt_ids, keys, values)

    def _share(self, prefix: PrefixEntry | None) -> bool:
        """Keep ``prefix`` apart from rows that all start with it and hold it unpadded in their first
        columns (a prompt admitted just before, whose KV ``prefix`` was cached from): True if done."""
        if prefix is None or self.shared is not None:
            return False
        size = len(prefix.tokens)
        if self.width <= size or not bool(self.mask[:, :size].all()):
            return False
        if any(tuple(seq.prompt_ids[:size]) != prefix.tokens for seq in self.seqs):
            return False
        for layer in self.cache.layers:
            replace_kv(layer, layer.keys[:, :, size:], layer.values[:, :, size:])
        self._set_mask(self.mask[:, size:])
        self.shared = prefix
        return True

    def _flatten(self) -> None:
        """Copy the shared prefix into every row (a new row does not share it)."""
        self._set_mask(_prepend(self.cache, self.mask, self.shared))
        self.shared = None

    def _adopt(self, cache: Any) -> None:
        """Move plain full-attention layers into growing buffers (others keep their own update)."""
        for index, layer in enumerate(cache.layers):
            if self._grow and is_plain_layer(layer):
                growing = self._growing()
                growing.set(layer.keys, layer.values)
                cache.layers[index] = growing

    def step(self) -> None:
        """One decode step for every active sequence."""
        import torch

        ids = torch.tensor(self.pending, dtype=torch.long, device=self.device).unsqueeze(-1)
        if self.width == self._mask.shape[-1]:
            self._set_mask(self.mask)
        self._mask[:, self.width] = 1
        self.width += 1
        mask = self.mask
        positions = mask.sum(-1, keepdim=True) - 1
        context = contextlib.nullcontext()
        if self.shared is not None:
            positions += len(self.shared.tokens)
            context = shared_prefix(self.shared.keys, self.shared.values)
        with context:
            out = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                **cache_kwargs(self.cache),
            )
        self.cache = output_cache(out)
        self.pending = self._sample(self.seqs, out.logits[:, -1, :])

    def retire(self) -> None:
        """Drop finished or cancelled sequences and the padding columns nobody needs any more."""
        import torch

        keep = [i for i, seq in enumerate(self.seqs) if not seq.done]
        if len(keep) == len(self.seqs):
            return
        if not keep:
            self.seqs, self.pending, self.cache, self._mask, self.width = [], [], None, None, 0
            self.shared = None
            return
        index = torch.tensor(keep, device=self.device)
        self.seqs = [self.seqs[i] for i in keep]
        self.pending = [self.pending[i] for i in keep]
        mask = self.mask[index]
        first = int(mask.any(dim=0).long().argmax())
        self._set_mask(mask[:, first:])
        for layer in self.cache.layers:
            replace_kv(layer, layer.keys[index, :, first:, :], layer.values[index, :, first:, :])

    def _splice(self, cache: Any, mask: Any) -> None:
        import torch
        import torch.nn.functional as F

        old_mask = self.mask
        width = max(old_mask.shape[-1], mask.shape[-1])

        def left(t: Any, dim_from_end: int) -> Any:
            missing = width - t.shape[-dim_from_end]
            if not missing:
                return t
            pad = [0, 0] * (dim_from_end - 1) + [missing, 0]
            return F.pad(t, pad)

        self._set_mask(torch.cat([left(old_mask, 1), left(mask, 1)], dim=0))
        for old, new in zip(self.cache.layers, cache.layers, strict=True):
            keys = torch.cat([left(old.keys, 2), left(new.keys, 2)], dim=0)
            values = torch.cat([left(old.values, 2), left(new.values, 2)], dim=0)
            if isinstance(old, self._growing):
                old.set(keys, values)
            else:
                old.keys, old.values = keys, values

    def _sample(self, seqs: list[Sequence], logits: Any) -> list[int]:
        """Next token of every row. A row that fails (sampling, decoding) fails alone and leaves the batch
        at the next :meth:`retire`; the others go on."""
        greedy = logits.argmax(dim=-1).tolist()
        tokens = []
        for row, seq in enumerate(seqs):
            token = self.pad_id
            try:
                token = greedy[row] if seq.params.greedy else seq.sample(logits[row])
                seq.push(token, seq.token_logprob(token, logits[row]))
            except Exception as error:  # noqa: BLE001 - isolate the sequence, keep the batch
                seq.fail(f"generation failed for this request: {type(error).__name__}: {error}")
            tokens.append(token)
        return tokens
