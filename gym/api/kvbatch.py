"""The running batch of the transformers engine: left-padded KV cache that sequences join and leave.

Every active sequence has one sampled token not yet in the cache (``pending``). A step feeds all of
them in one forward pass. New sequences are prefilled together, then their cache rows are spliced
in by left-padding both caches to a common length (padding is masked out, and positions come from
the mask, so each row computes exactly what it would alone). Rows of finished sequences are dropped
and all-padding columns on the left trimmed, so the cache never grows beyond the live sequences.
"""

from __future__ import annotations

from typing import Any

from gym.api.sequence import Sequence


class RunningBatch:
    def __init__(self, model: Any, pad_id: int) -> None:
        self.model, self.pad_id = model, pad_id
        self.device = next(model.parameters()).device
        self.seqs: list[Sequence] = []
        self.pending: list[int] = []
        self.cache: Any = None
        self.mask: Any = None  # (batch, cache_length) long

    def admit(self, new: list[Sequence]) -> None:
        """Prefill ``new`` as one left-padded batch, sample their first tokens, splice them in."""
        import torch

        width = max(len(s.prompt_ids) for s in new)
        ids = torch.full((len(new), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(new), width), dtype=torch.long)
        for row, seq in enumerate(new):
            ids[row, width - len(seq.prompt_ids) :] = torch.tensor(seq.prompt_ids)
            mask[row, width - len(seq.prompt_ids) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        tokens = self._sample(new, out.logits[:, -1, :])
        if self.cache is None:
            self.cache, self.mask = out.past_key_values, mask
        else:
            self._splice(out.past_key_values, mask)
        self.seqs += new
        self.pending += tokens
        self.retire()

    def step(self) -> None:
        """One decode step for every active sequence."""
        import torch

        ids = torch.tensor(self.pending, dtype=torch.long, device=self.device).unsqueeze(-1)
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.seqs), 1))], dim=-1)
        positions = self.mask.sum(-1, keepdim=True) - 1
        out = self.model(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
        )
        self.cache = out.past_key_values
        self.pending = self._sample(self.seqs, out.logits[:, -1, :])

    def retire(self) -> None:
        """Drop finished or cancelled sequences and the padding columns nobody needs any more."""
        import torch

        keep = [i for i, seq in enumerate(self.seqs) if not seq.done]
        if len(keep) == len(self.seqs):
            return
        if not keep:
            self.seqs, self.pending, self.cache, self.mask = [], [], None, None
            return
        index = torch.tensor(keep, device=self.device)
        self.seqs = [self.seqs[i] for i in keep]
        self.pending = [self.pending[i] for i in keep]
        self.mask = self.mask[index]
        first = int(self.mask.any(dim=0).long().argmax())
        self.mask = self.mask[:, first:]
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, first:, :]
            layer.values = layer.values[index, :, first:, :]

    def _splice(self, cache: Any, mask: Any) -> None:
        import torch
        import torch.nn.functional as F

        width = max(self.mask.shape[-1], mask.shape[-1])

        def left(t: Any, dim_from_end: int) -> Any:
            missing = width - t.shape[-dim_from_end]
            if not missing:
                return t
            pad = [0, 0] * (dim_from_end - 1) + [missing, 0]
            return F.pad(t, pad)

        self.mask = torch.cat([left(self.mask, 1), left(mask, 1)], dim=0)
        for old, new in zip(self.cache.layers, cache.layers, strict=True):
            old.keys = torch.cat([left(old.keys, 2), left(new.keys, 2)], dim=0)
            old.values = torch.cat([left(old.values, 2), left(new.values, 2)], dim=0)

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
