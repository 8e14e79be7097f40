"""The Trainer callback that marks a checkpoint complete (:mod:`gym.train.checkpoints` says why).

Apart from that module because it subclasses transformers' ``TrainerCallback``: the checks a run makes
before it loads anything (whose checkpoint folder this is, where a rerun resumes) import no model library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from gym.train.checkpoints import write_marker


class CompleteCheckpoints(TrainerCallback):
    """Marks each checkpoint complete (with the run's fingerprint) once the Trainer has written all of it."""

    def __init__(self, fingerprint: str = "") -> None:
        self.fingerprint = fingerprint

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            write_marker(folder, state.global_step, self.fingerprint)
