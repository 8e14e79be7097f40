"""The one face every trainer shows the runner, so :func:`gym.train.runner.run_training` has one code path.

Gym's own trainers (PPO, training-free GRPO) implement :class:`GymTrainer` directly; the transformers /
TRL trainers, which Gym does not own, are wrapped in :class:`TransformersTrainer`. A method registered
with :func:`gym.train.registry.register_trainer` may return either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class GymTrainer(Protocol):
    """What the runner uses of a trainer: it trains, counts tokens, reports, restores and saves.

    ``state`` has ``global_step`` and ``log_history`` (a transformers ``TrainerState`` or the like);
    ``accelerator`` has ``is_main_process``, ``num_processes`` and ``wait_for_everyone()``; ``model`` is
    the trained model (None when no weights train); ``args`` the ``TrainingArguments`` (None without any).
    """

    state: Any
    accelerator: Any
    model: Any
    args: Any

    def tokens_trained(self) -> int:
        """Tokens trained on so far (the progress bar's throughput and train_results.json's ``tokens``)."""
        ...

    def planned_steps(self) -> int | None:
        """Optimizer steps this run trains in all, or None when there is no fixed plan."""
        ...

    def train(self, resume_from_checkpoint: str | None = None) -> Any:
        """Train to the end, from the checkpoint folder when given."""
        ...

    def evaluate(self) -> Any:
        """Score the held-out rows now (called only when ``args.eval_strategy`` is not 'no')."""
        ...

    def restore_checkpoint(self, folder: Path) -> None:
        """Load checkpoint ``folder`` without training (the run was killed after its last checkpoint)."""
        ...

    def result_overrides(self) -> dict[str, Any]:
        """What train_results.json should say instead of the runner's numbers (extra keys are added as is)."""
        ...

    def save_model(self, output_dir: str) -> None:
        """Write the result (weights, adapter or library) into ``output_dir``."""
        ...

    def remove_callback(self, callback: Any) -> None:
        """Drop a callback (or every instance of a callback class)."""
        ...

    def add_step_callback(self, callback: Any) -> bool:
        """Call ``callback`` (a TrainerCallback) at every optimizer step; False when this trainer does not."""
        ...


class TransformersTrainer(GymTrainer):
    """A transformers ``Trainer`` (TRL's included) as a :class:`GymTrainer`."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    @property
    def state(self) -> Any:
        return self.trainer.state

    @property
    def accelerator(self) -> Any:
        return self.trainer.accelerator

    @property
    def model(self) -> Any:
        return self.trainer.model

    @property
    def args(self) -> Any:
        return self.trainer.args

    def tokens_trained(self) -> int:
        # Gym's subclasses (SFT, GRPO, SimPO/ORPO) count ``gym_tokens``; TRL's own trainers count none.
        return int(getattr(self.trainer, "gym_tokens", 0))

    def planned_steps(self) -> int | None:
        args = self.trainer.args
        if args.max_steps > 0:
            return int(args.max_steps)
        return int(self.trainer.set_initial_training_values(args, self.trainer.get_train_dataloader())[-1])

    def train(self, resume_from_checkpoint: str | None = None) -> Any:
        return self.trainer.train(resume_from_checkpoint=resume_from_checkpoint)

    def evaluate(self) -> Any:
        return self.trainer.evaluate()

    def restore_checkpoint(self, folder: Path) -> None:
        from transformers import TrainerState

        self.trainer._load_from_checkpoint(str(folder))  # the Trainer's own loader: weights, adapters, shards
        self.trainer.state = TrainerState.load_from_json(str(folder / "trainer_state.json"))

    def result_overrides(self) -> dict[str, Any]:
        return {}

    def save_model(self, output_dir: str) -> None:
        self.trainer.save_model(output_dir)

    def remove_callback(self, callback: Any) -> None:
        self.trainer.remove_callback(callback)

    def add_step_callback(self, callback: Any) -> bool:
        self.trainer.add_callback(callback)
        return True


def as_gym_trainer(trainer: Any) -> GymTrainer:
    """``trainer`` as the runner drives it: a transformers Trainer wrapped, a GymTrainer as it is."""
    from transformers import Trainer

    if isinstance(trainer, Trainer):
        return TransformersTrainer(trainer)
    if isinstance(trainer, GymTrainer):
        return trainer
    raise TypeError(
        f"a trainer builder returned {type(trainer).__name__}, which is neither a transformers Trainer "
        "nor a gym.train.trainer_protocol.GymTrainer"
    )
