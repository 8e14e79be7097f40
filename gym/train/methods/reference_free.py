"""``train.dpo.loss_type = 'simpo'`` and ``'orpo'``: reference-free preference losses on TRL's CPO / ORPO trainers.

TRL 1.x keeps these in ``trl.experimental`` as trainers of their own, not as DPOTrainer losses:

* SimPO (Meng et al. 2024): ``CPOTrainer`` with ``loss_type = 'simpo'`` and ``cpo_alpha = 0`` (no NLL
  term), the length-normalised log-likelihood margin with target margin ``train.dpo.simpo_gamma``;
* ORPO (Hong et al. 2024): ``ORPOTrainer``, the SFT loss plus an odds-ratio penalty weighted by
  ``train.dpo.beta`` (the paper's lambda).

Neither needs a reference model. Both read the same preference rows as DPO; the rows are rendered to
text here with TRL's own ``apply_chat_template`` so each row's tool schemas reach the template (these
trainers would render conversations without them).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gym.train.arguments import common_arguments
from gym.train.methods.rows import preference_rows

if TYPE_CHECKING:
    from datasets import Dataset

    from gym.train.registry import TrainContext


def rendered(rows: Dataset, tokenizer: Any) -> Dataset:
    """Conversational preference rows as text ``{"prompt", "chosen", "rejected"}`` through the chat template."""
    from datasets import Dataset
    from trl.data_utils import apply_chat_template

    texts = []
    for row in rows:
        tools = json.loads(row["tools"]) if row.get("tools") else None
        example = {key: row[key] for key in ("prompt", "chosen", "rejected")}
        texts.append(apply_chat_template(example, tokenizer, tools=tools))
    return Dataset.from_list(texts)


MASKS = ("chosen_attention_mask", "rejected_attention_mask")


def _counting(trainer_class: type) -> type:
    """``trainer_class`` counting the non-pad tokens it trains on, for Gym's progress bar and tokens/s."""

    class GymReferenceFreeTrainer(trainer_class):  # type: ignore[misc, valid-type]
        gym_tokens = 0

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if model.training:
                self.gym_tokens += sum(int(inputs[key].sum()) for key in MASKS if key in inputs)
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    return GymReferenceFreeTrainer


def build_reference_free(ctx: TrainContext, loss: str) -> Any:
    config = ctx.config
    train = rendered(preference_rows(ctx.data.train, "dpo"), ctx.tokenizer)
    evaluation = rendered(preference_rows(ctx.data.eval, "dpo"), ctx.tokenizer) if ctx.has_eval else None
    arguments = {
        **common_arguments(config, ctx.checkpoint_dir, evaluate=ctx.has_eval, model=ctx.model),
        "max_length": config.train.max_length,
        "beta": config.train.dpo.beta,
    }
    if loss == "simpo":
        from trl.experimental.cpo import CPOConfig, CPOTrainer

        args = CPOConfig(
            **arguments, loss_type="simpo", cpo_alpha=0.0, simpo_gamma=config.train.dpo.simpo_gamma
        )
        trainer_class: Any = CPOTrainer
    else:
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer

        args = ORPOConfig(**arguments)
        trainer_class = ORPOTrainer
    return _counting(trainer_class)(
        model=ctx.model,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=ctx.tokenizer,
        callbacks=ctx.callbacks,
    )
