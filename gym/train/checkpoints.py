"""Checkpoints that are either complete or ignored, and finding the one to resume from.

transformers' Trainer writes ``checkpoint-N`` in place (weights, optimizer, RNG, trainer state). A kill
in the middle leaves a folder that looks like a checkpoint but is not one. Gym marks a checkpoint
complete only after the Trainer has finished writing it (the ``on_save`` callback runs after the last
file), writing the marker atomically; resume takes the newest marked checkpoint and removes unmarked
leftovers, so a crash during a save costs at most the steps since the previous checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

MARKER = "gym_complete.json"
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


class ResumeError(Exception):
    """``train.resume`` names something that cannot be resumed from."""


def _atomic_write(path: Path, text: str) -> None:
    staging = path.with_name(f".{path.name}.tmp")
    with staging.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)


class CompleteCheckpoints(TrainerCallback):
    """Marks each checkpoint complete once the Trainer has written all of it."""

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            _atomic_write(folder / MARKER, json.dumps({"step": state.global_step, "time": time.time()}))


def checkpoints(folder: Path) -> list[tuple[int, Path, bool]]:
    """(step, path, complete) of every ``checkpoint-N`` in ``folder``, oldest first."""
    found = []
    if folder.is_dir():
        for child in folder.iterdir():
            match = CHECKPOINT.match(child.name)
            if match and child.is_dir():
                found.append((int(match[1]), child, (child / MARKER).is_file()))
    return sorted(found)


def resume_point(folder: Path, resume: str) -> Path | None:
    """The checkpoint to resume from for ``train.resume`` ('auto', 'never' or a path), or None."""
    if resume == "never":
        return None
    if resume != "auto":
        path = Path(resume).expanduser()
        if not (path / "trainer_state.json").is_file():
            raise ResumeError(
                f"train.resume = {resume!r} is not a checkpoint folder (no trainer_state.json in it)"
            )
        return path
    complete = None
    for _, path, is_complete in checkpoints(folder):
        if is_complete:
            complete = path
        else:  # written by a run that died while saving: never resume from it
            shutil.rmtree(path, ignore_errors=True)
    return complete
