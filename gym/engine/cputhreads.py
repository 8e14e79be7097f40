"""How many threads the CPU engine uses: every core the server has to itself, re-checked as it runs.

On 2 cores (bench/serve_load.py and a bare ``scaled_dot_product_attention`` call): when the machine is
otherwise idle, two threads serve the 26M model faster than one; when other processes keep the cores
busy, two threads are several times *slower* than one, because each parallel op waits at a barrier for
a worker thread the kernel has descheduled. A fixed number is wrong in one of the two cases, so the
worker measures, every few seconds, how much CPU the rest of the machine used on the cores this
process may run on (their busy time minus this process's own) and gives torch the cores left over.

The cores are the ones the process may run on *and* may pay for: a container (a Space, a pod) often
sees every core of its host while a CPU quota grants it two, and the host-wide ``cpu`` line of
``/proc/stat`` then mostly measures other tenants. So the count is capped by the cgroup's quota
(``cpu.max``, or ``cpu.cfs_quota_us`` on cgroup v1) and the load is read from the ``cpuN`` lines of
the cores in the affinity mask. ``GYM_TORCH_THREADS`` (or ``OMP_NUM_THREADS``) pins the number instead.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc/stat's unit


def _own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


class CpuReadings:
    """What the policy reads: ``/proc`` and ``/sys/fs/cgroup`` under ``root``, this process's CPU time,
    a clock. Pointing ``root`` at a folder of files in the kernel's formats drives the policy through
    any load history without touching the machine's."""

    def __init__(
        self,
        root: Path = Path("/"),
        own_cpu_seconds: Callable[[], float] = _own_cpu_seconds,
        clock: Callable[[], float] = time.monotonic,
        affinity: Callable[[], set[int]] | None = None,
    ) -> None:
        self.root, self.own_cpu_seconds, self.clock = root, own_cpu_seconds, clock
        if affinity is None and hasattr(os, "sched_getaffinity"):
            affinity = lambda: set(os.sched_getaffinity(0))  # noqa: E731
        self._affinity = affinity

    def _read(self, relative: str) -> str | None:
        try:
            return (self.root / relative).read_text()
        except OSError:
            return None

    def affinity(self) -> set[int]:
        return self._affinity() if self._affinity else set(range(os.cpu_count() or 1))

    def busy_and_total(self, cpus: set[int]) -> tuple[int, int] | None:
        """Clock ticks (busy, all) summed over the ``cpuN`` lines of ``cpus`` in ``/proc/stat``."""
        text = self._read("proc/stat")
        if text is None:
            return None
        busy = total = 0
        for line in text.splitlines():
            name, _, rest = line.partition(" ")
            if not name.startswith("cpu") or not name[3:].isdigit() or int(name[3:]) not in cpus:
                continue
            try:
                fields = [int(x) for x in rest.split()]
            except ValueError:
                return None
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
            busy, total = busy + sum(fields[:8]) - idle, total + sum(fields[:8])
        return (busy, total) if total else None

    def quota_cores(self) -> float | None:
        """The CPU quota of this process's cgroup and its parents in cores (None: unlimited/unknown)."""
        limits = []
        for line in (self._read("proc/self/cgroup") or "").splitlines():
            _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
            parts = [p for p in path.strip().split("/") if p]
            for depth in range(len(parts), -1, -1):
                folder = "/".join(parts[:depth])
                if controllers == "":  # cgroup v2: "max 100000" or "200000 100000"
                    fields = (self._read(f"sys/fs/cgroup/{folder}/cpu.max".replace("//", "/")) or "").split()
                    if len(fields) == 2 and fields[0] != "max":
                        limits.append(int(fields[0]) / int(fields[1]))
                elif "cpu" in controllers.split(","):
                    base = f"sys/fs/cgroup/{controllers}/{folder}".rstrip("/")
                    quota = (self._read(base + "/cpu.cfs_quota_us") or "").strip()
                    period = (self._read(base + "/cpu.cfs_period_us") or "").strip()
                    if quota.lstrip("-").isdigit() and int(quota) > 0 and period.isdigit() and int(period):
                        limits.append(int(quota) / int(period))
        return min(limits) if limits else None


