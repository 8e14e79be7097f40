"""What PPO maximises: a reward model trained with ``method = 'rm'``, or the ``train.grpo.reward`` functions.

Both become one callable ``score(prompts, completions, completion_ids, references) -> list[float]``,
checked before any training starts, so a run without a usable reward fails with one sentence instead
of after the first rollout. Reward functions get TRL's GRPO signature (conversational prompts and
completions, ``reference`` and ``completion_ids`` as keyword lists); several functions are summed and
a ``None`` ("no reward for this row") counts as 0, as TRL's nansum does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config import GymConfig

Scorer = Callable[[list[Any], list[str], list[list[int]], list[Any]], list[float]]
NO_REWARD = (
    "train.method = 'ppo' has no usable reward ({why}); set train.ppo.reward_model to a model trained with "
    "method = 'rm' or train.grpo.reward to reward functions that work on these rows"
)


def reward_function_scorer(config: GymConfig, probe: tuple[Any, Any]) -> Scorer:
    """The summed ``train.grpo.reward`` functions, tried once on ``probe`` (a prompt and its reference)."""
    from gym.train.rewards import RewardError, resolve_rewards

    try:
        functions = resolve_rewards(config.train.grpo.reward, config.base_dir)
    except RewardError as error:
        raise ValueError(NO_REWARD.format(why=str(error))) from error

    def score(
        prompts: list[Any], completions: list[str], ids: list[list[int]], refs: list[Any]
    ) -> list[float]:
        conversations = [[{"role": "assistant", "content": text}] for text in completions]
        totals = [0.0] * len(completions)
        for function in functions:
            values = function(prompts, conversations, reference=refs, completion_ids=ids)
            totals = [t + (0.0 if v is None else float(v)) for t, v in zip(totals, values, strict=True)]
        return totals

    try:
        score([probe[0]], [""], [[]], [probe[1]])
    except RewardError as error:
        raise ValueError(NO_REWARD.format(why=str(error))) from error
    return score


def load_reward_model(config: GymConfig, path: Path, tokenizer: Any, device: Any) -> Any:
    """The reward model at ``path``: full weights, or a PEFT adapter over the base it names; frozen."""
    from transformers import AutoModelForSequenceClassification

    from gym.model.loading import resolve_dtype

    dtype = resolve_dtype(config.model.dtype)
    if (path / "adapter_config.json").is_file():
        from peft import AutoPeftModelForSequenceClassification

        model = AutoPeftModelForSequenceClassification.from_pretrained(str(path), dtype=dtype, num_labels=1)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(str(path), dtype=dtype, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id  # the score is read at the last non-pad token
    model.requires_grad_(False)
    return model.to(device).eval()


def reward_model_scorer(config: GymConfig, tokenizer: Any, device: Any) -> Scorer:
    """Scores of the reward model in ``train.ppo.reward_model`` on prompt + completion, chat template applied.

    The conversation is rendered exactly as the rm trainer saw its rows (the prompt messages followed by
    the assistant answer), with the policy's tokenizer and template: the reward model shares the base.
    """
    import torch

    path = config.resolve_path(config.train.ppo.reward_model)
    if not path.is_dir():
        raise ValueError(NO_REWARD.format(why=f"train.ppo.reward_model '{path}' is not a folder"))
    try:
        model = load_reward_model(config, path, tokenizer, device)
    except (OSError, ValueError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0].rstrip(".")
        raise ValueError(NO_REWARD.format(why=f"loading reward model '{path}' failed: {first}")) from error

    @torch.no_grad()
    def score(
        prompts: list[Any], completions: list[str], ids: list[list[int]], refs: list[Any]
    ) -> list[float]:
        texts = [
            tokenizer.apply_chat_template([*p, {"role": "assistant", "content": c}], tokenize=False)
            for p, c in zip(prompts, completions, strict=True)
        ]
        batch = tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt").to(device)
        return model(**batch).logits[:, 0].float().tolist()

    return score


def make_scorer(config: GymConfig, tokenizer: Any, device: Any, probe: tuple[Any, Any]) -> Scorer:
    """The reward model when ``train.ppo.reward_model`` is set, else the reward functions."""
    if config.train.ppo.reward_model:
        return reward_model_scorer(config, tokenizer, device)
    return reward_function_scorer(config, probe)
