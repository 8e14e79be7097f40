"""SFT and continued pretraining on TRL's SFTTrainer, fed Gym's own tokenized, masked rows.

Gym prepares the data itself (templates, assistant-only masks, over-long handling, caching), so TRL's
dataset preparation is skipped. The loss is plain token-level cross-entropy over the trained tokens;
TRL additionally computes entropy and top-1 accuracy over the whole vocabulary at every step (a
fused-head pass and several host syncs), which for small and mid-sized models costs a large share
of the step: Gym computes those diagnostics only on logging steps.

With the CPU kernels on (``train.cpu_kernels``, docs/cpu-kernels.md), batches are padding-free and
attention stays within each sample at padded cost (gym/model/cpu_kernels/packed_attention.py); where the
model cannot take that attention, a padded batch trains as a few length-sorted groups. On every device
the LM head and the cross-entropy run only at positions with a trained label (``logits_to_keep``), with
the padded batch's loss and gradient (tests/train/test_padding_free.py).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from gym.model.cpu_kernels.length_groups import split_batch
from gym.model.cpu_kernels.packed_attention import use_packed_attention
from gym.train.arguments import common_arguments
from gym.train.collate import IGNORE_INDEX, PackedCollator, PadCollator
from gym.train.registry import TrainContext, register_trainer
from gym.train.vision_collate import VisionCollator, has_images

TOKEN_COLUMNS = ["input_ids", "labels"]


def _trainer_class() -> type:
    from transformers import Trainer
    from trl import SFTTrainer

    class GymSFTTrainer(SFTTrainer):
        """SFTTrainer with a lean loss: cross-entropy only; counts the non-pad tokens it trains on."""

        gym_tokens = 0
        gym_cpu_clip = False  # CPU kernels: clip over the trainable parameters only (DevicePlan)
        gym_length_groups = False  # CPU kernels: a padded batch trained as length-sorted groups
        _gym_keeps_logits: bool | None = None
        _gym_parameters: int | None = None
        _gym_trainable: list | None = None

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if model.training:
                mask = inputs.get("attention_mask")
                self.gym_tokens += int(mask.sum()) if mask is not None else int(inputs["input_ids"].numel())
                if not return_outputs and self._gym_label_logits_only(inputs):
                    return self._gym_trained_positions_loss(model, inputs, num_items_in_batch)
            # transformers' own loss path: cross-entropy normalised by the tokens of the whole accumulated batch
            return Trainer.compute_loss(self, model, inputs, return_outputs, num_items_in_batch)

        def _gym_label_logits_only(self, inputs) -> bool:
            """A padding-free row whose model takes ``logits_to_keep`` as positions, under the plain loss."""
            labels = inputs.get("labels")
            if labels is None or labels.shape[0] != 1 or "position_ids" not in inputs:
                return False
            if self.compute_loss_func is not None or self.label_smoother is not None:
                return False
            if self._gym_keeps_logits is None:
                import inspect

                base = self.accelerator.unwrap_model(self.model)
                base = base.get_base_model() if hasattr(base, "get_base_model") else base
                self._gym_keeps_logits = "logits_to_keep" in inspect.signature(base.forward).parameters
            return self._gym_keeps_logits

        def _gym_trained_positions_loss(self, model, inputs, num_items_in_batch):
            """transformers' causal-LM loss (sum of token cross-entropies / trained tokens of the whole
            accumulated batch), with the LM head applied only where a label is trained."""
            import torch
            import torch.nn.functional as F

            targets = inputs["labels"][0, 1:]
            positions = torch.nonzero(targets != IGNORE_INDEX).flatten()
            features = {key: value for key, value in inputs.items() if key != "labels"}
            logits = model(**features, logits_to_keep=positions).logits[0].float()
            loss = F.cross_entropy(logits, targets[positions], reduction="sum")
            if num_items_in_batch is None:
                return loss / positions.numel() if positions.numel() else loss
            loss = loss / num_items_in_batch
            if self.args.average_tokens_across_devices and self.model_accepts_loss_kwargs:
                loss = loss * (self.accelerator.num_processes if self.args.n_gpu <= 1 else self.args.n_gpu)
            return loss

        def floating_point_ops(self, inputs) -> int:
            """Trainer's estimate (6 x tokens x parameters) without counting the parameters on every step."""
            if self._gym_parameters is None:
                model = self.model
                counted = hasattr(model, "num_parameters")
                self._gym_parameters = model.num_parameters(exclude_embeddings=True) if counted else 0
            ids = inputs.get(getattr(self.model, "main_input_name", "input_ids"))
            return 6 * ids.numel() * self._gym_parameters if ids is not None else 0

        def _clip_grad_norm(self, model):
            """Trainer's clipping, over the parameters that train. Trainer passes ``model.parameters()``, a
            walk over every module of the frozen base as well on every step (2% of a tiny model's step,
            py-spy); their gradients are None, which clipping skips, so the norm and the clip are the same."""
            from accelerate.utils import DistributedType

            if (
                not self.gym_cpu_clip
                or self.accelerator.distributed_type != DistributedType.NO
                or self.args.fp16
            ):
                return super()._clip_grad_norm(model)
            if self._gym_trainable is None:
                self._gym_trainable = [p for p in model.parameters() if p.requires_grad]
            return self.accelerator.clip_grad_norm_(self._gym_trainable, self.args.max_grad_norm)

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
                self.gym_length_groups
                and self.args.device.type == "cpu"
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


