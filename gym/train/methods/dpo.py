"""DPO on TRL's DPOTrainer, fed conversational preference rows converted from Gym's prepared data.

Each row becomes ``{"prompt": [...], "chosen": [answer], "rejected": [answer]}`` (plus ``tools`` as JSON
text, which TRL parses) through :func:`gym.train.methods.rows.preference_rows`; TRL tokenizes them with
the chat template the runner has already set to Gym's. ``loss_type`` simpo and orpo train on TRL's
reference-free trainers instead (:mod:`gym.train.methods.reference_free`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gym.train.arguments import common_arguments
from gym.train.methods.reference import reference_model
from gym.train.methods.rows import preference_rows, require_preferences
from gym.train.registry import TrainContext, register_trainer
from gym.train.vision_collate import has_images

if TYPE_CHECKING:
    from gym.config import GymConfig

# Gym's dpo.loss_type -> TRL's DPO loss; simpo and orpo are separate trainers in TRL (experimental), not DPO
# losses: see gym.train.methods.reference_free.
LOSS_TYPES = {"sigmoid": "sigmoid", "ipo": "ipo", "hinge": "hinge", "robust": "robust"}
REFERENCE_FREE = ("simpo", "orpo")


def dpo_loss(config: GymConfig) -> str:
    """TRL's name of ``train.dpo.loss_type``, or a one-sentence error for losses DPOTrainer lacks."""
    loss = config.train.dpo.loss_type
    if loss not in LOSS_TYPES:
        raise ValueError(
            f"train.dpo.loss_type = '{loss}' is not available with TRL's DPOTrainer in this version of Gym; "
            f"use one of {', '.join(LOSS_TYPES)}"
        )
    return LOSS_TYPES[loss]


def build_dpo(ctx: TrainContext) -> Any:
    from trl import DPOConfig

    config = ctx.config
    if config.train.dpo.loss_type in REFERENCE_FREE:
        from gym.train.methods.reference_free import build_reference_free

        return build_reference_free(ctx, config.train.dpo.loss_type)
    loss = dpo_loss(config)
    processing_class = ctx.tokenizer
    if has_images(ctx.data.train):  # image rows: rendered text + image files for TRL's vision collator
        from gym.model.vision import load_processor
        from gym.train.methods.vision_dpo import vision_preference_rows

        require_preferences(ctx.data.train, "dpo", images=True)
        processing_class = load_processor(config, ctx.tokenizer)
        train = vision_preference_rows(ctx.data.train, ctx.tokenizer)
        evaluation = (
            vision_preference_rows(ctx.data.eval, ctx.tokenizer) if ctx.data.eval is not None else None
        )
    else:
        train = preference_rows(ctx.data.train, "dpo")
        evaluation = preference_rows(ctx.data.eval, "dpo") if ctx.data.eval is not None else None
    args = DPOConfig(
        **common_arguments(config, ctx.checkpoint_dir, evaluate=ctx.has_eval, model=ctx.model),
        max_length=config.train.max_length,
        beta=config.train.dpo.beta,
        loss_type=[loss],
    )
    from trl import DPOTrainer

    return DPOTrainer(
        model=ctx.model,
        ref_model=reference_model(ctx),
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=processing_class,
        callbacks=ctx.callbacks,
    )


register_trainer("dpo", build_dpo)
