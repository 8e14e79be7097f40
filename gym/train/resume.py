"""Resume that ends exactly at the planned step, and a finished run that a rerun leaves alone.

transformers' training loop takes one optimizer step before it first asks whether to stop, so resuming
from ``checkpoint-N`` of a run planned for N steps used to train step N+1 (different weights, a fresh
loss curve). Gym works out the planned step count first (``GymTrainer.planned_steps``):

* the output folder already holds the finished result of this very run (same fingerprint and schedule,
  every file as written): nothing to do, nothing rewritten (:func:`finished_run`);
* the newest intact checkpoint is at the planned step (the run was killed after its last checkpoint,
  before or while writing the result): its weights and state are loaded and the result is written from
  them, no step trained (``GymTrainer.restore_checkpoint``);
* otherwise training resumes and stops at the planned step, as usual.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.train.checkpoints import CHECKPOINT, damage, folder_files
from gym.train.runner import RESULTS

if TYPE_CHECKING:
    from gym.config import GymConfig


def checkpoint_step(path: Path) -> int:
    """The step a checkpoint was written at: its trainer state, else its ``checkpoint-N`` name, else 0."""
    try:
        return int(json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))["global_step"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        match = CHECKPOINT.match(path.name)
        return int(match[1]) if match else 0


def schedule(config: GymConfig) -> dict[str, Any]:
    """The keys that decide how long a run trains; a finished run with other values is not finished."""
    return {"max_steps": config.train.max_steps, "epochs": config.train.epochs}


def completion_record(config: GymConfig, fingerprint: str, output: Path) -> dict[str, Any]:
    """What ``train_results.json`` adds so a rerun can tell it is already done (written last)."""
    # The weights, tokenizer and gym.toml training wrote: top-level files only, not checkpoints/, and not
    # what `gym eval` writes beside them later (the card and its results) from an earlier run.
    files = folder_files(output, skip=(RESULTS, "README.md", "eval_results.json"), recursive=False)
    return {"fingerprint": fingerprint, "schedule": schedule(config), "files": files}


def finished_run(config: GymConfig, fingerprint: str) -> dict[str, Any] | None:
    """The ``train_results.json`` of this very run when it finished and its output is intact, else None."""
    if config.train.resume != "auto" or (config.train.method == "grpo" and config.train.grpo.training_free):
        return None
    try:
        record = json.loads((config.output_path / RESULTS).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(record, dict) or record.get("fingerprint") != fingerprint:
        return None
    if record.get("schedule") != schedule(config) or not isinstance(record.get("files"), dict):
        return None
    if damage(config.output_path, record["files"]) is not None:
        return None
    return record
