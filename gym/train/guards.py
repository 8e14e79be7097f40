"""Stop a run whose loss or weights stop being numbers, before they reach a checkpoint or the output.

A learning rate far too high, an fp16 overflow or a broken reward turns the loss into NaN or inf; the
Trainer would carry on (it even hides NaN steps from the logged loss unless told otherwise) and save
NaN weights over the last good ones. Gym stops at the first logged non-finite loss with one sentence,
refuses to mark a checkpoint whose weights are not finite, and never writes such weights as the result,
so the newest complete checkpoint stays the last good one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

LOSS_KEYS = ("loss", "train_loss", "policy_loss", "value_loss")


class NonFiniteError(ValueError):
    """The loss or the weights became NaN or infinite; the message is the one sentence the user sees."""


def last_good_checkpoint(folder: Path) -> str:
    from gym.train.checkpoints import checkpoints

    complete = [path for _, path, done in checkpoints(folder) if done]
    return (
        f"the last good checkpoint, {complete[-1]}, is kept" if complete else "no checkpoint was written yet"
    )


def non_finite_loss(step: int, name: str, value: float, learning_rate: float, folder: Path) -> NonFiniteError:
    return NonFiniteError(
        f"training stopped at step {step}: the {name.replace('_', ' ')} became {value} (the run diverged: lower "
        f"train.learning_rate, now {learning_rate:g}, or check the data and rewards), and "
        f"{last_good_checkpoint(folder)}"
    )


def non_finite_parameter(model: Any) -> str | None:
    """The name of the first trainable parameter holding NaN or inf, or None when all are finite."""
    import torch

    for name, parameter in model.named_parameters():
        if parameter.requires_grad and not bool(torch.isfinite(parameter.detach()).all()):
            return name
    return None


class FiniteGuard(TrainerCallback):
    """Raises :class:`NonFiniteError` at the first non-finite logged loss, or before saving NaN weights.

    The Trainer logs, then saves: a NaN loss stops the run before the checkpoint of that step is written;
    weights are checked at the end of each step that will save (``control.should_save``, set by the
    Trainer's flow callback, which runs first).
    """

    def __init__(self, learning_rate: float) -> None:
        self.learning_rate = learning_rate

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        for name in LOSS_KEYS:
            value = (logs or {}).get(name)
            if isinstance(value, (int, float)) and not math.isfinite(value):
                raise non_finite_loss(
                    state.global_step, name, value, self.learning_rate, Path(args.output_dir)
                )

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        # Before the save (and the rotation that would delete an older, good checkpoint), not after it.
        if model is None or not control.should_save:
            return
        bad = non_finite_parameter(model)
        if bad is not None:
            raise non_finite_weights(state.global_step, bad, self.learning_rate, Path(args.output_dir))


def non_finite_weights(step: int, name: str, learning_rate: float, folder: Path) -> NonFiniteError:
    return NonFiniteError(
        f"training stopped at step {step}: weight {name} became NaN or infinite (the run diverged: lower "
        f"train.learning_rate, now {learning_rate:g}, or check the data and rewards), and "
        f"{last_good_checkpoint(folder)}"
    )
