"""GRPO on TRL's GRPOTrainer: sample ``group_size`` answers per prompt, reward them, learn from the spread.

Rows become TRL's conversational prompt format, ``{"prompt": [messages], "reference": answer}``: the
prompt ends with a user turn (an SFT row's final assistant answer is split off and used as the
reference when the row has none), and ``reference`` reaches every reward function as a keyword list
(see :mod:`gym.train.rewards`). Generation runs through transformers' ``generate`` (no vLLM), so it
works on a CPU and on any single GPU.

TRL counts its batch in completions, and every batch must hold whole groups of ``group_size``
completions of one prompt, so ``train.batch_size`` is rounded up to a multiple of ``group_size``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gym.train.arguments import common_arguments
from gym.train.methods.rows import prompt_and_reference, require_rows, to_dataset
from gym.train.registry import TrainContext, register_trainer

if TYPE_CHECKING:
    from datasets import Dataset

    from gym.config import GymConfig


def prompt_rows(rows: Dataset) -> Dataset:
    """Prepared rows as TRL's conversational prompt format with a ``reference`` column for the rewards."""
    require_rows(rows, "grpo")
    converted = []
    for row in rows.select_columns(["messages", "reference"]):
        messages, reference = prompt_and_reference(row, "grpo")
        converted.append({"prompt": messages, "reference": reference})
    return to_dataset(converted, ("prompt",))


def reward_functions(config: GymConfig) -> list[Any]:
    """``train.grpo.reward`` resolved to functions; an unknown or broken reward is a one-sentence ValueError."""
    from gym.train.rewards import RewardError, resolve_rewards

    try:
        return resolve_rewards(config.train.grpo.reward, config.base_dir)
    except RewardError as error:
        raise ValueError(str(error)) from error


def completions_per_device(config: GymConfig) -> int:
    """``train.batch_size`` rounded up to whole groups, as TRL's divisibility checks require."""
    group = config.train.grpo.group_size
    return group * max(1, math.ceil(config.train.batch_size / group))


def _trainer_class() -> type:
    from trl import GRPOTrainer

    class GymGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that reports the prompt and completion tokens it trained on to Gym's progress bar."""

        @property
        def gym_tokens(self) -> int:
            return int(self.state.num_input_tokens_seen or 0)

    return GymGRPOTrainer


def build_grpo(ctx: TrainContext) -> Any:
    from trl import GRPOConfig

    config = ctx.config
    grpo = config.train.grpo
    if grpo.training_free:  # frozen weights, a learned experience library: a different loop altogether
        from gym.train.training_free.trainer import build_training_free

        return build_training_free(ctx)
    rewards = reward_functions(config)
    train = prompt_rows(ctx.data.train)
    evaluation = prompt_rows(ctx.data.eval) if ctx.data.eval is not None else None
    arguments = common_arguments(config, ctx.checkpoint_dir, evaluate=ctx.has_eval)
    batch = completions_per_device(config)
    arguments.update(per_device_train_batch_size=batch, per_device_eval_batch_size=batch)
    args = GRPOConfig(
        **arguments,
        num_generations=grpo.group_size,
        max_completion_length=grpo.max_completion_length,
        temperature=grpo.temperature,
        use_vllm=False,
    )
    return _trainer_class()(
        model=ctx.model,
        reward_funcs=rewards,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=ctx.tokenizer,
        callbacks=ctx.callbacks,
    )


register_trainer("grpo", build_grpo)
