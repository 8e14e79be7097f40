"""Where prepared (tokenized) data is cached, and the key that decides when it can be reused.

The key covers everything that changes the tokens: each dataset's settings and file contents (or Hub
id and revision), the tokenizer (vocabulary, special tokens, chat template), the method,
``max_length``, the held-out split and this pipeline's own version. A finished cache entry is written
to a staging folder and renamed into place, so a crash never leaves a half-written entry that looks
complete.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gym.files import gym_cache_home, publish_folder

PIPELINE_VERSION = 3  # 2: full_length column, fitted messages, every method fitted; 3: one Arrow file a split
DONE = "gym_prepared.json"
TRAIN_FILE, EVAL_FILE = "train.arrow", "eval.arrow"  # Arrow streams, as `datasets` writes its cache files


def cache_root() -> Path:
    """``$GYM_CACHE_DIR`` or ``$XDG_CACHE_HOME/gym`` (``~/.cache/gym``), plus ``data``."""
    base = os.environ.get("GYM_CACHE_DIR")
    return (Path(base) if base else gym_cache_home()) / "data"


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_fingerprint(path: Path) -> list[tuple[str, str]]:
    """(name, sha256) of a dataset file or of every file in a dataset folder."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [(str(p.relative_to(path) if path.is_dir() else p.name), _digest_or_reason(p)) for p in files]


def _digest_or_reason(path: Path) -> str:
    """A file's sha256, or why it could not be read (a file beside the data the loader never opens)."""
    try:
        return file_digest(path)
    except OSError as error:
        return f"unreadable: {error.strerror or error}"


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash of what the tokenizer does: its serialized model, special tokens and chat template."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    body = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    extra = json.dumps(
        {"special": getattr(tokenizer, "special_tokens_map", {}), "template": tokenizer.chat_template},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256((body + extra).encode()).hexdigest()


def cache_key(parts: dict[str, Any]) -> str:
    blob = json.dumps({"pipeline": PIPELINE_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def write_entry(final: Path, fill: Callable[[Path], None]) -> Path:
    """Create cache entry ``final`` by calling ``fill(staging_folder)``, then renaming it into place."""
    return publish_folder(final, fill, DONE)
