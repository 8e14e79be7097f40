"""The batching engine in-process: batched output equals solo output; streaming holds back stop text;
backends that are not installed fail clearly; LoRA folders are served and merged through PEFT."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gym.engine.backend import BackendUnavailable, Chunk, SamplingParams, create_backend
from gym.engine.loading import ModelSource, resolve_source
from gym.engine.sequence import Sequence


class CharTokenizer:
    """One token per character: enough to test stop strings without a model."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)


def run_sequence(text: str, stop: tuple[str, ...], max_tokens: int = 50) -> list[Chunk]:
    chunks: list[Chunk] = []
    seq = Sequence(
        0, [1], SamplingParams(max_tokens=max_tokens, stop=stop), None, chunks.append, CharTokenizer(), {0}
    )
    for ch in text:
        seq.push(ord(ch))
    seq.push(0)
    return chunks


def test_stop_strings_never_leak_into_the_stream() -> None:
    chunks = run_sequence("hello END world", stop=("END",))
    assert "".join(c.text for c in chunks) == "hello "
    assert chunks[-1].finish_reason == "stop"
    assert all("E" not in c.text for c in chunks)
    chunks = run_sequence("hello EN", stop=("END",))  # a partial match is released at the end
    assert "".join(c.text for c in chunks) == "hello EN" and chunks[-1].finish_reason == "stop"
    chunks = run_sequence("abcdef", stop=(), max_tokens=3)
    assert "".join(c.text for c in chunks) == "abc" and chunks[-1].finish_reason == "length"


@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_missing_engine_is_a_clear_error(name: str) -> None:
    pytest.importorskip("transformers")
    try:
        __import__(name)
        pytest.skip(f"{name} is installed here")
    except ImportError:
        pass
    with pytest.raises(BackendUnavailable, match=f"needs the '{name}' package.*--backend transformers"):
        create_backend(name, ModelSource(model_id="m", base="/nonexistent"))


@pytest.mark.slow
def test_batched_generation_equals_solo(tiny_dir: Path) -> None:
    backend = create_backend("transformers", resolve_source(str(tiny_dir), "tiny"))
    prompts = ["Reverse: a b c", "The quick brown fox jumps over the lazy dog", "x", "2 + 2 ="]

    async def one(prompt: str, delay: float = 0.0, seed: int | None = None) -> str:
        await asyncio.sleep(delay)
        params = SamplingParams(max_tokens=16, temperature=0.8 if seed is not None else 0.0, seed=seed)
        return "".join([c.text async for c in backend.generate(backend.encode_text(prompt), params)])

    async def scenario() -> None:
        solo = [await one(p) for p in prompts]
        assert await asyncio.gather(*(one(p) for p in prompts)) == solo
        assert await asyncio.gather(*(one(p, delay=0.005 * i) for i, p in enumerate(prompts))) == solo
        sampled = await one("hi", seed=3)
        assert (await asyncio.gather(one("hi", seed=3), one("other", seed=4)))[0] == sampled

    try:
        asyncio.run(scenario())
        assert backend.stats()["max_batch_size"] > 1
    finally:
        backend.close()


