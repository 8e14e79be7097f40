"""Checkpoints that are either complete and intact or ignored, and finding the one to resume from.

transformers' Trainer writes ``checkpoint-N`` in place (weights, optimizer, RNG, trainer state). A kill
in the middle leaves a folder that looks like a checkpoint but is not one. Gym marks a checkpoint
complete only after the Trainer has finished writing it (the ``on_save`` callback runs after the last
file), writing the marker atomically; resume takes the newest marked checkpoint and removes unmarked
leftovers, so a crash during a save costs at most the steps since the previous checkpoint.

The marker also records the size and SHA-256 of every file in the checkpoint. A checkpoint damaged
after it was written (a partial bucket sync after a preemption truncates ``model.safetensors`` or
``optimizer.pt``) fails that check and is passed over, with a one-line warning, for the newest intact
one, instead of crashing every rerun inside torch.load.

The Trainer callback that writes the markers is :mod:`gym.train.checkpoint_callback`: this module
imports no model library, so a run refuses a foreign checkpoint folder before loading one.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gym.files import atomic_write_text
from gym.train.errors import ResumeError

MARKER = "gym_complete.json"
# Keys that may change between a run and its resumption: how long to train and how to log or save.
RESUMABLE_CHANGES = {
    "max_steps",
    "epochs",
    "save_steps",
    "save_total_limit",
    "logging_steps",
    "eval_steps",
    "resume",
    "report_to",
    "cpu_threads",
}
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def training_fingerprint(config: Any, data: str = "") -> str:
    """Hash of everything that shapes the weights: model, data and training settings.

    ``data`` is the content hash of the prepared rows (:attr:`PreparedData.fingerprint`: the data files'
    bytes, tokenizer, template and lengths), so editing ``train.jsonl`` in place changes it as surely as
    editing the config. A checkpoint resumes only a run with the same fingerprint, so editing the
    learning rate or the data never silently continues from weights trained another way; extending
    ``max_steps`` does resume.
    """
    import hashlib

    train = {k: v for k, v in config.train.model_dump(mode="json").items() if k not in RESUMABLE_CHANGES}
    blob = json.dumps(
        {"model": config.model.model_dump(mode="json"), "datasets": [d.model_dump(mode="json") for d in config.datasets],
         "train": train, "data": data},
        sort_keys=True,
    )  # fmt: skip
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


FULL_HASH_LIMIT = 256 * 2**20  # files up to this size are hashed whole
SAMPLE_BLOCK, SAMPLE_BLOCKS = 2**20, 64  # larger ones: 64 evenly spaced 1 MiB blocks plus the last one


def file_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def sampled_digest(path: Path) -> str:
    """SHA-256 of evenly spaced blocks and the tail of a large file: catches zeroed or foreign regions.

    Hashing a multi-GB optimizer state whole at every save would cost minutes (about 0.5 GB/s measured
    here); the size check already catches truncation, the sample catches a file of the right size with
    the wrong content.
    """
    size = path.stat().st_size
    digest = hashlib.sha256()
    offsets = [size * i // SAMPLE_BLOCKS for i in range(SAMPLE_BLOCKS)] + [max(0, size - SAMPLE_BLOCK)]
    with path.open("rb") as handle:
        for offset in offsets:
            handle.seek(offset)
            digest.update(handle.read(SAMPLE_BLOCK))
    return digest.hexdigest()


def file_record(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    if size <= FULL_HASH_LIMIT:
        return {"size": size, "sha256": file_digest(path)}
    return {"size": size, "sampled_sha256": sampled_digest(path)}


def folder_files(
    folder: Path, skip: tuple[str, ...] = (MARKER,), *, recursive: bool = True
) -> dict[str, dict[str, Any]]:
    """``{relative path: {"size", "sha256" or "sampled_sha256"}}`` of every file under ``folder`` but ``skip``."""
    files = {}
    for path in sorted(folder.rglob("*") if recursive else folder.iterdir()):
        name = path.relative_to(folder).as_posix()
        if path.is_file() and name not in skip and not path.name.startswith("."):
            files[name] = file_record(path)
    return files


def damage(folder: Path, files: dict[str, dict[str, Any]]) -> str | None:
    """Why ``folder`` no longer holds the ``files`` recorded in its marker (first problem found), or None.

    Sizes are compared first (a truncated file is caught without reading it), then the hashes.
    """
    for name, expected in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != expected.get("size"):
            return f"{name} has {size:,} bytes, {expected.get('size', 0):,} were written"
    for name, expected in files.items():
        whole, sampled = expected.get("sha256"), expected.get("sampled_sha256")
        if (whole and file_digest(folder / name) != whole) or (
            sampled and sampled_digest(folder / name) != sampled
        ):
            return f"{name} does not match the hash recorded when it was written"
    return None


def write_marker(folder: Path, step: int, fingerprint: str) -> None:
    """Mark ``folder`` complete: step, fingerprint and the size and hash of every file, written atomically."""
    marker = {
        "format": 2,
        "step": step,
        "time": time.time(),
        "fingerprint": fingerprint,
        "files": folder_files(folder),
    }
    atomic_write_text(folder / MARKER, json.dumps(marker, indent=1))


def read_marker(path: Path) -> dict[str, Any] | None:
    """The completion marker of checkpoint ``path``; None when it is missing or unreadable."""
    try:
        marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return marker if isinstance(marker, dict) else None


def _fingerprint_of(path: Path) -> str:
    return str((read_marker(path) or {}).get("fingerprint", ""))


def checkpoint_damage(path: Path) -> str | None:
    """Why the complete checkpoint ``path`` cannot be resumed from any more, or None when it is intact.

    Checkpoints marked before markers recorded their files (format 1) are trusted as before.
    """
    marker = read_marker(path)
    if marker is None:
        return f"its completion marker {MARKER} is unreadable"
    files = marker.get("files")
    return damage(path, files) if isinstance(files, dict) else None


def checkpoints(folder: Path) -> list[tuple[int, Path, bool]]:
    """(step, path, complete) of every ``checkpoint-N`` in ``folder``, oldest first."""
    found = []
    if folder.is_dir():
        for child in folder.iterdir():
            match = CHECKPOINT.match(child.name)
            if match and child.is_dir():
                found.append((int(match[1]), child, (child / MARKER).is_file()))
    return sorted(found)


OWNER = (
    "gym_checkpoints.txt"  # in the checkpoints folder: its checkpoint-N folders are Gym's to resume or remove
)


def claim_checkpoint_folder(folder: Path) -> None:
    """Refuse a checkpoint folder whose ``checkpoint-N`` folders Gym did not write (checked before anything
    is written): resuming would load them, and cleaning up or rotating (save_total_limit) would delete them."""
    found = checkpoints(folder)
    if found and not (folder / OWNER).is_file() and not any(done for _, _, done in found):
        names = ", ".join(path.name for _, path, _ in found[:3]) + (", ..." if len(found) > 3 else "")
        raise ResumeError(
            f"{folder} holds checkpoint folders Gym did not write ({names}); Gym would resume from them "
            "or delete them: move them elsewhere, or set project.output_dir to another folder"
        )


def mark_checkpoint_folder(folder: Path) -> None:
    """Write the marker of a folder :func:`claim_checkpoint_folder` accepted, once training is about to
    start: a run refused before training (bad rows, no reward) leaves nothing behind."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / OWNER).is_file():
        atomic_write_text(folder / OWNER, "Checkpoints written by Gym: it resumes from and removes them.\n")


