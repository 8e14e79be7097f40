"""bench/gpu_check.py --smoke on the CPU: every row of the GPU table runs its real command (gym train,
gym serve, transformers serve) at toy size, so the script is known to work before a GPU is lent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROWS = ["lora-0.5b", "lora-7b", "qlora-0.5b", "fsdp-0.5b", "serve-gym", "serve-transformers", "serve-vllm"]
# The suite runs one training row through the launcher and one serving row (each row is a real gym train /
# gym serve process, ~30 s of CPU); `make gpu-smoke` runs every row (GYM_GPU_SMOKE_ROWS=all).
SUITE_ROWS = ["fsdp-0.5b", "serve-gym"]


@pytest.mark.slow
def test_every_row_has_a_number_or_a_reason(tmp_path: Path) -> None:
    everything = os.environ.get("GYM_GPU_SMOKE_ROWS") == "all"
    wanted = ROWS if everything else SUITE_ROWS
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu_check.py"), "--smoke", "--out", str(tmp_path),
         "--rows", ",".join(wanted)],
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    rows = {row["name"]: row for row in report["rows"]}
    assert list(rows) == wanted
    for row in rows.values():
        if row["status"] == "ok":
            key_number = row["tokens_per_s"]
            assert isinstance(key_number, float) and key_number > 0, row
        else:
            assert row["status"] == "skipped" and row["reason"], row
    # what runs on this CPU must run, not be skipped: every training row, gym serve, transformers serve
    for name in ("lora-0.5b", "fsdp-0.5b", "serve-gym", "serve-transformers"):
        if name in rows:
            assert rows[name]["status"] == "ok", rows[name]
    for name in ("lora-0.5b", "fsdp-0.5b"):
        if name in rows:
            assert rows[name]["cpu_kernels"] is False  # the smoke run takes the path a GPU node takes
    assert rows["serve-gym"]["ttft_p99_ms"] >= rows["serve-gym"]["ttft_p50_ms"] > 0
    assert rows["serve-gym"]["requests"] == 16 and rows["serve-gym"]["streams"] == 16
    table = (tmp_path / "gpu_check.md").read_text()
    assert all(f"| {name} |" in table for name in wanted)
    assert table in done.stdout
