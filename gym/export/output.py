"""Where `gym export` may write, and writing there so that a failure leaves nothing behind.

An export reads a model folder (and, for a LoRA adapter, its base) and writes a new file or folder. The
output may never be inside a folder the export reads: `-o out/model.safetensors` used to replace the
trained weights with a GGUF file and print ✓. Nor may it replace anything that exists unless the user
says ``--overwrite``. The output is built under a temporary name beside its destination and renamed
into place only once it is finished and checked; folders created for it are removed again on failure.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gym.export.files import ExportError, read_json_object

FILE, FOLDER = "file", "folder"


def source_folders(path: Path) -> list[Path]:
    """The folders an export of ``path`` reads: ``path``, and a LoRA adapter's base when it is a local folder."""
    folders = [path]
    adapter_config = path / "adapter_config.json"
    if adapter_config.exists() or adapter_config.is_symlink():
        base = read_json_object(adapter_config).get("base_model_name_or_path")
        if not isinstance(base, str) or not base:
            raise ExportError(f"{adapter_config}: base_model_name_or_path is not the name of a base model")
        if Path(base).expanduser().is_dir():
            folders.append(Path(base).expanduser())
        elif base.startswith("builtin:"):  # built into the cache on first use: protect all of them
            from gym.files import gym_cache_home

            builtins = gym_cache_home() / "builtin"
            if builtins.is_dir():
                folders.append(builtins)
        elif base.startswith(("/", "./", "../", "~")):  # a path, not a Hub id or builtin: name
            raise ExportError(
                f"{adapter_config}: base_model_name_or_path {base!r} is not a folder here; "
                "copy the base model there or edit the path"
            )
    return folders


def _resolved(path: Path, what: str) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # a symbolic link loop (RuntimeError before Python 3.13)
        raise ExportError(f"{what} {path} is a symbolic link loop; choose another path") from None


def _resolved_or_none(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        return None  # a link loop in the model folder is reported when the export reads it


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []  # an unreadable folder is reported when the export reads it


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output(target: Path, sources: list[Path], overwrite: bool, kind: str) -> None:
    """Refuse ``target`` (a ``kind`` of FILE or FOLDER) when writing it would touch ``sources`` or,
    without ``overwrite``, anything that exists; also when its folder cannot be written."""
    shown = f"--output {target}"
    resolved = _resolved(target, "--output")
    exists = os.path.lexists(target)
    for source in sources:
        folder = _resolved(source, "the model folder")
        if resolved == folder or folder in resolved.parents:
            raise ExportError(
                f"{shown} is inside {source}, the model folder the export reads; write it elsewhere"
            )
        if resolved in folder.parents:
            raise ExportError(
                f"{shown} holds {source}, the model folder the export reads; choose another {kind}"
            )
        for entry in _entries(folder):  # a file of the folder may be a link to (or a hard link of) the target
            if _resolved_or_none(entry) == resolved or (exists and _same_file(entry, target)):
                raise ExportError(f"{shown} is {entry}, a file the export reads; write it elsewhere")
    if exists:
        _check_existing(target, shown, overwrite, kind)
    ancestor = resolved.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ExportError(f"{shown} cannot be created: {ancestor} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ExportError(f"{shown} cannot be written: {ancestor} is not writable (permission denied)")


def _check_existing(target: Path, shown: str, overwrite: bool, kind: str) -> None:
    try:
        mode = target.stat().st_mode
    except OSError:
        mode = None  # a link to nothing: replacing it replaces the link
    if kind == FILE and mode is not None and stat.S_ISDIR(mode):
        raise ExportError(f"{shown} is a folder; name the .gguf file to write")
    if kind == FOLDER and mode is not None and not stat.S_ISDIR(mode):
        raise ExportError(f"{shown} is a file; name the folder to write the model into")
    if mode is not None and not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
        raise ExportError(f"{shown} is not a regular file (a pipe, socket or device); choose another path")
    if not overwrite:
        raise ExportError(f"{shown} already exists; pass --overwrite to replace it, or choose another {kind}")


@contextmanager
def new_parents(target: Path) -> Iterator[None]:
    """Create the missing folders above ``target``; if the block fails, remove those that are still empty."""
    missing = []
    parent = target.parent
    while not parent.exists() and not parent.is_symlink():
        missing.append(parent)
        parent = parent.parent
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for folder in missing:  # deepest first
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def replace_folder(staging: Path, target: Path) -> None:
    """Rename the finished folder ``staging`` to ``target``, replacing an old one only after the rename."""
    if not os.path.lexists(target):
        os.rename(staging, target)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    os.rename(target, old)
    try:
        os.rename(staging, target)
    except OSError:
        os.rename(old, target)
        raise
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink(missing_ok=True)
