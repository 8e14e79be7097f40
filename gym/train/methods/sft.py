"""SFT and continued pretraining on TRL's SFTTrainer, fed Gym's own tokenized, masked rows.

Gym prepares the data itself (templates, assistant-only masks, over-long handling, caching), so TRL's
dataset preparation is skipped. The loss is plain token-level cross-entropy over the trained tokens;
TRL additionally computes entropy and top-1 accuracy over the whole vocabulary at every step (a
fused-head pass and several host syncs), which for small and mid-sized models costs a large share
of the step: Gym computes those diagnostics only on logging steps.
"""

from __future__ import annotations

from typing import Any

from gym.train.arguments import common_arguments
from gym.train.collate import PackedCollator, PadCollator
from gym.train.registry import TrainContext, register_trainer

TOKEN_COLUMNS = ["input_ids", "labels"]


def _trainer_class() -> type:
    from transformers import Trainer
    from trl import SFTTrainer

    class GymSFTTrainer(SFTTrainer):
        """SFTTrainer with a lean loss: cross-entropy only; counts the non-pad tokens it trains on."""

        gym_tokens = 0

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if model.training:
                mask = inputs.get("attention_mask")
                self.gym_tokens += int(mask.sum()) if mask is not None else int(inputs["input_ids"].numel())
            # transformers' own loss path: cross-entropy normalised by the tokens of the whole accumulated batch
            return Trainer.compute_loss(self, model, inputs, return_outputs, num_items_in_batch)

    return GymSFTTrainer


def build_sft(ctx: TrainContext) -> Any:
    from trl import SFTConfig

    config = ctx.config
    arguments = common_arguments(config, ctx.checkpoint_dir, evaluate=ctx.has_eval)
    sft_config = SFTConfig(
        **arguments,
        max_length=config.train.max_length,
        dataset_kwargs={"skip_prepare_dataset": True},
        packing=False,
    )
    collator = PackedCollator() if config.train.packing else PadCollator(ctx.tokenizer.pad_token_id)
    train = ctx.data.train.select_columns(TOKEN_COLUMNS)
    evaluation = ctx.data.eval.select_columns(TOKEN_COLUMNS) if ctx.data.eval is not None else None
    return _trainer_class()(
        model=ctx.model,
        args=sft_config,
        data_collator=collator,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=ctx.tokenizer,
        callbacks=ctx.callbacks,
    )


register_trainer("sft", build_sft)
register_trainer("pt", build_sft)
