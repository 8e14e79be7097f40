#!/usr/bin/env python3
"""Where the test suite's CPU goes: a pytest plugin that records each test's CPU, and its report.

The suite is bound by CPU (two workers keep both cores busy), so wall time says little about which
test to make cheaper: under load every test looks slow. CPU-seconds do not move with load. For each
test the plugin records the worker's own CPU and that of the processes the test started and reaped
(``RUSAGE_CHILDREN``: a ``gym`` subprocess, a Space, Chromium), one JSON line per test.

    .venv/bin/python -m pytest -n 2 --dist worksteal -p bench.suite_cpu -p no:cacheprovider -q
    .venv/bin/python bench/suite_cpu.py            # the report: shares, the costliest tests, per layer

``GYM_SUITE_CPU_LOG`` names the log (default ``.bench/suite_cpu.jsonl``; delete it before a new run).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time
from pathlib import Path

import pytest

LOG = Path(os.environ.get("GYM_SUITE_CPU_LOG", ".bench/suite_cpu.jsonl"))


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Setup, call and teardown of one test (a module fixture's processes count where they are reaped)."""
    began, started, (own, children) = time.time(), time.monotonic(), _cpu()
    yield
    own_after, children_after = _cpu()
    LOG.parent.mkdir(parents=True, exist_ok=True)
    record = {"id": item.nodeid, "wall": time.monotonic() - started, "own": own_after - own,
              "children": children_after - children, "began": began,
              "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}  # fmt: skip
    with LOG.open("a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")


def report(log: Path, top: int) -> str:
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    cpu = {row["id"]: row["own"] + row["children"] for row in rows}
    total = sum(cpu.values())
    ranked = sorted(cpu.items(), key=lambda item: -item[1])
    lines = [f"{len(rows)} tests, {total:,.0f} CPU-s", "", "| share of the CPU | tests |", "|---:|---|"]
    for count in (10, 20, 40, 100):
        share = sum(seconds for _, seconds in ranked[:count]) / total if total else 0.0
        lines.append(f"| {share:.0%} | the {count} most expensive |")
    lines += ["", "| CPU-s | test |", "|---:|---|"]
    lines += [f"| {seconds:.0f} | {test.removeprefix('tests/')} |" for test, seconds in ranked[:top]]
    layers: collections.Counter[str] = collections.Counter()
    for test, seconds in cpu.items():
        parts = test.split("::")[0].split("/")
        layers[parts[1] if len(parts) > 2 else "(top level)"] += seconds
    lines += [
        "",
        "per layer: " + ", ".join(f"{name} {seconds:.0f}" for name, seconds in layers.most_common()),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log", nargs="?", type=Path, default=LOG)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    print(report(args.log, args.top))


if __name__ == "__main__":
    main()
