"""Checkpoints that are either complete or ignored, and finding the one to resume from.

transformers' Trainer writes ``checkpoint-N`` in place (weights, optimizer, RNG, trainer state). A kill
in the middle leaves a folder that looks like a checkpoint but is not one. Gym marks a checkpoint
complete only after the Trainer has finished writing it (the ``on_save`` callback runs after the last
file), writing the marker atomically; resume takes the newest marked checkpoint and removes unmarked
leftovers, so a crash during a save costs at most the steps since the previous checkpoint.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from gym.files import atomic_write_text

MARKER = "gym_complete.json"
# Keys that may change between a run and its resumption: how long to train and how to log or save.
RESUMABLE_CHANGES = {
    "max_steps",
    "epochs",
    "save_steps",
    "save_total_limit",
    "logging_steps",
    "resume",
    "report_to",
    "cpu_threads",
}
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


class ResumeError(Exception):
    """``train.resume`` names something that cannot be resumed from."""


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


class CompleteCheckpoints(TrainerCallback):
    """Marks each checkpoint complete (with the run's fingerprint) once the Trainer has written all of it."""

    def __init__(self, fingerprint: str = "") -> None:
        self.fingerprint = fingerprint

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            marker = {"step": state.global_step, "time": time.time(), "fingerprint": self.fingerprint}
            atomic_write_text(folder / MARKER, json.dumps(marker))


def _fingerprint_of(path: Path) -> str:
    try:
        return str(json.loads((path / MARKER).read_text()).get("fingerprint", ""))
    except (OSError, json.JSONDecodeError):
        return ""


def checkpoints(folder: Path) -> list[tuple[int, Path, bool]]:
    """(step, path, complete) of every ``checkpoint-N`` in ``folder``, oldest first."""
    found = []
    if folder.is_dir():
        for child in folder.iterdir():
            match = CHECKPOINT.match(child.name)
            if match and child.is_dir():
                found.append((int(match[1]), child, (child / MARKER).is_file()))
    return sorted(found)


def resume_point(folder: Path, resume: str, fingerprint: str = "", warn: Any = None) -> Path | None:
    """The checkpoint to resume from for ``train.resume`` ('auto', 'never' or a path), or None.

    With 'auto', checkpoints written under another model, data or training settings (another
    fingerprint) are passed over with a warning, and incomplete ones are removed.
    """
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
    stale = []
    for _, path, is_complete in checkpoints(folder):
        if not is_complete:  # written by a run that died while saving: never resume from it
            shutil.rmtree(path, ignore_errors=True)
        elif fingerprint and _fingerprint_of(path) != fingerprint:
            stale.append(path.name)
        else:
            complete = path
    if stale and warn is not None:
        warn(
            f"not resuming from {', '.join(stale)} in {folder}: written with other model, data or training "
            "settings; training starts over (set train.resume = 'never' to skip this check)"
        )
    return complete
