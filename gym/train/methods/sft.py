"""SFT and continued pretraining on TRL's SFTTrainer, fed Gym's own tokenized, masked rows.

Gym prepares the data itself (templates, assistant-only masks, over-long handling, caching), so TRL's
dataset preparation is skipped. The loss is plain token-level cross-entropy over the trained tokens;
TRL additionally computes entropy and top-1 accuracy over the whole vocabulary at every step (a
fused-head pass and several host syncs), which for small and mid-sized models costs a large share
of the step: Gym computes those diagnostics only on logging steps.

On CPU a padded batch is trained as a few length-sorted groups (gym/train/length_groups.py): the same
rows, the same token-normalised gradient, less padding computed.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from gym.train.arguments import common_arguments
from gym.train.collate import PackedCollator, PadCollator
from gym.train.length_groups import split_batch
from gym.train.registry import TrainContext, register_trainer
from gym.train.vision_collate import VisionCollator, has_images

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

        def training_step(self, model, inputs, num_items_in_batch=None):
            groups = split_batch(inputs) if self._gym_may_group(num_items_in_batch) else [inputs]
            total = None
            for i, group in enumerate(groups):
                last = i == len(groups) - 1
                # gradients of the groups add up locally; DDP synchronises once, after the last group
                sync = (
                    nullcontext()
                    if last or self.accelerator.num_processes == 1
                    else self.accelerator.no_sync(model)
                )
                with sync:
                    loss = super().training_step(model, group, num_items_in_batch)
                total = loss if total is None else total + loss
            return total

        def _gym_may_group(self, num_items_in_batch) -> bool:
            """Grouping keeps the gradient only when the loss is a sum over tokens / the whole batch's tokens."""
            return (
                self.args.device.type == "cpu"
                and num_items_in_batch is not None
                and self.model_accepts_loss_kwargs
                and self.compute_loss_func is None
                and self.args.n_gpu <= 1
            )

    return GymSFTTrainer


def vision_collator(ctx: TrainContext) -> VisionCollator:
    """Image rows: the model's processor makes the pixels; packing would mix images across samples."""
    from gym.model.vision import load_processor

    if ctx.config.train.packing:
        raise ValueError("train.packing = true cannot pack rows with images; set train.packing = false")
    return VisionCollator(ctx.tokenizer.pad_token_id, load_processor(ctx.config, ctx.tokenizer))


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
    columns, processing_class = TOKEN_COLUMNS, ctx.tokenizer
    if has_images(ctx.data.train):
        collator, columns = vision_collator(ctx), [*TOKEN_COLUMNS, "images"]
        processing_class = collator.processor  # TRL checks a processor goes with image rows
    train = ctx.data.train.select_columns(columns)
    evaluation = ctx.data.eval.select_columns(columns) if ctx.data.eval is not None else None
    return _trainer_class()(
        model=ctx.model,
        args=sft_config,
        data_collator=collator,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=processing_class,
        callbacks=ctx.callbacks,
    )


register_trainer("sft", build_sft)
register_trainer("pt", build_sft)
