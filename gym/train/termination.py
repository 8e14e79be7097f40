"""SIGTERM during `gym train`: say that the run was stopped and where a rerun picks up, then die by it.

A scheduler, ``timeout`` or the web UI's forced stop sends SIGTERM. Python's default is to die
silently; the user is left guessing whether the steps so far are kept. :func:`say_where_a_rerun_resumes`
turns the signal into an exception in the main thread (a checkpoint being written at that moment is
left without its completion marker, so it is never resumed from), and once the caller has printed the
sentence, :func:`die_by_sigterm` ends the process by the same signal: a parent still sees "killed by
SIGTERM" (exit status 143 in a shell), as without the handler.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class Terminated(BaseException):
    """SIGTERM arrived; a BaseException so that no ``except Exception`` on the way swallows it."""


def _raise(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM while stopping changes nothing
    raise Terminated


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread."""
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) in (_raise, signal.SIG_IGN):
            signal.signal(signal.SIGTERM, previous)


def where_a_rerun_resumes(checkpoint_dir: Path, resume: str) -> str:
    """The sentence after a stop: the newest complete checkpoint a rerun continues from, or why none."""
    from gym.train.checkpoints import checkpoints

    if resume == "never":
        return "train.resume = 'never', so a rerun starts over from step 0"
    complete = [(step, path) for step, path, done in checkpoints(checkpoint_dir) if done]
    if not complete:
        return "no checkpoint was saved yet, so a rerun starts over from step 0"
    step, path = complete[-1]
    return f"a rerun resumes from checkpoint-{step} (step {step}, {path})"


def die_by_sigterm() -> None:
    """End the process by SIGTERM itself (default action), so its parent sees how it ended."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    raise SystemExit(128 + signal.SIGTERM)  # only reached where the signal is delivered late
