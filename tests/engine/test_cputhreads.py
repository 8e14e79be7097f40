"""The serving thread policy driven through load histories: a folder in the kernel's formats stands in
for ``/proc`` and ``/sys/fs/cgroup``, with this process's CPU time and the clock beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym.engine.cputhreads import TICKS_PER_SECOND, CpuReadings, ThreadPolicy


@pytest.fixture(autouse=True)
def unpinned(monkeypatch) -> None:
    """A user's pin would bypass the policy under test."""
    monkeypatch.delenv("GYM_TORCH_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


class Machine:
    """A host whose ``/proc/stat`` advances as its cores are used; ``own`` is this server's CPU seconds."""

    def __init__(self, root: Path, cpus: int, cgroup: str = "0::/\n") -> None:
        self.root, self.cpus, self.now, self.own = root, cpus, 100.0, 0.0
        self.busy, self.idle = [0] * cpus, [0] * cpus
        (root / "proc" / "self").mkdir(parents=True)
        (root / "proc" / "self" / "cgroup").write_text(cgroup)
        self._write()

    def limit(self, relative: str, text: str) -> None:
        path = self.root / "sys" / "fs" / "cgroup" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def run(self, seconds: float, others: dict[int, float], own: dict[int, float] | None = None) -> None:
        """``seconds`` pass; ``others[cpu]`` / ``own[cpu]``: the share of that core each used."""
        own = own or {}
        for cpu in range(self.cpus):
            used = min(1.0, others.get(cpu, 0.0) + own.get(cpu, 0.0))
            self.busy[cpu] += round(seconds * used * TICKS_PER_SECOND)
            self.idle[cpu] += round(seconds * (1 - used) * TICKS_PER_SECOND)
        self.own += seconds * sum(own.values())
        self.now += seconds
        self._write()

    def _write(self) -> None:
        # user nice system idle iowait irq softirq steal guest guest_nice, as the kernel prints them
        lines = [
            f"cpu{i} {b} 0 0 {i_} 0 0 0 0 0 0"
            for i, (b, i_) in enumerate(zip(self.busy, self.idle, strict=True))
        ]
        head = f"cpu  {sum(self.busy)} 0 0 {sum(self.idle)} 0 0 0 0 0 0"
        (self.root / "proc" / "stat").write_text("\n".join([head, *lines, "intr 0", "ctxt 0"]) + "\n")

    def policy(self, affinity: set[int] | None = None) -> tuple[ThreadPolicy, list[int]]:
        applied: list[int] = []
        readings = CpuReadings(
            root=self.root,
            own_cpu_seconds=lambda: self.own,
            clock=lambda: self.now,
            affinity=lambda: set(range(self.cpus)) if affinity is None else affinity,
        )
        return ThreadPolicy(interval=5.0, set_threads=applied.append, readings=readings), applied


def test_two_threads_on_idle_cores_one_while_another_process_keeps_a_core(tmp_path) -> None:
    machine = Machine(tmp_path, cpus=2)
    policy, applied = machine.policy()
    assert policy.cores == 2 and policy.apply(force=True) == 2
    machine.run(5, others={}, own={0: 1.0, 1: 0.9})  # the server alone, on both cores
    assert policy.apply() == 2
    machine.run(5, others={1: 1.0}, own={0: 1.0})  # a neighbour spins on one core
    assert policy.apply() == 1 and applied[-1] == 1
    machine.run(6, others={}, own={0: 1.0, 1: 0.8})  # the neighbour is gone
    assert policy.apply() == 2 and applied[-1] == 2


def test_threads_drop_within_a_second_and_come_back_after_the_interval(tmp_path) -> None:
    machine = Machine(tmp_path, cpus=2)
    policy, applied = machine.policy()
    policy.apply(force=True)
    machine.run(5, others={}, own={0: 1.0, 1: 1.0})
    assert policy.apply() == 2
    machine.run(0.5, others={1: 1.0}, own={0: 1.0})
    assert policy.apply() == 2  # not re-checked within a second
    machine.run(0.7, others={1: 1.0}, own={0: 1.0})
    assert policy.apply() == 1  # a neighbour that started spinning costs about a second, not five
    for _ in range(4):  # its load comes and goes: light for a second, a whole core for a second
        machine.run(1.2, others={1: 0.2}, own={0: 1.0, 1: 0.8})
        assert policy.apply() == 1
        machine.run(1.2, others={1: 1.0}, own={0: 1.0})
        assert policy.apply() == 1
    assert applied == [2, 1]  # one change, not one per burst
    for _ in range(5):
        machine.run(1.2, others={}, own={0: 1.0, 1: 1.0})
        policy.apply()
    assert policy.threads == 2 and applied == [2, 1, 2]


def test_a_container_counts_the_cores_its_quota_pays_for(tmp_path) -> None:
    machine = Machine(tmp_path, cpus=16, cgroup="0::/kubepods/pod1/space\n")
    machine.limit("kubepods/pod1/cpu.max", "200000 100000\n")
    machine.limit("kubepods/pod1/space/cpu.max", "max 100000\n")
    policy, _ = machine.policy()
    assert policy.quota == 2.0 and policy.cores == 2
    assert policy.apply(force=True) == 2
    machine.run(5, others={cpu: 0.5 for cpu in range(16)}, own={0: 1.0, 1: 1.0})  # tenants use half the host
    assert policy.apply() == 2  # not 8 threads on two cores' quota, nor 1 for the host's load


def test_cgroup_v1_quota(tmp_path) -> None:
    machine = Machine(tmp_path, cpus=8, cgroup="4:memory:/x\n3:cpu,cpuacct:/\n")
    machine.limit("cpu,cpuacct/cpu.cfs_quota_us", "150000\n")
    machine.limit("cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    policy, _ = machine.policy()
    assert policy.quota == 1.5 and policy.cores == 2


def test_load_on_cores_outside_the_affinity_mask_does_not_count(tmp_path) -> None:
    machine = Machine(tmp_path, cpus=4)
    policy, _ = machine.policy(affinity={2, 3})
    assert policy.cores == 2 and policy.apply(force=True) == 2
    machine.run(5, others={0: 1.0, 1: 1.0}, own={2: 1.0, 3: 1.0})  # the host's other half is busy
    assert policy.apply() == 2
    machine.run(5, others={0: 1.0, 1: 1.0, 3: 1.0}, own={2: 1.0})
    assert policy.apply() == 1


def test_the_policy_reads_this_machine() -> None:
    applied: list[int] = []
    policy = ThreadPolicy(interval=0.0, set_threads=applied.append)
    assert policy.cpus and 1 <= policy.cores <= len(policy.cpus)
    assert policy.readings.busy_and_total(policy.cpus) is not None  # the cpuN lines of the real /proc/stat
    chosen = policy.apply(force=True)
    assert 1 <= chosen <= policy.cores and applied == [chosen]
    free = policy.free_cores()
    assert free is None or 0.0 <= free <= policy.cores
