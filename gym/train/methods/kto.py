"""KTO on TRL's KTOTrainer: unpaired answers, each labelled desirable or not.

A kto row's conversation ends with the judged answer, so it becomes TRL's conversational unpaired
format ``{"prompt": messages[:-1], "completion": [answer], "label": bool}``. The KL
term is estimated from each batch's mismatched prompt/answer pairs, so TRL needs a batch of at least 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gym.train.arguments import common_arguments
from gym.train.methods.reference import reference_model
from gym.train.methods.rows import conversation, require_rows, source_names, to_dataset, tools_text
from gym.train.registry import TrainContext, register_trainer

if TYPE_CHECKING:
    from datasets import Dataset


def kto_rows(rows: Dataset) -> Dataset:
    """Prepared rows as TRL's conversational unpaired-preference format (one sentence on bad input)."""
    require_rows(rows, "kto")
    missing = [i for i, label in enumerate(rows["label"]) if label is None]
    if missing:
        raise ValueError(
            f"train.method = 'kto' needs a true/false label on every row, but {len(missing)} of {len(rows)} "
            f"training rows (dataset {source_names(rows, missing)}) have none; use format = 'kto' with a label column"
        )
    converted: list[dict[str, Any]] = []
    for row in rows.select_columns(["messages", "label", "tools"]):
        messages = conversation(row["messages"])
        if len(messages) < 2 or messages[-1]["role"] != "assistant":
            raise ValueError(
                "train.method = 'kto' needs each labelled conversation to end with the judged assistant answer"
            )
        converted.append(
            {
                "prompt": messages[:-1],
                "completion": messages[-1:],
                "label": bool(row["label"]),
                "tools": tools_text(row["tools"]),
            }
        )
    return to_dataset(converted, ("prompt", "completion"))


def shuffled(rows: Dataset, seed: int) -> Dataset:
    """``rows`` in a seeded random order.

    KTOTrainer reads its rows in order (the KL pairs are built from neighbours), so the shuffle the
    sampler would otherwise do happens here, once: rows of one dataset do not stay grouped.
    """
    return rows.shuffle(seed=seed).flatten_indices()


def build_kto(ctx: TrainContext) -> Any:
    from trl import KTOConfig

    config = ctx.config
    if config.train.batch_size < 2:
        raise ValueError(
            "train.method = 'kto' needs train.batch_size >= 2: the KL term is estimated from the other rows of a batch"
        )
    train = shuffled(kto_rows(ctx.data.train), config.train.seed)
    evaluation = kto_rows(ctx.data.eval) if ctx.data.eval is not None else None
    kto = config.train.kto
    args = KTOConfig(
        **common_arguments(config, ctx.checkpoint_dir, evaluate=ctx.has_eval, model=ctx.model),
        max_length=config.train.max_length,
        beta=kto.beta,
        desirable_weight=kto.desirable_weight,
        undesirable_weight=kto.undesirable_weight,
    )
    from trl import KTOTrainer

    return KTOTrainer(
        model=ctx.model,
        ref_model=reference_model(ctx),
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=ctx.tokenizer,
        callbacks=ctx.callbacks,
    )


register_trainer("kto", build_kto)
