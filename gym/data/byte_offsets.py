"""Token positions from the token ids alone, for byte-level BPE tokenizers: batch tokenizing without offsets.

Assistant masks map character spans to tokens (gym/data/templates/masks.py, gym/data/splice.py), which
needs to know where each token starts. The fast tokenizer's ``encode_batch`` tracks every token's
character offsets for that, and that bookkeeping is about a third of the Rust time
(docs/performance.md). A byte-level BPE tokenizer (GPT-2, Llama 3, Qwen, Gym's own) writes
every byte of its input as exactly one byte of exactly one token, so the tokens' byte lengths, summed,
are each token's end in the UTF-8 bytes of the text: the offsets, without asking the tokenizer for them.

That holds only for some tokenizers, so nothing is assumed:
- a tokenizer qualifies when its model is BPE, its decoder is ``ByteLevel``, its normalizer is none or
  NFC, no added token strips the whitespace beside it, every other token's string is written in the
  byte-level alphabet (one character per byte), and a probe text holding every added token, spaces,
  tabs, newlines, punctuation, accents, CJK and an emoji gives exactly the positions the tokenizer's
  own offsets give (``char_to_token`` of every character, and every token's first character: this
  catches a post-processor that trims whitespace off the offsets);
- and then per text: its tokens' bytes must add up to the text's UTF-8 length (and an NFC tokenizer's
  text must already be NFC); a text that fails is tokenized again with offsets.
Anything else (SentencePiece, WordPiece, a normalizer that rewrites text) keeps ``encode_batch``.
``tests/data/test_byte_offsets.py`` compares both paths token for token on the real fixtures.
"""

from __future__ import annotations

import contextlib
import unicodedata
import weakref
from functools import lru_cache
from typing import Any

PROBE = " Hello world,\n\n  tab\tdone.\r\nx=1;  naïve café — 你好，世界 🙂 end "
_TABLES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_NO_TABLE = object()


@lru_cache(maxsize=1)
def _byte_alphabet() -> frozenset[str]:
    """The 256 characters byte-level BPE writes bytes as (GPT-2's ``bytes_to_unicode``)."""
    from tokenizers import pre_tokenizers

    return frozenset(pre_tokenizers.ByteLevel.alphabet())


class ByteOffsets:
    """What Gym reads of a tokenizers ``Encoding`` (``ids``, ``len``, ``char_to_token``, ``token_to_chars``),
    from the byte length of each token."""

    __slots__ = ("_ascii", "_ends", "_leads", "_text", "ids")

    def __init__(self, ids: Any, ends: Any, text: str, is_ascii: bool) -> None:
        self.ids = ids  # int32 array
        self._ends = ends  # byte offset just past each token
        self._text = text
        self._ascii = is_ascii
        self._leads: Any = None

    def __len__(self) -> int:
        return len(self.ids)

    def _byte(self, char: int) -> int:
        return char if self._ascii else len(self._text[:char].encode("utf-8"))

    def _char(self, byte: int) -> int:
        """The character that byte ``byte`` of the text belongs to."""
        if self._ascii:
            return byte
        if self._leads is None:
            import numpy as np

            raw = np.frombuffer(self._text.encode("utf-8"), dtype=np.uint8)
            self._leads = np.cumsum((raw & 0xC0) != 0x80)  # characters begun up to each byte
        return int(self._leads[byte]) - 1

    def char_to_token(self, char: int) -> int | None:
        import numpy as np

        if not 0 <= char < len(self._text) or not len(self.ids):
            return None
        token = int(np.searchsorted(self._ends, self._byte(char), side="right"))
        return token if token < len(self.ids) else None

    def token_to_chars(self, token: int) -> tuple[int, int]:
        start = int(self._ends[token - 1]) if token else 0
        return self._char(start), self._char(int(self._ends[token]) - 1) + 1


