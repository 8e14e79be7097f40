"""The tokenizer half of a GGUF file: token list, types, merges, special ids and chat template.

llama.cpp identifies a BPE tokenizer's pre-tokenizer by hashing its output on a probe text, and its
table does not know Gym's built-in tokenizer, so the name is chosen here from the tokenizer's own
structure and the architecture. Gym's llama.cpp backend feeds token ids made by the HF tokenizer, so
this metadata has to make the file load and decode, not re-implement the HF tokenizer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _pre_tokenizer_name(tokenizer_json: dict[str, Any], arch: str) -> str:
    """The llama.cpp pre-tokenizer for a byte-level BPE: GPT-2's regex, or the architecture's own."""
    pre = tokenizer_json.get("pre_tokenizer")
    pre = pre if isinstance(pre, dict) else {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt-2"  # a bare ByteLevel pre-tokenizer splits with GPT-2's pattern (builtin:tiny)
    return {"qwen2": "qwen2"}.get(arch, "llama-bpe")


def write_vocab(writer: Any, model_dir: Path, arch: str, n_vocab: int, special: Any) -> None:
    """Add the tokenizer of ``model_dir`` (its tokenizer.json) to ``writer``, padded to ``n_vocab`` rows.

    ``special`` is the ``gguf.SpecialVocab`` (special ids, merges, chat template) the checks read.
    """
    import gguf

    path = model_dir / "tokenizer.json"  # checked by gym.export.tokenizer_checks before conversion
    tokenizer_json = json.loads(path.read_text(encoding="utf-8"))
    model = tokenizer_json["model"]
    byte_fallback = bool(model.get("byte_fallback"))
    vocab: dict[str, int] = dict(model["vocab"])
    kinds: dict[int, int] = {}
    for added in tokenizer_json.get("added_tokens") or []:
        vocab[added["content"]] = added["id"]
        kinds[added["id"]] = gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
    by_id = {token_id: text for text, token_id in vocab.items()}
    size = n_vocab  # every id is below it (gym.export.tokenizer_checks)
    tokens, types = [], []
    for token_id in range(size):
        text = by_id.get(token_id)
        if text is None:
            tokens.append(f"[PAD{token_id}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        tokens.append(text)
        if token_id in kinds:
            types.append(kinds[token_id])
        elif byte_fallback and BYTE_TOKEN.fullmatch(text):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
    if byte_fallback:
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_scores([-1000.0 if kind != gguf.TokenType.NORMAL else 0.0 for kind in types])
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(_pre_tokenizer_name(tokenizer_json, arch))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special.add_to_gguf(writer, quiet=True)
