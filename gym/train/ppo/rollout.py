"""Rollouts for PPO: prompts from Gym's prepared rows, sampled completions, and their per-token statistics.

A batch is ``[left-padded prompt | right-padded completion]``. Left padding lets ``generate`` append to
every prompt at the same column, so the completion always starts at column ``P`` and the logits that
predicted completion token ``t`` sit at column ``P + t - 1`` for every row. Position ids are computed
from the attention mask, as ``generate`` does, so a scoring pass sees exactly what sampling saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from gym.train.methods.rows import prompt_and_reference, require_rows

if TYPE_CHECKING:
    from datasets import Dataset


@dataclass
class Prompt:
    """One prompt conversation (ending with a user turn) and its reference answer, if any."""

    messages: list[dict[str, Any]]
    reference: str | None


def prompts_from_rows(rows: Dataset) -> list[Prompt]:
    """Prepared rows as prompts; an SFT row's final assistant answer becomes its reference (as in GRPO)."""
    require_rows(rows, "ppo")
    prompts = []
    for row in rows.select_columns(["messages", "reference"]):
        prompts.append(Prompt(*prompt_and_reference(row, "ppo")))
    return prompts


def value_head(hidden_size: int) -> torch.nn.Module:
    """A linear value head on the policy's last hidden state, starting at V = 0 everywhere.

    Sharing the policy's body (and its adapters) costs one small matrix instead of a second model; a
    zero start keeps the first advantages equal to the (penalised) rewards rather than random noise.
    """
    head = torch.nn.Linear(hidden_size, 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return head


@dataclass
class Rollout:
    """Sampled completions and the tensors PPO needs; ``P`` is the prompt width."""

    input_ids: torch.Tensor  # [B, P + C]
    attention_mask: torch.Tensor  # [B, P + C]
    mask: torch.Tensor  # [B, C] real completion tokens (up to and including the first EOS)
    prompt_width: int
    texts: list[str]
    completion_ids: list[list[int]]


def encode_prompts(tokenizer: Any, prompts: list[Prompt], device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``(input_ids, attention_mask)`` of the prompts with the generation prompt appended."""
    encoded = [
        tokenizer.apply_chat_template(p.messages, add_generation_prompt=True, tokenize=False) for p in prompts
    ]
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in encoded]
    width = max(len(i) for i in ids)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(i)) + i for i in ids], device=device)
    attention = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids], device=device)
    return input_ids, attention


def completion_mask(completions: torch.Tensor, eos_id: int | None) -> torch.Tensor:
    """1 for every token up to and including the first EOS (or all tokens when there is none)."""
    if eos_id is None:
        return torch.ones_like(completions)
    is_eos = (completions == eos_id).long()
    after_eos = (is_eos.cumsum(dim=1) - is_eos) > 0  # strictly after the first EOS
    return (~after_eos).long()


@torch.no_grad()
def sample(
    model: Any, tokenizer: Any, prompts: list[Prompt], max_new_tokens: int, temperature: float
) -> Rollout:
    """Sample one completion per prompt (pure sampling at ``temperature``: no top-k, no top-p).

    Anything but plain temperature sampling would make the sampling distribution differ from the
    ``softmax(logits / temperature)`` that PPO's ratios and KL are computed with.
    """
    from transformers import GenerationConfig

    device = next(model.parameters()).device
    input_ids, attention = encode_prompts(tokenizer, prompts, device)
    settings = GenerationConfig(  # a fresh config: the model's own defaults (top_k, penalties) stay out
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=True,
    )
    output = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=settings)
    width = input_ids.shape[1]
    completions = output[:, width:]
    mask = completion_mask(completions, tokenizer.eos_token_id)
    completions = torch.where(mask.bool(), completions, torch.full_like(completions, tokenizer.pad_token_id))
    ids = [row[: int(m.sum())].tolist() for row, m in zip(completions, mask, strict=True)]
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    return Rollout(
        input_ids=torch.cat([input_ids, completions], dim=1),
        attention_mask=torch.cat([attention, mask.to(attention.dtype)], dim=1),
        mask=mask.float(),
        prompt_width=width,
        texts=texts,
        completion_ids=ids,
    )


def forward(
    model: Any, head: Any, rollout: Rollout, temperature: float, *, with_values: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities of the sampled completion tokens (and values of the states before them)."""
    attention = rollout.attention_mask
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    out = model(
        input_ids=rollout.input_ids,
        attention_mask=attention,
        position_ids=positions,
        output_hidden_states=with_values,
        use_cache=False,
    )
    start = rollout.prompt_width - 1
    logits = out.logits[:, start:-1].float() / temperature
    targets = rollout.input_ids[:, start + 1 :]
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    values = None
    if with_values:
        hidden = out.hidden_states[-1][:, start:-1]
        values = head(hidden.to(head.weight.dtype)).squeeze(-1)
    return logprobs, values
