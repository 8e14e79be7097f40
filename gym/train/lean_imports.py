"""`gym train` start-up without the installed packages this run never uses: bitsandbytes and scikit-learn.

Both are imported by the training stack merely because they are installed, not because a run uses them:
peft (0.21) imports bitsandbytes in ``peft/helpers.py`` whenever it is present, and transformers imports
``sklearn.metrics`` (for assisted decoding's confidence threshold) from ``transformers.generation``. With
Gym's ``qlora`` and ``eval`` extras installed, ``python -X importtime -m gym train`` measured 1.07 s for
bitsandbytes (it pulls in ``torch._inductor``) and 1.00 s for scikit-learn (scipy.stats) on every run;
LLaMA-Factory's environment has neither, so it never paid them.

The switch is Python's own: while ``sys.modules[name] is None``, ``import name`` raises ImportError and
``importlib.util.find_spec(name)`` returns None, so each library takes its documented "not installed"
branch. scikit-learn is hidden only while the training stack is imported, so a later import (a reward
function of the user's that uses it) works as usual; bitsandbytes is hidden for the whole run unless
the run may need it: ``adapter = "qlora"``, a ``model.quantization``, or a
base whose config.json is quantized (or a Hub id, whose config is not read here).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gym.config import GymConfig


def needs_bitsandbytes(config: GymConfig) -> bool:
    from gym.model.builtin import BUILTIN_PREFIX
    from gym.model.quantized import checkpoint_quantization

    model = config.model
    if config.train.adapter == "qlora" or model.quantization != "none":
        return True
    name = str(model.name_or_path)
    if name.startswith(BUILTIN_PREFIX):
        return False
    folder = Path(name).expanduser()
    if not folder.is_dir():
        return True  # a Hub id: its config (maybe a bitsandbytes checkpoint) is only read when loading
    return checkpoint_quantization(folder) is not None


@contextmanager
def without(packages: list[str]) -> Iterator[None]:
    """Imports inside the block see ``packages`` as not installed (unless one is imported already)."""
    hidden = [name for name in packages if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  (Python's "not importable" marker)
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


@contextmanager
def lean_training(config: GymConfig) -> Iterator[None]:
    """The block of a training run: bitsandbytes hidden throughout when the run cannot use it (peft looks
    for it again when it wraps the model), scikit-learn only while the training stack is imported."""
    with without([] if needs_bitsandbytes(config) else ["bitsandbytes"]):
        with without(["sklearn"]):
            import peft  # noqa: F401
            import transformers.generation  # noqa: F401  (its import is the one that looks for sklearn)
            import transformers.trainer_utils  # noqa: F401
        yield
