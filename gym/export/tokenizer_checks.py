"""The tokenizer files of a model folder, checked before GGUF conversion writes its token list.

The token list has one entry per embedding row, so every token id must be below ``vocab_size`` (llama.cpp's
own convert_hf_to_gguf.py asserts ``max(tokenizer.vocab.values()) < vocab_size``): an added token with id
10**12 would otherwise make the converter build a trillion-entry list. The other files the ``gguf``
package's SpecialVocab reads (tokenizer_config.json, chat templates) are bounded and must be JSON objects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym.export.files import (
    MAX_TOKENIZER_BYTES,
    ExportError,
    json_type,
    read_bytes,
    read_json_object,
    read_optional_json_object,
    shown,
)

MAX_TOKENIZER_CONFIG_BYTES = 16_000_000  # Gemma 3's tokenizer_config.json is 1.2 MB
RESIZE = "resize the model's embeddings to cover every token (model.resize_token_embeddings) and re-save it"


def check_tokenizer(model_dir: Path, vocab_size: int) -> Any:
    """tokenizer.json (BPE, ids below ``vocab_size``, well-formed merges) and its companion files; returns
    the ``gguf.SpecialVocab`` read from them (special ids, merges, chat template) for the converter."""
    path = model_dir / "tokenizer.json"
    if not path.exists() and not path.is_symlink():
        raise ExportError(
            f"{model_dir} has no tokenizer.json; GGUF export needs the fast tokenizer saved beside the weights"
        )
    tokenizer = read_json_object(path, MAX_TOKENIZER_BYTES)
    model = tokenizer.get("model")
    if not isinstance(model, dict):
        raise ExportError(
            f"{path}: its model is a JSON {json_type(model)}, not an object; re-save the tokenizer"
        )
    if model.get("type") != "BPE":
        raise ExportError(
            f"{path} is a {shown(model.get('type'))} tokenizer; GGUF export writes BPE tokenizers "
            "(byte-level as in Llama 3 and Qwen2, or byte-fallback as in Llama 2 and Mistral)"
        )
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not vocab:
        raise ExportError(
            f"{path}: model.vocab is not a non-empty object of tokens to ids; re-save the tokenizer"
        )
    for text, token_id in vocab.items():
        _check_id(path, text, token_id, vocab_size)
    added = tokenizer.get("added_tokens")
    if added is not None and not isinstance(added, list):
        raise ExportError(
            f"{path}: added_tokens is a JSON {json_type(added)}, not an array; re-save the tokenizer"
        )
    for entry in added or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise ExportError(
                f"{path}: an added token is {shown(entry)}, not an object with a string content"
            )
        _check_id(path, entry["content"], entry.get("id"), vocab_size)
    _check_merges(path, model.get("merges"))
    for name in ("tokenizer_config.json", "chat_template.json"):
        found = read_optional_json_object(model_dir / name, MAX_TOKENIZER_CONFIG_BYTES)
        _check_chat_template(model_dir / name, (found or {}).get("chat_template"))
    template = model_dir / "chat_template.jinja"
    if template.exists() or template.is_symlink():
        data, _ = read_bytes(template, MAX_TOKENIZER_CONFIG_BYTES)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise ExportError(
                f"{template}: is not UTF-8 text; it should hold the Jinja chat template"
            ) from None
    return _special_vocab(model_dir, vocab_size, byte_fallback=bool(model.get("byte_fallback")))


def _special_vocab(model_dir: Path, vocab_size: int, byte_fallback: bool) -> Any:
    """The gguf package's reading of the special tokens; it walks post_processor and tokenizer_config.json
    with ``.get`` and indexing, without checking their shapes, so its errors are the files' fault."""
    import gguf

    try:
        return gguf.SpecialVocab(model_dir, load_merges=not byte_fallback, n_vocab=vocab_size)
    except (ValueError, TypeError, AttributeError, KeyError, IndexError) as error:
        from gym.failures import first_line

        raise ExportError(
            f"{model_dir}: tokenizer.json or tokenizer_config.json is not in the shape the gguf package reads "
            f"({first_line(error)}); re-save the tokenizer with transformers"
        ) from None


def _check_id(path: Path, text: str, token_id: Any, vocab_size: int) -> None:
    if not isinstance(token_id, int) or isinstance(token_id, bool) or token_id < 0:
        raise ExportError(f"{path}: token {text[:40]!r} has id {shown(token_id)}, not a non-negative integer")
    if token_id >= vocab_size:
        raise ExportError(
            f"{path}: token {text[:40]!r} has id {token_id:,}, but the model has {vocab_size:,} embedding rows "
            f"(vocab_size in config.json); {RESIZE}"
        )


def _check_chat_template(path: Path, template: Any) -> None:
    """A chat template is a string, or a list of named ones ({"name": ..., "template": ...}) as GGUF stores."""
    if template is None or isinstance(template, str):
        return
    if isinstance(template, list) and all(
        isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)
        for t in template
    ):
        return
    raise ExportError(
        f"{path}: chat_template is {shown(template)}, not a template string or a list of "
        '{"name": ..., "template": ...} objects; re-save the tokenizer'
    )


def _check_merges(path: Path, merges: Any) -> None:
    """BPE merges are all strings ("a b") or all pairs of strings (["a", "b"], transformers >= 4.45)."""
    if merges is None:
        return
    if isinstance(merges, list) and (
        all(isinstance(m, str) for m in merges)
        or all(isinstance(m, list) and len(m) == 2 and all(isinstance(p, str) for p in m) for m in merges)
    ):
        return
    raise ExportError(
        f'{path}: model.merges is not a list of merges ("a b" strings or [a, b] pairs); re-save the tokenizer'
    )
