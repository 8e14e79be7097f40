"""Keep the console for Gym's own progress and messages: other libraries' notices turned down.

Called at the start of every command that imports the training stack, before those imports.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def quiet_libraries() -> None:
    """No optional-kernel notices, no per-shard progress bars from transformers.

    bitsandbytes warns, on CPUs with AVX512-BF16, that the optional ``kernels`` package (which would
    download a kernel from the Hub) is absent; its fallback is fine, so the notice is only noise.
    """
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


GIT_OUTSIDE_A_REPO = b"fatal: not a git repository"


@contextmanager
def without_stderr_lines(noise: bytes = GIT_OUTSIDE_A_REPO) -> Iterator[None]:
    """Drop the lines starting with ``noise`` that anything in this block writes to file descriptor 2.

    lm-eval records ``git describe --always`` of the working directory in its results and lets git's
    complaint reach the terminal outside a repository; the subprocess writes to the inherited stderr,
    so only a filter at the descriptor can keep it off a `gym eval` or `gym launch` outside one. Every
    other byte passes through as it comes (a progress bar's partial line is not held back), unless the
    start of a line could still become ``noise``.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    pump = threading.Thread(target=_forward, args=(read_end, saved, noise), daemon=True)
    pump.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's writer: the pump sees its end, unless a child holds it
        pump.join(timeout=5)
        if not pump.is_alive():
            os.close(saved)


def _forward(source: int, target: int, noise: bytes) -> None:
    held = b""  # the start of a line that may still turn out to be ``noise``
    with os.fdopen(source, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            data, held, shown = held + chunk, b"", []
            for line in data.splitlines(keepends=True):
                if not line.endswith((b"\n", b"\r")) and (noise.startswith(line) or line.startswith(noise)):
                    held = line  # wait for the rest of this line
                elif not line.startswith(noise):
                    shown.append(line)
            _write(target, b"".join(shown))
    if held and not held.startswith(noise):
        _write(target, held)


def _write(target: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(target, data) :]
    except OSError:  # the terminal went away: nothing to show it on
        pass