@pytest.mark.slow
def test_lora_folder_is_served_and_merged(tiny_dir: Path, tmp_path: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gym.engine.loading import load_model_and_tokenizer
    from gym.export.merge import merge_adapter

    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    peft_model = get_peft_model(
        base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    adapter = tmp_path / "lora"
    peft_model.save_pretrained(adapter)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    tokenizer.chat_template = (
        "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"  # the trained template
    )
    tokenizer.save_pretrained(adapter)

    source = resolve_source(str(adapter))
    assert source.adapter == str(adapter.resolve()) and Path(source.base) == tiny_dir
    model, tok = load_model_and_tokenizer(source, device="cpu")
    assert tok.chat_template == tokenizer.chat_template
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        expected = peft_model(ids).logits
        assert torch.allclose(model(ids).logits, expected, atol=1e-5)
        assert not torch.allclose(
            AutoModelForCausalLM.from_pretrained(tiny_dir)(ids).logits, expected, atol=1e-5
        )
    merged = merge_adapter(adapter, tmp_path / "merged")
    with torch.no_grad():
        assert torch.allclose(AutoModelForCausalLM.from_pretrained(merged)(ids).logits, expected, atol=1e-5)
    assert AutoTokenizer.from_pretrained(merged).chat_template == tokenizer.chat_template


@pytest.mark.slow
def test_a_failing_sequence_fails_alone(tiny_dir: Path) -> None:
    """Requests that reach the batch worker broken (no prompt tokens, ids the model lacks, a seed beyond
    64 bits: what the HTTP door refuses, sent past it) fail alone; the batch they share goes on."""
    backend = create_backend("transformers", resolve_source(str(tiny_dir), "tiny"))
    greedy = SamplingParams(max_tokens=24, temperature=0.0)

    async def run(prompt_ids: list[int], params: SamplingParams) -> tuple[str, str | None]:
        text, error = "", None
        async for chunk in backend.generate(prompt_ids, params):
            text += chunk.text
            error = chunk.error or error
        return text, error

    async def scenario() -> None:
        good = [backend.encode_text(p) for p in ("Reverse: a b c", "The quick brown fox", "2 + 2 =")]
        solo = [await run(ids, greedy) for ids in good]
        bad = [
            ([], greedy),
            ([10**6], greedy),
            (good[0], SamplingParams(max_tokens=24, temperature=0.7, seed=2**70)),
            (good[1], SamplingParams(max_tokens=24, temperature=float("nan"))),
        ]
        results = await asyncio.gather(*(run(ids, greedy) for ids in good), *(run(i, p) for i, p in bad))
        assert results[: len(good)] == solo
        outcomes = results[len(good) :]
        assert outcomes[0][1] and outcomes[1][1], outcomes  # refused by the worker, alone
        assert outcomes[2][1] is None and outcomes[2][0]  # any int seed is reduced to torch's range
        assert outcomes[3][1] and "generation failed for this request" in outcomes[3][1]

    try:
        asyncio.run(scenario())
        assert backend.stats()["max_batch_size"] > 1
    finally:
        backend.close()


def test_shared_prompt_prefix_is_reused_with_identical_output(tiny_dir: Path, monkeypatch) -> None:
    """Prompts that start alike prefill only their own tokens, and answer exactly as without the cache."""
    preamble = "You are a careful assistant for a small software company. Answer briefly. " * 4
    questions = ["What is 2 + 2?", "Name a colour.", "Say hello.", "Reverse: a b c"]

    def answers(cache_mb: str) -> tuple[list[str], dict]:
        monkeypatch.setenv("GYM_PREFIX_CACHE_MB", cache_mb)
        backend = create_backend("transformers", resolve_source(str(tiny_dir), "tiny"))

        async def one(question: str, seed: int | None) -> str:
            params = SamplingParams(max_tokens=12, temperature=0.8 if seed is not None else 0.0, seed=seed)
            ids = backend.encode_text(preamble + question)
            return "".join([c.text async for c in backend.generate(ids, params)])

        async def scenario() -> list[str]:
            first = [await one(questions[0], None)]  # fills the cache
            together = await asyncio.gather(*(one(q, None) for q in questions))
            sampled = await asyncio.gather(*(one(q, 7) for q in questions))
            return first + list(together) + list(sampled)

        try:
            return asyncio.run(scenario()), backend.stats()
        finally:
            backend.close()

    cached, stats = answers("256")
    uncached, plain_stats = answers("0")
    assert cached == uncached
    assert cached[0] == cached[1]
    assert stats["prefix_cache_hits"] >= len(questions) and stats["prefix_cache_reused_tokens"] > 0
    assert plain_stats["prefix_cache_hits"] == 0


def test_torch_threads_follow_the_free_cores_unless_pinned(monkeypatch) -> None:
    import torch

    from gym.engine.cputhreads import ThreadPolicy

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("GYM_TORCH_THREADS", "1")
        assert ThreadPolicy().apply(force=True) == 1 and torch.get_num_threads() == 1
        monkeypatch.delenv("GYM_TORCH_THREADS")
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        policy = ThreadPolicy(interval=0.0)
        assert policy.pinned is None
        chosen = policy.apply(force=True)
        assert 1 <= chosen <= policy.cores and torch.get_num_threads() == chosen
        free = policy.free_cores()
        assert free is None or 0.0 <= free <= policy.cores
    finally:
        torch.set_num_threads(before)
