"""DPO on TRL's DPOTrainer, fed conversational preference rows converted from Gym's prepared data.

Gym's prepared rows carry conversations as JSON text (Arrow cannot hold the varying shapes of tool
calls); TRL wants conversations as lists of messages and tokenizes them itself with the tokenizer's
chat template, which the runner has already set to Gym's. So each row becomes
``{"prompt": [...], "chosen": [answer], "rejected": [answer]}`` (plus ``tools`` as JSON text, which TRL
parses). Messages are stored with datasets' ``Json`` feature: a plain struct column would merge the
argument keys of every tool call in the dataset and hand each call ``null`` for the keys it lacks.

The conversion helpers here are shared by the kto, rm and grpo methods.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gym.train.arguments import common_arguments
from gym.train.registry import TrainContext, register_trainer

if TYPE_CHECKING:
    from datasets import Dataset

    from gym.config import GymConfig

KEPT_KEYS = ("role", "content", "tool_calls")
# Gym's dpo.loss_type -> TRL's DPO loss; simpo and orpo are separate trainers in TRL (experimental), not DPO
# losses: see gym.train.methods.reference_free.
LOSS_TYPES = {"sigmoid": "sigmoid", "ipo": "ipo", "hinge": "hinge", "robust": "robust"}
REFERENCE_FREE = ("simpo", "orpo")


def chat_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message reduced to what chat templates render: role, content and (when present) tool calls."""
    kept = {key: message[key] for key in KEPT_KEYS if message.get(key)}
    kept.setdefault("role", message.get("role", "assistant"))
    kept.setdefault("content", message.get("content") or "")
    return kept


def conversation(text: str) -> list[dict[str, Any]]:
    """A prepared JSON column (one message or a list of them) as a list of cleaned messages."""
    value = json.loads(text) if text else []
    return [chat_message(m) for m in (value if isinstance(value, list) else [value])]


def tools_text(text: str) -> str | None:
    """The tool schemas of a row as JSON text for TRL, or None when the row has none."""
    tools = json.loads(text) if text else None
    return json.dumps(tools, ensure_ascii=False) if tools else None


def source_names(rows: Dataset, positions: list[int]) -> str:
    """The dataset names of ``positions`` in ``rows``, quoted and comma-separated, for error messages."""
    sources = rows.select_columns(["source"])[positions]["source"] if positions else []
    return ", ".join(f"'{name}'" for name in dict.fromkeys(sources))


def require_rows(rows: Dataset, method: str) -> None:
    """Fail before training when there is nothing to train on or the rows carry images."""
    if len(rows) == 0:
        raise ValueError(f"train.method = '{method}' has no training rows left after data preparation")
    if "images" in rows.column_names and any(rows["images"]):
        raise ValueError(
            f"train.method = '{method}' does not support rows with images yet; remove the images column"
        )


def require_preferences(rows: Dataset, method: str) -> None:
    """Fail with one sentence when any row lacks a chosen or a rejected answer."""
    require_rows(rows, method)
    missing = [
        i for i, (c, r) in enumerate(zip(rows["chosen"], rows["rejected"], strict=True)) if not c or not r
    ]
    if missing:
        raise ValueError(
            f"train.method = '{method}' needs rows with a chosen and a rejected answer, but {len(missing)} of "
            f"{len(rows)} training rows (dataset {source_names(rows, missing)}) have none; "
            "use format = 'preference' for those datasets"
        )


def to_dataset(rows: list[dict[str, Any]], conversation_columns: tuple[str, ...]) -> Dataset:
    """A datasets.Dataset whose conversation columns keep every message exactly (``Json`` feature)."""
    from datasets import Dataset, Features, Json, List, Value

    if rows and all(row.get("tools") is None for row in rows):
        rows = [{k: v for k, v in row.items() if k != "tools"} for row in rows]
    features: dict[str, Any] = {}
    for name in rows[0] if rows else ():
        if name in conversation_columns:
            features[name] = List(Json())
        elif name == "label":
            features[name] = Value("bool")
        else:
            features[name] = Value("string")
    return Dataset.from_list(rows, features=Features(features))


def preference_rows(rows: Dataset, method: str, *, explicit_prompt: bool = True) -> Dataset:
    """Prepared preference rows as TRL's conversational preference format.

    ``explicit_prompt``: ``{"prompt", "chosen", "rejected"}`` (DPO); otherwise the prompt is folded into
    both answers, ``{"chosen": conversation, "rejected": conversation}`` (TRL's implicit-prompt format).
    """
    require_preferences(rows, method)
    converted = []
    for row in rows.select_columns(["messages", "chosen", "rejected", "tools"]):
        prompt = conversation(row["messages"])
        chosen, rejected = conversation(row["chosen"]), conversation(row["rejected"])
        if explicit_prompt:
            item = {"prompt": prompt, "chosen": chosen, "rejected": rejected}
        else:
            item = {"chosen": prompt + chosen, "rejected": prompt + rejected}
        converted.append({**item, "tools": tools_text(row["tools"])})
    columns = ("prompt", "chosen", "rejected")
    return to_dataset(converted, columns)


def is_peft(model: Any) -> bool:
    """Whether ``model`` carries PEFT adapters (then TRL uses the adapter-free base as the reference)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def reference_model(ctx: TrainContext) -> Any:
    """A frozen copy of the base for full / freeze training, loaded exactly as the policy was; None for PEFT.

    TRL would otherwise reload it from ``model.config._name_or_path`` without Gym's dtype, quantization
    and offline handling.
    """
    if is_peft(ctx.model):
        return None
    from gym.model.loading import load_model

    return load_model(ctx.config, for_training=False)


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
    train = preference_rows(ctx.data.train, "dpo")
    evaluation = preference_rows(ctx.data.eval, "dpo") if ctx.data.eval is not None else None
    args = DPOConfig(
        **common_arguments(config, ctx.checkpoint_dir, evaluate=ctx.has_eval),
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
        processing_class=ctx.tokenizer,
        callbacks=ctx.callbacks,
    )


register_trainer("dpo", build_dpo)
