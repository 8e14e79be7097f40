"""How many torch threads the CPU engine uses: every core the server has to itself, re-checked as it runs.

Measured on 2 cores (bench/serve_load.py and a bare ``scaled_dot_product_attention`` call): when the
machine is otherwise idle, two threads serve the 26M model faster than one; when other processes keep
the cores busy, two threads are several times *slower* than one, because each parallel op waits at a
barrier for a worker thread the kernel has descheduled. A fixed number is wrong in one of the two
cases, so the worker measures, every few seconds, how much CPU the rest of the machine used (all busy
time minus this process's own) and gives torch the cores left over. ``GYM_TORCH_THREADS`` (or
``OMP_NUM_THREADS``) pins the number instead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _machine_busy_and_total() -> tuple[int, int] | None:
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return total - idle, total


def _own_ticks() -> int:
    times = os.times()
    return int((times.user + times.system) * _TICKS)


class ThreadPolicy:
    """Call :meth:`apply` from the thread that runs the model (torch's thread count is per thread).

    ``set_threads`` applies the number (default: ``torch.set_num_threads``; llama.cpp passes its own).
    """

    def __init__(self, interval: float = 5.0, set_threads: Callable[[int], None] | None = None) -> None:
        pinned = os.environ.get("GYM_TORCH_THREADS") or os.environ.get("OMP_NUM_THREADS")
        self.pinned = int(pinned) if pinned and pinned.isdigit() and int(pinned) > 0 else None
        self.cores, self.interval = _cores(), interval
        self.threads = self.pinned or self.cores
        self._last: tuple[float, tuple[int, int] | None, int] | None = None
        self._set_threads = set_threads

    def _set(self, threads: int) -> None:
        if self._set_threads is not None:
            self._set_threads(threads)
            return
        import torch

        torch.set_num_threads(threads)

    def free_cores(self) -> float | None:
        """Cores not used by other processes since the last call (None on the first call / no /proc)."""
        now, machine, own = time.monotonic(), _machine_busy_and_total(), _own_ticks()
        last, self._last = self._last, (now, machine, own)
        if last is None or machine is None or last[1] is None:
            return None
        busy, total = machine[0] - last[1][0], machine[1] - last[1][1]
        if total <= 0:
            return None
        others = max(0, busy - (own - last[2])) / total  # share of all cores used by other processes
        return self.cores * (1.0 - others)

    def apply(self, force: bool = False) -> int:
        if self.pinned:
            if force:
                self._set(self.pinned)
            return self.pinned
        if not force and self._last is not None and time.monotonic() - self._last[0] < self.interval:
            return self.threads
        if self._last is None:
            self.free_cores()
            time.sleep(0.2)
        free = self.free_cores()
        wanted = self.cores if free is None else max(1, min(self.cores, int(free + 0.5)))
        if force or wanted != self.threads:
            self._set(wanted)
            self.threads = wanted
        return self.threads