def padding_free(ctx: TrainContext) -> bool:
    """Padding-free rows (``train.padding_free``): always under ``train.packing``; under ``"auto"``, on CPU
    when the model's attention keeps the samples of a padding-free row apart at padded cost (on a GPU
    without varlen attention, SDPA would compute the whole row's square mask, so padded batches stay
    there). Switches such a model to that attention (gym/model/cpu_kernels/packed_attention.py)."""
    from gym.model.device import plan_device

    wanted = ctx.config.train.padding_free
    if has_images(ctx.data.train):
        if wanted is True:
            raise ValueError("train.padding_free = true cannot concatenate rows with images; remove it")
        return False  # the vision collator pads (and refuses train.packing itself)
    if wanted is False:
        return False
    switched = plan_device(ctx.config).uses("packed_attention") and use_packed_attention(ctx.model)
    return switched or ctx.config.train.packing or wanted is True


def pack_rows(rows: Any, max_length: int) -> Any:
    """Rows packed best-fit-decreasing into rows of at most ``max_length`` tokens (TRL's ``pack_dataset``),
    each with its samples' ``seq_lengths``. Gym's prepared rows never exceed ``max_length``, so no sample is
    cut: a row is only ever placed whole."""
    from trl import pack_dataset

    packed = pack_dataset(rows, max_length, strategy="bfd")
    if token_count(packed) != token_count(rows):
        raise ValueError("packing lost tokens: a prepared row is longer than train.max_length")
    return packed


def token_count(rows: Any) -> int:
    import pyarrow.compute as pc

    arrow = rows.with_format("arrow")
    return sum(
        pc.sum(pc.list_value_length(batch["input_ids"])).as_py() or 0
        for batch in arrow.iter(batch_size=10_000)
    )


def build_sft(ctx: TrainContext) -> Any:
    from trl import SFTConfig

    config = ctx.config
    arguments = common_arguments(config, ctx.checkpoint_dir, evaluate=ctx.has_eval, model=ctx.model)
    sft_config = SFTConfig(
        **arguments,
        max_length=config.train.max_length,
        dataset_kwargs={"skip_prepare_dataset": True},
        packing=False,
    )
    collator = PackedCollator() if padding_free(ctx) else PadCollator(ctx.tokenizer.pad_token_id)
    columns, processing_class = TOKEN_COLUMNS, ctx.tokenizer
    if has_images(ctx.data.train):
        collator, columns = vision_collator(ctx), [*TOKEN_COLUMNS, "images"]
        processing_class = collator.processor  # TRL checks a processor goes with image rows
    train = ctx.data.train.select_columns(columns)
    if config.train.packing:
        train = pack_rows(train, config.train.max_length)
    evaluation = ctx.data.eval.select_columns(columns) if ctx.data.eval is not None else None
    from gym.model.device import plan_device

    trainer = _trainer_class()(
        model=ctx.model,
        args=sft_config,
        data_collator=collator,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=processing_class,
        callbacks=ctx.callbacks,
    )
    plan = plan_device(config)
    trainer.gym_cpu_clip = plan.uses("clip_grad_norm")
    trainer.gym_length_groups = plan.cpu_kernels
    return trainer


register_trainer("sft", build_sft)
register_trainer("pt", build_sft)
