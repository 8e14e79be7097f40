"""The typed gym.toml: :class:`GymConfig`, its loader, and the one error type users see.

Only pydantic and tomlkit are imported here, so `gym validate` stays fast.
"""

from gym.config.errors import ConfigError, ConfigIssue
from gym.config.loader import Override, build_config, load_config
from gym.config.root import GymConfig
from gym.config.sections import NAMED_TEMPLATES

__all__ = [
    "NAMED_TEMPLATES",
    "ConfigError",
    "ConfigIssue",
    "GymConfig",
    "Override",
    "build_config",
    "load_config",
]
