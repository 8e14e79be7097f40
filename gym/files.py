"""Where Gym caches things, and writing files and folders so a crash never leaves half of one.

Standard library only: imported by the config, data, model and training layers alike.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def gym_cache_home() -> Path:
    """``$XDG_CACHE_HOME/gym`` (``~/.cache/gym`` by default): built-in models, eval tasks, prepared data."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gym"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` so that ``path`` is always either the old file or the whole new one (fsynced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with staging.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)


def publish_folder(final: Path, fill: Callable[[Path], None], marker: str) -> Path:
    """Create folder ``final`` by calling ``fill(staging)`` on a sibling, then renaming it into place.

    ``marker`` is the file a finished folder holds. A folder without it (an interrupted run) is replaced;
    one with it (written meanwhile by another process) wins, and this staging copy is dropped.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        fill(staging)
        if final.exists():
            if (final / marker).is_file():
                return final
            shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final
