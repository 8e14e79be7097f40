"""``train.method`` -> the function that builds its Trainer. A plain dict filled by ``register_trainer``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config import GymConfig
    from gym.data.prepare import PreparedData


@dataclass
class TrainContext:
    """Everything a trainer builder needs. The model is loaded on first use of :attr:`model`.

    Lazy because not every method trains the causal LM the runner would load: a reward model is a
    sequence classifier, and training-free GRPO trains no weights at all.
    """

    config: GymConfig
    load_model: Callable[[], Any]
    tokenizer: Any
    data: PreparedData
    checkpoint_dir: Path
    callbacks: list[Any] = field(default_factory=list)
    # model name -> the OpenAI app serving it in process; handed down by the command that trains
    # (training-free GRPO's policy when train.grpo.api_base is unset); the serving layer sits above train/
    serve_local: Callable[[str], Any] | None = None
    _model: Any = None

    @property
    def has_eval(self) -> bool:
        """Whether there are held-out rows to evaluate (``datasets.eval_fraction``)."""
        return self.data.eval is not None and len(self.data.eval) > 0

    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = self.load_model()
        return self._model


TrainerBuilder = Callable[[TrainContext], Any]
TRAINERS: dict[str, TrainerBuilder] = {}


def register_trainer(method: str, builder: TrainerBuilder) -> TrainerBuilder:
    """Register ``builder`` for ``train.method = method`` (one per method)."""
    if method in TRAINERS:
        raise ValueError(f"a trainer for method {method!r} is already registered")
    TRAINERS[method] = builder
    return builder


def trainer_for(method: str) -> TrainerBuilder:
    """The builder of ``method``; importing the method modules registers them on first use."""
    import gym.train.methods  # noqa: F401  (registers the built-in methods)

    if method not in TRAINERS:
        raise ValueError(f"no trainer is available for train.method = {method!r} in this version of Gym")
    return TRAINERS[method]