Sample = tuple[float, "tuple[int, int] | None", float]  # (clock, (busy, total) ticks, own CPU seconds)


class ThreadPolicy:
    """Call :meth:`apply` from the thread that runs the model (torch's thread count is per thread).

    The two wrong choices cost differently: two threads on cores another process keeps busy were 5-12x
    slower than one (tiny model, 16 streams), one thread on idle cores at most 2x. So the policy drops
    threads on the load of the last ``react`` seconds, and adds them back only once the cores have been
    free for the last ``interval`` seconds too: a neighbour that starts spinning costs about a second,
    a burst of load that comes and goes does not flip the count back and forth.

    ``set_threads`` applies the number (default: ``torch.set_num_threads``; llama.cpp passes its own);
    ``readings`` is where the load comes from (default: this machine).
    """

    def __init__(
        self,
        interval: float = 5.0,
        set_threads: Callable[[int], None] | None = None,
        readings: CpuReadings | None = None,
        react: float = 1.0,
    ) -> None:
        pinned = os.environ.get("GYM_TORCH_THREADS") or os.environ.get("OMP_NUM_THREADS")
        self.pinned = int(pinned) if pinned and pinned.isdigit() and int(pinned) > 0 else None
        self.readings = readings or CpuReadings()
        self.cpus = self.readings.affinity()
        self.quota = self.readings.quota_cores()
        visible = len(self.cpus)
        self.cores = max(1, min(visible, math.ceil(self.quota - 0.01) if self.quota else visible))
        self.interval, self.react = interval, min(react, interval)
        self.threads = self.pinned or self.cores
        self._samples: list[Sample] = []  # oldest first, reaching back at least ``interval`` when it can
        self._changed: Sample | None = None  # when the count last changed
        self._set_threads = set_threads

    def _set(self, threads: int) -> None:
        if self._set_threads is not None:
            self._set_threads(threads)
            return
        import torch

        torch.set_num_threads(threads)

    def _free_between(self, first: Sample, last: Sample) -> float | None:
        if first[1] is None or last[1] is None:
            return None
        busy, total = last[1][0] - first[1][0], last[1][1] - first[1][1]
        if total <= 0:
            return None
        own_ticks = (last[2] - first[2]) * TICKS_PER_SECOND
        others = min(1.0, max(0.0, busy - own_ticks) / total)  # share of those cores others used
        return min(float(self.cores), len(self.cpus) * (1.0 - others))

    def _sample(self) -> Sample:
        readings = self.readings
        sample = (readings.clock(), readings.busy_and_total(self.cpus), readings.own_cpu_seconds())
        self._samples.append(sample)
        while len(self._samples) > 2 and sample[0] - self._samples[1][0] >= self.interval:
            self._samples.pop(0)  # the next one is old enough to start the long window
        return sample

    def free_cores(self) -> float | None:
        """Cores not used by other processes since the last call (None on the first call / no /proc)."""
        previous = self._samples[-1] if self._samples else None
        sample = self._sample()
        return None if previous is None else self._free_between(previous, sample)

    def _wanted(self, free: float | None) -> int:
        return self.cores if free is None else max(1, min(self.cores, int(free + 0.5)))

    def apply(self, force: bool = False) -> int:
        if self.pinned:
            if force:
                self._set(self.pinned)
            return self.pinned
        if not force and self._samples and self.readings.clock() - self._samples[-1][0] < self.react:
            return self.threads
        if not self._samples:
            self.free_cores()
            time.sleep(0.2)
        recent = self._wanted(self.free_cores())
        now = self._samples[-1]
        start = max(self._samples[0], self._changed or self._samples[0], key=lambda sample: sample[0])
        if force or recent < self.threads:
            wanted = recent
        elif recent > self.threads and now[0] - start[0] >= self.interval:  # free since the last change
            wanted = min(recent, self._wanted(self._free_between(start, now)))
        else:
            wanted = self.threads
        if force or wanted != self.threads:
            self._set(wanted)
            self.threads, self._changed = wanted, now
        return self.threads
