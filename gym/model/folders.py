"""What a model folder is, read from its JSON files alone (no torch).

Serving, export, evaluation and deploy are all handed folders; they ask here whether one holds a LoRA
adapter, full weights or a vision-language model, so the answer is the same in every command.
"""

from __future__ import annotations

import json
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
MODEL_CONFIG = "config.json"


def is_adapter_folder(path: str | Path) -> bool:
    """A LoRA output folder: PEFT's ``adapter_config.json`` is there."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def is_model_folder(path: str | Path) -> bool:
    """A folder Gym can load: a LoRA adapter or full weights (``config.json``)."""
    return is_adapter_folder(path) or (Path(path) / MODEL_CONFIG).is_file()


def is_vision_folder(path: str | Path) -> bool:
    """Full weights whose ``config.json`` describes a vision-language model; False when unreadable."""
    from gym.model.vision import config_is_vision

    config = Path(path) / MODEL_CONFIG
    try:
        return config.is_file() and config_is_vision(json.loads(config.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return False
