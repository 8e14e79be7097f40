"""The runner's one view of a trainer: Gym's own trainers implement it, anything else is refused."""

from __future__ import annotations

import pytest

from gym.train.ppo.trainer import PPOTrainer
from gym.train.trainer_protocol import GymTrainer, TransformersTrainer, as_gym_trainer
from gym.train.training_free.trainer import TrainingFreeTrainer

MEMBERS = [name for name in vars(GymTrainer) if not name.startswith("_") and callable(vars(GymTrainer)[name])]


@pytest.mark.parametrize("trainer", [PPOTrainer, TrainingFreeTrainer, TransformersTrainer])
def test_every_gym_trainer_implements_each_member_itself(trainer: type) -> None:
    assert GymTrainer in trainer.__mro__  # declared, not just duck-typed
    inherited = [name for name in MEMBERS if getattr(trainer, name) is getattr(GymTrainer, name)]
    assert inherited == [], f"{trainer.__name__} leaves {inherited} to the protocol's empty bodies"
    assert len(MEMBERS) == 9, MEMBERS  # tokens, plan, train, evaluate, restore, overrides, save, callbacks


def test_a_builder_returning_no_trainer_is_one_sentence() -> None:
    with pytest.raises(TypeError) as error:
        as_gym_trainer(object())
    assert str(error.value) == (
        "a trainer builder returned object, which is neither a transformers Trainer nor a "
        "gym.train.trainer_protocol.GymTrainer"
    )
