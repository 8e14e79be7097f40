"""Reward-model training (``method = 'rm'``) on TRL's RewardTrainer.

A reward model is the base with a one-output score head (``AutoModelForSequenceClassification``,
``num_labels = 1``) trained so the chosen conversation scores above the rejected one. The runner loads
every base as a causal LM, so this builder loads the base again as a sequence classifier, with the
same dtype, quantization and adapter (:func:`load_reward_model`); the causal LM it was handed is unused.
Rows become TRL's implicit-prompt conversational format, ``{"chosen": prompt + [chosen answer],
"rejected": prompt + [rejected answer]}``, which TRL tokenizes with the tokenizer's chat template.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gym.train.arguments import common_arguments
from gym.train.methods.rows import preference_rows
from gym.train.registry import TrainContext, register_trainer

if TYPE_CHECKING:
    from gym.config import GymConfig


def load_reward_model(config: GymConfig, pad_token_id: int | None) -> Any:
    """The base as a one-score sequence classifier, prepared for ``train.adapter`` like any Gym model.

    The pad token id goes on the config up front: the classifier scores the last non-pad token of
    each sequence and must know which id is padding.
    """
    from transformers import AutoModelForSequenceClassification

    from gym.model.adapters import apply_adapter
    from gym.model.loading import from_pretrained, load_kwargs

    kwargs: dict[str, Any] = {**load_kwargs(config), "num_labels": 1}
    if pad_token_id is not None:
        kwargs["pad_token_id"] = pad_token_id
    model = from_pretrained(AutoModelForSequenceClassification, config, **kwargs)
    model.config.use_cache = False
    model.train()
    return apply_adapter(model, config)


def build_reward_model(ctx: TrainContext) -> Any:
    from trl import RewardConfig

    config = ctx.config
    # Converted (and checked) before the second model load, so bad rows fail fast.
    train = preference_rows(ctx.data.train, "rm", explicit_prompt=False)
    evaluation = (
        preference_rows(ctx.data.eval, "rm", explicit_prompt=False) if ctx.data.eval is not None else None
    )
    args = RewardConfig(
        **common_arguments(config, ctx.checkpoint_dir, evaluate=ctx.has_eval),
        max_length=config.train.max_length,
    )
    from trl import RewardTrainer

    return RewardTrainer(
        model=load_reward_model(config, ctx.tokenizer.pad_token_id),
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=ctx.tokenizer,
        callbacks=ctx.callbacks,
    )


register_trainer("rm", build_reward_model)
