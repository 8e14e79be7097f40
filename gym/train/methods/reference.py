"""The frozen reference policy of the preference methods (DPO, KTO), loaded as Gym loads the policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gym.model.adapters import is_peft

if TYPE_CHECKING:
    from gym.train.registry import TrainContext


def reference_model(ctx: TrainContext) -> Any:
    """A frozen copy of the base for full / freeze training, loaded exactly as the policy was; None for PEFT.

    TRL would otherwise reload it from ``model.config._name_or_path`` without Gym's dtype, quantization
    and offline handling.
    """
    if is_peft(ctx.model):
        return None
    from gym.model.loading import load_model

    return load_model(ctx.config, for_training=False)
