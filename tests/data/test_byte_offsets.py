"""Positions derived from byte lengths are the tokenizer's own offsets, or the tokenizer is not trusted.

gym/data/byte_offsets.py tokenizes without offsets where a tokenizer is byte-level BPE and derives where
each token starts. Here both ways run on real text (the LLaMA-Factory fixtures: English, Chinese, tool
calls, when ../shared/fixtures is there; a generated mix otherwise) with tokenizers trained in the test
in the shapes real models ship (Gym's own, Qwen2's NFC + split regex + byte-level, GPT-2's with a
post-processor that trims offsets, SentencePiece's Metaspace), and every character's token and every
token's first character must agree, or the tokenizer must fall back to ``encode_batch``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym.data.byte_offsets import ByteOffsets, byte_lengths, encode_without_offsets
from gym.data.templates.masks import encode_texts

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "llamafactory-data"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)


def _texts() -> list[str]:
    texts = []
    if FIXTURES.is_dir():
        for name in ("alpaca_en_demo.json", "alpaca_zh_demo.json", "glaive_toolcall_en_demo.json"):
            rows = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
            texts += [json.dumps(row, ensure_ascii=False) for row in rows[:120]]
    mix = "Hello,  world!\n\n\tcafé naïve — 你好，世界 🙂 x=1; e\u0301 "  # e + combining accent: not NFC
    texts += [
        f"<|im_start|>user\n{mix * k}<|im_end|>\n<|im_start|>assistant\n{mix}<|im_end|>" for k in range(1, 40)
    ]
    return texts


def _byte_level(*, nfc: bool, split: bool, trim: bool):
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    if nfc:
        backend.normalizer = normalizers.NFC()
    if split:
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])  # fmt: skip
    else:
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.post_processor = processors.ByteLevel(trim_offsets=trim)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(_texts(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def _metaspace():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    backend.train_from_iterator(
        _texts(), trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", *SPECIAL])
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def _assert_same_positions(tokenizer, texts: list[str]) -> None:
    exact = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    derived = encode_texts(tokenizer, texts)
    for text, ours, theirs in zip(texts, derived, exact, strict=True):
        assert list(ours.ids) == list(theirs.ids)
        assert len(ours) == len(theirs)
        for char in range(len(text) + 1):
            assert ours.char_to_token(char) == theirs.char_to_token(char), (text[:60], char)
        for token in range(len(theirs)):
            assert ours.token_to_chars(token)[0] == theirs.token_to_chars(token)[0], (text[:60], token)


@pytest.mark.parametrize(
    "shape",
    [
        {"nfc": False, "split": False, "trim": False},  # Gym's builtin tokenizer's shape
        {"nfc": True, "split": True, "trim": False},  # Qwen2 / Qwen3
    ],
)
def test_byte_level_tokenizers_skip_offsets_and_get_the_same_positions(shape) -> None:
    tokenizer = _byte_level(**shape)
    assert byte_lengths(tokenizer) is not None
    texts = _texts()
    derived = encode_texts(tokenizer, texts)
    views = [isinstance(encoding, ByteOffsets) for encoding in derived]
    assert sum(views) >= len(texts) - 39  # only the generated non-NFC texts may fall back (NFC tokenizer)
    if not shape["nfc"]:
        assert all(views)
    _assert_same_positions(tokenizer, texts)


def test_the_builtin_tokenizer_takes_the_fast_path() -> None:
    from transformers import AutoTokenizer

    from gym.model.builtin import ensure_builtin

    tokenizer = AutoTokenizer.from_pretrained(ensure_builtin("builtin:tiny"))
    assert byte_lengths(tokenizer) is not None
    _assert_same_positions(tokenizer, _texts())


def test_a_post_processor_that_trims_offsets_is_caught_by_the_probe() -> None:
    tokenizer = _byte_level(nfc=False, split=False, trim=True)
    assert byte_lengths(tokenizer) is None  # trimmed offsets differ from the bytes: keep encode_batch
    _assert_same_positions(tokenizer, _texts()[:50])


def test_sentencepiece_style_tokenizers_keep_offsets() -> None:
    tokenizer = _metaspace()
    assert byte_lengths(tokenizer) is None
    _assert_same_positions(tokenizer, _texts()[:50])


def test_a_text_whose_bytes_do_not_add_up_is_tokenized_again_with_offsets() -> None:
    tokenizer = _byte_level(nfc=False, split=False, trim=False)
    backend = tokenizer.backend_tokenizer
    lengths = byte_lengths(tokenizer).copy()
    lengths[backend.token_to_id("<|im_end|>")] += 1  # as if that token stood for one more byte
    texts = ["<|im_start|>user\nHi<|im_end|>", "no special token here"]
    out = encode_without_offsets(backend, lengths, texts)
    assert not isinstance(out[0], ByteOffsets)  # the Rust encoding, with offsets
    assert isinstance(out[1], ByteOffsets)
    assert out[0].offsets == backend.encode(texts[0], add_special_tokens=False).offsets
