"""`gym train` leaves out bitsandbytes and scikit-learn when the run cannot use them, and only then."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import VALID

PROBE = """
import importlib.util, sys
from gym.config import load_config
from gym.train.lean_imports import lean_training
config = load_config(sys.argv[1])
with lean_training(config):
    import peft, transformers.trainer_utils
    from peft import LoraConfig, get_peft_model
    print("inside", "bitsandbytes" in sys.modules and sys.modules["bitsandbytes"] is not None,
          "sklearn" in sys.modules and sys.modules["sklearn"] is not None)
print("after", sys.modules.get("bitsandbytes", 0) is None, sys.modules.get("sklearn", 0) is None,
      importlib.util.find_spec("sklearn") is not None)
"""


def probe(path: Path) -> str:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True,
                          cwd=root, env={**__import__("os").environ, "PYTHONPATH": str(root)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_lora_run_imports_neither_package(write_toml: Any) -> None:
    out = probe(write_toml(VALID))
    assert "inside False False" in out
    # afterwards nothing stays hidden: a user's reward function may import scikit-learn
    assert "after False False" in out


def test_qlora_run_keeps_bitsandbytes(write_toml: Any) -> None:
    from gym.config import load_config
    from gym.train.lean_imports import needs_bitsandbytes

    lora = load_config(write_toml(VALID))
    assert not needs_bitsandbytes(lora)
    assert needs_bitsandbytes(
        lora.model_copy(update={"train": lora.train.model_copy(update={"adapter": "qlora"})})
    )
    hub = lora.model_copy(update={"model": lora.model.model_copy(update={"name_or_path": "org/some-model"})})
    assert needs_bitsandbytes(hub)  # a Hub id's config is not read before loading: kept importable
