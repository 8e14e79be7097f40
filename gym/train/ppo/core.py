"""The arithmetic of PPO on token sequences, free of models and I/O so it can be tested by hand.

Every tensor is ``[batch, completion_tokens]`` with a 0/1 ``mask`` marking the real completion tokens
(a prefix of each row: tokens after the first EOS are padding). Masked means and whitening count only
real tokens, so padding never moves a statistic or a gradient.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean over the real tokens (0 when there are none, rather than NaN)."""
    return (values * mask).sum() / mask.sum().clamp(min=1)


def masked_whiten(values: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """Zero mean, unit variance over the real tokens; padding is left at 0.

    Whitened advantages keep the policy step size independent of the reward scale, which varies
    wildly between reward functions and reward models.
    """
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    return (values - mean) * (variance + eps).rsqrt() * mask


def kl_penalised_rewards(
    scores: Tensor, logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, kl_coef: float
) -> tuple[Tensor, Tensor]:
    """Per-token rewards ``-kl_coef * (logp - ref_logp)``, plus each sequence's score on its last token.

    Returns ``(rewards, kl)`` where ``kl`` is the per-token estimate ``logp - ref_logp`` (masked). Folding
    the KL into the reward (rather than the loss) is the InstructGPT recipe: the value function then
    learns the penalised return and GAE spreads the penalty over the tokens that caused it.
    """
    import torch

    kl = (logprobs - ref_logprobs) * mask
    rewards = -kl_coef * kl
    last = (mask.sum(dim=1).long() - 1).clamp(min=0)
    has_tokens = (mask.sum(dim=1) > 0).to(rewards.dtype)
    rows = torch.arange(rewards.shape[0], device=rewards.device)
    rewards[rows, last] += scores.to(rewards.dtype) * has_tokens
    return rewards, kl


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation: ``(advantages, returns)`` with ``returns = advantages + values``.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` and ``A_t = delta_t + gamma * lam * A_{t+1}``, where the
    value after the last real token is 0 (the episode ends there).
    """
    import torch

    rewards, values = rewards * mask, values * mask
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    length = rewards.shape[1]
    for t in reversed(range(length)):
        next_value = values[:, t + 1] if t + 1 < length else torch.zeros_like(running)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = delta + gamma * lam * running
        advantages[:, t] = running
    advantages = advantages * mask
    return advantages, (advantages + values) * mask


def policy_loss(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, clip_range: float
) -> tuple[Tensor, Tensor]:
    """The clipped surrogate ``mean(max(-A * r, -A * clip(r, 1 - c, 1 + c)))``; also the clipped fraction."""
    import torch

    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    return loss, masked_mean((clipped > unclipped).float(), mask)


def value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip_range: float
) -> tuple[Tensor, Tensor]:
    """``0.5 * mean(max((V - R)^2, (V_clipped - R)^2))`` with ``V`` kept within ``clip_range`` of the rollout's.

    Clipping the value step as well as the policy step stops one noisy batch from wrecking the critic
    that every later advantage depends on. Also returns the clipped fraction.
    """
    import torch

    clipped_values = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
    unclipped = (values - returns) ** 2
    clipped = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(unclipped, clipped), mask)
    return loss, masked_mean((clipped > unclipped).float(), mask)
