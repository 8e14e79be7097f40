"""Keep the console for Gym's own progress and messages: other libraries' notices turned down.

Called at the start of every command that imports the training stack, before those imports.
"""

from __future__ import annotations

import logging


def quiet_libraries() -> None:
    """No optional-kernel notices, no per-shard progress bars from transformers.

    bitsandbytes warns, on CPUs with AVX512-BF16, that the optional ``kernels`` package (which would
    download a kernel from the Hub) is absent; its fallback is fine, so the notice is only noise.
    """
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
