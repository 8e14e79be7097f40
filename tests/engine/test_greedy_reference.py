"""Greedy decoding through Gym's batching engine equals transformers' own ``model.generate``.

The engine left-pads prompts of different lengths into one running batch, splices new rows into the
KV cache, keeps a shared prompt prefix once (cascade attention) and samples with its own code. None of
that may change an answer: at temperature 0 every prompt gets, token for token, what
``model.generate(do_sample=False)`` gives it alone, on a Llama and a Qwen2-style model (biased
q/k/v projections, untied embeddings), both with grouped-query attention.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import random
from collections.abc import Iterator
from typing import Any

import pytest

MAX_TOKENS = 12


def _tokenizer() -> Any:
    from gym.model.builtin import TinySpec, build_tokenizer

    return build_tokenizer(TinySpec())


def _model(architecture: str, tokenizer: Any) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    shape = dict(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(7)
    if architecture == "llama":
        model = LlamaForCausalLM(LlamaConfig(**shape, tie_word_embeddings=True))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**shape, tie_word_embeddings=False))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()


def _prompts(tokenizer: Any) -> tuple[list[list[int]], list[list[int]]]:
    """Two rounds: prompts of unequal lengths, then prompts that share a long start (prefix reuse)."""
    rng = random.Random(3)
    first = len(tokenizer.all_special_ids) + 8  # ordinary tokens only

    def ids(count: int) -> list[int]:
        return [rng.randrange(first, len(tokenizer)) for _ in range(count)]

    unequal = [ids(n) for n in (4, 17, 41, 9)]
    system = ids(48)
    shared = [system + ids(n) for n in (3, 12, 7)]
    return unequal, shared


def _reference(model: Any, prompt: list[int]) -> tuple[list[int], list[float]]:
    """``model.generate``'s greedy tokens for ``prompt`` alone and each token's log-probability."""
    import torch

    ids = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=MAX_TOKENS,
            output_logits=True, return_dict_in_generate=True,
        )  # fmt: skip
    tokens = out.sequences[0, len(prompt) :].tolist()
    logprobs = [
        float(torch.log_softmax(step[0].float(), -1)[t]) for step, t in zip(out.logits, tokens, strict=True)
    ]
    return tokens, logprobs


async def _engine_round(backend: Any, prompts: list[list[int]]) -> list[tuple[list[Any], str, str]]:
    from gym.engine.backend import SamplingParams

    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, logprobs=0, skip_special_tokens=False)

    async def one(prompt: list[int]) -> tuple[list[Any], str, str]:
        chunks = [chunk async for chunk in backend.generate(prompt, params)]
        pieces = [lp for chunk in chunks for lp in chunk.logprobs or []]
        return pieces, "".join(c.text for c in chunks), chunks[-1].finish_reason

    return await asyncio.gather(*(one(prompt) for prompt in prompts))


@pytest.mark.slow
@contextlib.contextmanager
def transformers_warnings() -> Iterator[list[str]]:
    """What transformers' loggers warn inside the block (its once-only warnings reset first, so one an earlier
    test already triggered shows again)."""
    import transformers.utils.logging as library_logging

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep(level=logging.WARNING)
    library_logging.warning_once.cache_clear()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_batched_greedy_equals_model_generate(architecture: str) -> None:
    pytest.importorskip("transformers")
    from gym.engine.batching import TransformersBackend

    tokenizer = _tokenizer()
    model = _model(architecture, tokenizer)
    reference_model = copy.deepcopy(model)  # the engine switches its model's attention; this one keeps sdpa
    rounds = _prompts(tokenizer)
    expected = [[_reference(reference_model, prompt) for prompt in prompts] for prompts in rounds]

    backend = TransformersBackend(model, tokenizer, architecture, max_batch_size=8)
    with transformers_warnings() as warned:
        try:
            got = [asyncio.run(_engine_round(backend, prompts)) for prompts in rounds]
            stats = backend.stats()
        finally:
            backend.close()
    # the engine hands the cache over under the name the installed release declares (gym.engine.cache_compat):
    # no "`past_key_values` ... deprecated" from transformers 5.2x, whose alias goes away in 5.40
    assert not [line for line in warned if "deprecated" in line], warned

    eos = tokenizer.eos_token_id
    for prompts, answers, references in zip(rounds, got, expected, strict=True):
        for prompt, (pieces, text, finish), (tokens, logprobs) in zip(
            prompts, answers, references, strict=True
        ):
            answer = tokens[: tokens.index(eos)] if eos in tokens else tokens  # the engine stops at EOS
            where = f"{architecture}, prompt of {len(prompt)} tokens"
            assert [p.text for p in pieces] == [tokenizer.decode([t]) for t in answer], where
            assert [p.logprob for p in pieces] == pytest.approx(logprobs[: len(answer)], abs=1e-4), where
            assert text == tokenizer.decode(answer), where
            assert finish == ("stop" if eos in tokens else "length"), where
    assert stats["max_batch_size"] > 1  # the prompts really ran as one batch
    assert stats["prefix_cache_hits"] > 0  # the shared start was reused, not prefilled again,
    assert stats["shared_prefix_steps"] > 0  # and kept once for all rows (cascade attention)
