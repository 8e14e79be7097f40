"""Shared prompt prefixes in the running batch: one KV copy for all rows (cascade attention), prompts that
arrive together share one prefill of their common start, and mixed batches fall back to per-row copies —
each with greedy output identical to generating every prompt alone without any cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym.engine.backend import SamplingParams
from gym.engine.prefixcache import PrefixCache
from gym.engine.sequence import Sequence

PREAMBLE = "You are a careful assistant for a small software company. Answer briefly and plainly. " * 3
OTHER = "Tu es un assistant prudent. Reponds en une phrase, sans inventer de faits. " * 3


@pytest.fixture(scope="module")
def engine(tiny_dir: Path):
    from gym.engine.attention import use_gqa_sdpa
    from gym.engine.loading import load_model_and_tokenizer, resolve_source

    model, tokenizer = load_model_and_tokenizer(resolve_source(str(tiny_dir), "tiny"))
    assert use_gqa_sdpa(model)  # cascade attention lives in Gym's attention function
    return model, tokenizer


def generate(engine, prompts: list[str], arrivals: list[int], cache: PrefixCache, max_tokens: int = 10):
    """Greedy answers of ``prompts``, prompt i joining the running batch before decode step arrivals[i];
    also the number of steps the batch ran with a shared prefix and the most rows it held then."""
    import torch

    from gym.engine.kvbatch import RunningBatch

    model, tokenizer = engine
    eos = {tokenizer.eos_token_id}
    texts = [""] * len(prompts)

    def emit_to(i):
        def emit(chunk):
            texts[i] += chunk.text

        return emit

    seqs = [
        Sequence(
            i,
            tokenizer(p)["input_ids"],
            SamplingParams(max_tokens=max_tokens, temperature=0.0),
            None,
            emit_to(i),
            tokenizer,
            eos,
        )  # fmt: skip
        for i, p in enumerate(prompts)
    ]
    batch = RunningBatch(model, tokenizer.pad_token_id or 0, cache)
    shared_steps = shared_rows = 0
    with torch.inference_mode():
        step = 0
        while step <= max(arrivals) or batch.seqs:
            joining = [seq for seq, at in zip(seqs, arrivals, strict=True) if at == step]
            if joining:
                batch.admit(joining)
            if batch.seqs:
                if batch.shared is not None:
                    shared_steps += 1
                    shared_rows = max(shared_rows, len(batch.seqs))
                batch.step()
                batch.retire()
            step += 1
    assert all(seq.done for seq in seqs)
    return texts, shared_steps, shared_rows


def solo(engine, prompts: list[str]) -> list[str]:
    return [generate(engine, [p], [0], PrefixCache(budget_bytes=0))[0][0] for p in prompts]


def test_prompts_arriving_together_share_one_prefill_and_one_prefix_copy(engine) -> None:
    prompts = [PREAMBLE + q for q in ("What is 2 + 2?", "Name a colour.", "Say hello to the team.", "x")]
    cache = PrefixCache(min_tokens=16, block=16)
    texts, shared_steps, shared_rows = generate(engine, prompts, [0, 0, 0, 0], cache)
    assert texts == solo(engine, prompts)
    # one prompt is prefilled whole and cached; the three others reuse its KV in the same admission
    assert cache.hits == 3 and cache.reused_tokens >= 3 * 16
    assert shared_steps > 0 and shared_rows == 4  # every row decodes against one copy of the preamble


def test_mixed_prefixes_fall_back_to_per_row_copies_with_the_same_output(engine) -> None:
    """A batch sharing one preamble, then joined by rows with another preamble and with none."""
    cache = PrefixCache(min_tokens=16, block=16)
    warm = generate(engine, [PREAMBLE + "warm up", OTHER + "warm up"], [0, 0], cache)[0]
    assert warm == solo(engine, [PREAMBLE + "warm up", OTHER + "warm up"])
    prompts = [PREAMBLE + "Name a colour.", PREAMBLE + "What is 2 + 2?", OTHER + "Dis bonjour.", "2 + 2 =",
               PREAMBLE + "Count to three."]  # fmt: skip
    texts, shared_steps, _ = generate(engine, prompts, [0, 1, 3, 4, 6], cache)
    assert texts == solo(engine, prompts)
    assert shared_steps >= 3  # shared until the other preamble arrived, then copied into every row


@pytest.mark.parametrize("q_len", [1, 5])
def test_cascade_attention_equals_attention_over_the_concatenated_keys(q_len: int) -> None:
    import torch

    from gym.engine.attention import cascade_attention

    torch.manual_seed(0)
    batch, heads, kv_heads, prefix, own, dim = 3, 4, 2, 40, 7, 16
    query = torch.randn(batch, heads, q_len, dim)
    key, value = torch.randn(batch, kv_heads, own, dim), torch.randn(batch, kv_heads, own, dim)
    shared_key = torch.randn(1, kv_heads, prefix + 5, dim)[:, :, :prefix]  # a view, as the cache hands out
    shared_value = torch.randn(1, kv_heads, prefix + 5, dim)[:, :, :prefix]
    mask = torch.ones(batch, 1, q_len, own, dtype=torch.bool).tril(own - q_len)
    mask[0, :, :, :2] = False  # left padding of row 0
    out = cascade_attention(query, key, value, mask, shared_key, shared_value, None)
    keys = torch.cat([shared_key.expand(batch, -1, -1, -1), key], dim=2)
    values = torch.cat([shared_value.expand(batch, -1, -1, -1), value], dim=2)
    full_mask = torch.cat([torch.ones(batch, 1, q_len, prefix, dtype=torch.bool), mask], dim=-1)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, keys, values, attn_mask=full_mask, enable_gqa=True
    ).transpose(1, 2)
    assert out.shape == (batch, q_len, heads, dim)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_prefix_cache_finds_the_longest_reusable_start_and_forgets_evicted_prompts() -> None:
    import torch

    def kv(length: int) -> tuple[list, list]:
        return [torch.zeros(1, 1, length, 2)], [torch.zeros(1, 1, length, 2)]

    cache = PrefixCache(budget_bytes=3 * 2 * 40 * 2 * 4, min_tokens=8, block=8)  # room for 3 prompts of 40
    system = list(range(100, 124))  # 24 shared tokens
    first, second = system + list(range(16)), system + list(range(50, 66))
    cache.store(first, *kv(40))
    cache.store(second, *kv(40))
    entry, shared = cache.lookup(system + list(range(10)) + [99])
    assert entry.tokens == tuple(first) and shared == 32  # 34 tokens in common, rounded down to blocks
    assert cache.lookup(list(range(40)))[0] is None  # nothing starts like it
    assert cache.lookup(system[:8] + [7])[1] == 8  # exactly one block, one token left to prefill
    cache.store(list(range(500, 540)), *kv(40))
    cache.store(list(range(600, 640)), *kv(40))  # over budget: the least recently used one goes
    assert tuple(second) not in cache.entries
    assert cache.lookup(second + [1])[0].tokens == tuple(first)  # evicted prompts are never returned
    assert cache.match(list(range(600, 640)) + [1]) == 40 and cache.hits == 3