def _qualifies(tokenizer: Any, backend: Any) -> bool:
    from tokenizers import decoders, models, normalizers

    if not isinstance(backend.model, models.BPE) or not isinstance(backend.decoder, decoders.ByteLevel):
        return False
    if backend.normalizer is not None and not isinstance(backend.normalizer, normalizers.NFC):
        return False
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return not any(token.lstrip or token.rstrip for token in added.values())


def byte_lengths(tokenizer: Any) -> Any | None:
    """Each token id's length in bytes (a NumPy array), or None when the tokenizer does not qualify."""
    cached = _TABLES.get(tokenizer)
    if cached is None:
        cached = _table(tokenizer)
        with contextlib.suppress(TypeError):  # not weak-referenceable: measured again next time
            _TABLES[tokenizer] = _NO_TABLE if cached is None else cached
    return None if cached is _NO_TABLE else cached


def _table(tokenizer: Any) -> Any | None:
    import numpy as np

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch_fast") or not _qualifies(tokenizer, backend):
        return None
    vocab = backend.get_vocab(with_added_tokens=True)
    added = {token.content for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values()}
    plain = [token for token in vocab if token not in added]
    if not set("".join(plain)) <= _byte_alphabet():
        return None
    lengths = np.zeros(max(vocab.values(), default=-1) + 1, dtype=np.int64)
    lengths[np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab))] = np.fromiter(
        (len(token.encode("utf-8")) if token in added else len(token) for token in vocab),
        dtype=np.int64,
        count=len(vocab),
    )  # (a byte-level token writes one byte per character; an added token is matched as its UTF-8 text)
    return lengths if _probe_agrees(backend, lengths, added) else None


def _probe_agrees(backend: Any, lengths: Any, added: set[str]) -> bool:
    """Whether the derived positions equal the tokenizer's own offsets on a text made to find differences."""
    text = PROBE + PROBE.join(sorted(added)) + PROBE
    exact = backend.encode(text, add_special_tokens=False)
    derived = _view(backend.encode_batch_fast([text], add_special_tokens=False)[0], lengths, text)
    if derived is None or len(derived) != len(exact):
        return False
    same_chars = all(derived.char_to_token(c) == exact.char_to_token(c) for c in range(len(text)))
    return same_chars and all(
        derived.token_to_chars(t)[0] == exact.token_to_chars(t)[0] for t in range(len(exact))
    )


def _view(encoding: Any, lengths: Any, text: str) -> ByteOffsets | None:
    """The encoding's positions from byte lengths, or None when its bytes are not the text's bytes."""
    import numpy as np

    ids = np.asarray(encoding.ids, dtype=np.int32)
    try:
        ends = np.cumsum(lengths[ids])
    except IndexError:  # an id past the table: nothing can be said of its bytes
        return None
    size = int(ends[-1]) if len(ends) else 0
    is_ascii = text.isascii()
    if size != (len(text) if is_ascii else len(text.encode("utf-8"))):
        return None
    return ByteOffsets(ids, ends, text, is_ascii)


def encode_without_offsets(backend: Any, lengths: Any, texts: list[str]) -> list[Any]:
    """``texts`` tokenized by ``encode_batch_fast``, positions derived; a text whose bytes do not add up
    (or, for an NFC tokenizer, that NFC would change) is tokenized again by ``encode_batch``."""
    nfc = backend.normalizer is not None  # a qualifying tokenizer normalizes with NFC or not at all
    fast = backend.encode_batch_fast(texts, add_special_tokens=False)
    out: list[Any] = []
    again: list[int] = []
    for number, (text, encoding) in enumerate(zip(texts, fast, strict=True)):
        view = None if nfc and not unicodedata.is_normalized("NFC", text) else _view(encoding, lengths, text)
        if view is None:
            again.append(number)
        out.append(view)
    if again:
        for number, encoding in zip(
            again, backend.encode_batch([texts[n] for n in again], add_special_tokens=False), strict=True
        ):
            out[number] = encoding
    return out