def resume_point(
    folder: Path,
    resume: str,
    fingerprint: str = "",
    warn: Callable[[str], None] | None = None,
    max_step: int | None = None,
) -> Path | None:
    """The checkpoint to resume from for ``train.resume`` ('auto', 'never' or a path), or None.

    With 'auto', checkpoints written under another model, data or training settings (another
    fingerprint) and checkpoints past ``max_step`` (the run was shortened) are passed over with a
    warning; incomplete ones are removed, and so are damaged ones (files changed since their marker was
    written), the newest intact checkpoint being used instead, with a one-line warning.
    """
    if resume == "never":
        return None
    if resume != "auto":
        path = Path(resume).expanduser()
        if not (path / "trainer_state.json").is_file():
            raise ResumeError(
                f"train.resume = {resume!r} is not a checkpoint folder (no trainer_state.json in it)"
            )
        problem = checkpoint_damage(path) if (path / MARKER).is_file() else None
        if problem:
            raise ResumeError(f"train.resume = {resume!r} is damaged: {problem}")
        return path
    candidates = []
    stale, beyond = [], []
    for step, path, is_complete in checkpoints(folder):
        if not is_complete:  # written by a run that died while saving: never resume from it
            shutil.rmtree(path, ignore_errors=True)
        elif fingerprint and _fingerprint_of(path) != fingerprint:
            stale.append(path.name)
        elif max_step is not None and step > max_step:
            beyond.append(path.name)
        else:
            candidates.append(path)
    say = warn or (lambda message: None)
    if stale:
        say(
            f"not resuming from {', '.join(stale)} in {folder}: written with other model, data or training "
            "settings; training starts over (set train.resume = 'never' to skip this check)"
        )
    if beyond:
        say(f"not resuming from {', '.join(beyond)}: past train.max_steps = {max_step}")
    for index in range(len(candidates) - 1, -1, -1):  # newest first; the first intact one wins
        path = candidates[index]
        problem = checkpoint_damage(path)
        if problem is None:
            return path
        shutil.rmtree(path, ignore_errors=True)
        older = candidates[index - 1].name if index else None
        say(
            f"{path.name} is damaged ({problem}) and was removed; "
            + (f"trying {older} instead" if older else "no older checkpoint: training starts over")
        )
    return None
