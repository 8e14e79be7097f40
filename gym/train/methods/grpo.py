"""GRPO on TRL's GRPOTrainer: sample ``group_size`` answers per prompt, reward them, learn from the spread.

Rows become TRL's conversational prompt format, ``{"prompt": [messages], "reference": answer}``: the
prompt ends with a user turn (an SFT row's final assistant answer is split off and used as the
reference when the row has none), and ``reference`` reaches every reward function as a keyword list
(see :mod:`gym.train.rewards`). Generation runs through transformers' ``generate`` (works on a CPU and
on any single GPU), or through vLLM with ``train.grpo.use_vllm`` on CUDA GPUs (colocated, or a
``trl vllm-serve`` server). The loss family and its knobs are TRL's own keys (:data:`TRL_KEYS`).

TRL counts its batch in completions, and every batch must hold whole groups of ``group_size``
completions of one prompt, so ``train.batch_size`` is rounded up to a multiple of ``group_size``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gym.config.grpo import TRL_FIELDS
from gym.train.arguments import common_arguments
from gym.train.methods.rows import prompt_and_reference, require_rows, to_dataset
from gym.train.registry import TrainContext, register_trainer
from gym.train.vision_collate import has_images

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


TRL_KEYS = TRL_FIELDS  # [train.grpo] key -> trl.GRPOConfig field
UNSET_MEANS_TRL_DEFAULT = ("vllm_server_base_url", "vllm_server_host", "vllm_server_port")
RECORDED = ("loss_type", "importance_sampling_level", "epsilon", "epsilon_high", "beta", "scale_rewards",
            "mask_truncated_completions", "use_vllm", "vllm_mode")  # fmt: skip


def grpo_arguments(config: GymConfig) -> dict[str, Any]:
    """``[train.grpo]`` as ``trl.GRPOConfig`` keyword arguments (server keys left unset keep TRL's defaults)."""
    grpo = config.train.grpo
    arguments = {trl: getattr(grpo, key) for key, trl in TRL_KEYS.items()}
    for key in UNSET_MEANS_TRL_DEFAULT:
        if arguments[TRL_KEYS[key]] is None:
            del arguments[TRL_KEYS[key]]
    return arguments


def trl_loss_types() -> tuple[str, ...] | None:
    """The loss types the installed TRL documents on ``GRPOConfig.loss_type`` (None when it lists none)."""
    import dataclasses
    import re

    from trl import GRPOConfig

    field = next((f for f in dataclasses.fields(GRPOConfig) if f.name == "loss_type"), None)
    help_text = str(field.metadata.get("help", "")) if field is not None else ""
    listed = re.search(r"Supported values are (.*?)\.\s", help_text)
    return tuple(re.findall(r"'(\w+)'", listed.group(1))) if listed else None


def check_loss_type(config: GymConfig) -> None:
    """A loss type this TRL does not have is refused at its key before the model loads."""
    from gym.train.runner import key_error

    wanted = config.train.grpo.loss_type
    offered = trl_loss_types()
    if offered is not None and wanted not in offered:
        import trl

        problem = (f"{wanted!r} is not a loss of the installed TRL {trl.__version__} (it offers "
                   f"{', '.join(offered)}); pick one of those, or upgrade trl")  # fmt: skip
        raise ValueError(str(key_error(config, ("train", "grpo", "loss_type"), problem)))


def grpo_record(config: GymConfig) -> dict[str, Any]:
    """The GRPO settings a run trained with, for train_results.json."""
    grpo = config.train.grpo
    return {"group_size": grpo.group_size, **{key: getattr(grpo, key) for key in RECORDED}}


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
    check_loss_type(config)
    rewards = reward_functions(config)
    processing_class = ctx.tokenizer
    if has_images(ctx.data.train):  # image rows: the processor samples and scores them with their pixels
        from gym.train.methods.vision_grpo import vision_processor, vision_prompt_rows

        processing_class = vision_processor(config, ctx.tokenizer)
        rows = vision_prompt_rows
    else:
        rows = prompt_rows
    train = rows(ctx.data.train)
    evaluation = rows(ctx.data.eval) if ctx.data.eval is not None else None
    arguments = common_arguments(config, ctx.checkpoint_dir, evaluate=ctx.has_eval, model=ctx.model)
    batch = completions_per_device(config)
    arguments.update(per_device_train_batch_size=batch, per_device_eval_batch_size=batch)
    args = GRPOConfig(**arguments, **grpo_arguments(config))
    return _trainer_class()(
        model=ctx.model,
        reward_funcs=rewards,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=processing_class,
        callbacks=ctx.callbacks,
    )


register_trainer("grpo", build_grpo)
