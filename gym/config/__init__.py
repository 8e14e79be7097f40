"""The typed gym.toml: :class:`GymConfig`, its loader, and the one error type users see.

Names are resolved lazily (PEP 562) so that importing ``gym.config.errors`` for a type check does
not build the pydantic models; `gym --help` stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "ConfigError": "gym.config.errors",
    "ConfigIssue": "gym.config.errors",
    "Override": "gym.config.loader",
    "build_config": "gym.config.loader",
    "load_config": "gym.config.loader",
    "GymConfig": "gym.config.root",
    "NAMED_TEMPLATES": "gym.config.sections",
    "config_from_args": "gym.config.cli_args",
}
__all__ = [
    "NAMED_TEMPLATES",
    "ConfigError",
    "ConfigIssue",
    "GymConfig",
    "Override",
    "build_config",
    "config_from_args",
    "load_config",
]

if TYPE_CHECKING:
    from gym.config.cli_args import config_from_args
    from gym.config.errors import ConfigError, ConfigIssue
    from gym.config.loader import Override, build_config, load_config
    from gym.config.root import GymConfig
    from gym.config.sections import NAMED_TEMPLATES


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gym.config' has no attribute {name!r}")
