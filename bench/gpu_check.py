#!/usr/bin/env python3
"""One table of what Gym does on a GPU: LoRA SFT tokens/s and MFU on random Qwen2.5-0.5B- and 7B-shaped
models (bf16), a QLoRA step, FSDP on one GPU, `gym serve` at 16 streams beside `transformers serve
--continuous-batching`, and Gym's vLLM backend when vLLM is importable.

Every row goes through the commands a user runs (`gym train` / `gym serve` on generated files) in its
own subprocess with its own time limit, so one failing row costs only its own cell. The whole run fits
``--budget`` seconds (default 450, under 8 minutes on one H200 with model building included).

``--smoke`` runs the same rows on the CPU with a two-layer Qwen2-shaped model and two steps: CI proves
the script and every row's plumbing (tests/gpu/test_gpu_check_smoke.py); the numbers mean nothing.

    python bench/gpu_check.py [--smoke] [--out DIR] [--budget 450] [--rows lora-0.5b,serve-gym]

Writes DIR/gpu_check.json and DIR/gpu_check.md (default DIR: .bench/gpu-check) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

TRAIN = {"kind": "train", "shape": "qwen2.5-0.5b", "adapter": "lora", "steps": 30, "batch": 16,
         "max_length": 1024, "timeout": 150}  # fmt: skip
SERVE = {"kind": "serve", "shape": "qwen2.5-0.5b", "streams": 16, "requests": 64, "max_tokens": 128,
         "prompt_words": 60, "device": "cuda", "timeout": 150}  # fmt: skip
ROWS: dict[str, dict[str, Any]] = {
    "lora-0.5b": {**TRAIN, "what": "bf16 LoRA SFT"},
    "lora-7b": {**TRAIN, "what": "bf16 LoRA SFT", "shape": "qwen2.5-7b", "steps": 10, "batch": 8,
                "timeout": 300, "smoke_skip": "at smoke size this is lora-0.5b's command (only the shape differs)"},
    "qlora-0.5b": {**TRAIN, "what": "QLoRA SFT (bitsandbytes 4-bit)", "adapter": "qlora", "steps": 10},
    "fsdp-0.5b": {**TRAIN, "what": "LoRA SFT, FSDP (fully_shard), 1 rank", "strategy": "fsdp",
                  "steps": 10},
    "serve-gym": {**SERVE, "what": "gym serve (transformers backend)", "server": "gym"},
    "serve-transformers": {**SERVE, "what": "transformers serve --continuous-batching",
                           "server": "transformers"},
    "serve-vllm": {**SERVE, "what": "gym serve --backend vllm", "server": "gym-vllm", "timeout": 200},
}  # fmt: skip
SMOKE = {"shape": "qwen2-smoke", "steps": 2, "batch": 2, "max_length": 64, "requests": 16, "max_tokens": 8,
         "prompt_words": 8, "device": "cpu", "timeout": 240}  # fmt: skip


def row_spec(name: str, smoke: bool) -> dict[str, Any]:
    spec = {**ROWS[name], "name": name}
    if smoke:
        spec.update({k: v for k, v in SMOKE.items() if k in spec})
    return spec


def smoke_skip(name: str) -> str | None:
    """Why ``name`` does not run under --smoke (its command is another row's at toy size), or None."""
    return ROWS[name].get("smoke_skip")


def child_env(smoke: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update({"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "DISABLE_VERSION_CHECK": "1"})
    if smoke:  # the CPU, with Gym's CPU kernels off: the code path a GPU node takes
        env.update({"CUDA_VISIBLE_DEVICES": "", "GYM_CPU_KERNELS": "0"})
    return env


def run_one(spec: dict[str, Any], work: Path, smoke: bool, timeout: float) -> dict[str, Any]:
    """Inside the row's own process: run it; ``status`` ok with numbers, skipped or failed with a reason."""
    from gpu.serve_rows import Skip, serve_row
    from gpu.train_rows import train_row

    env = child_env(smoke)
    try:
        if spec["kind"] == "train":
            if spec["adapter"] == "qlora":
                import importlib.util

                if importlib.util.find_spec("bitsandbytes") is None:
                    raise Skip("bitsandbytes is not importable here (pip install 'zoo-gym[qlora]')")
            return {"status": "ok", **train_row(spec, work, env, timeout)}
        return {"status": "ok", **serve_row(spec, work, env, timeout)}
    except Skip as skip:
        return {"status": "skipped", "reason": str(skip)}
    except subprocess.TimeoutExpired as expired:
        return {
            "status": "failed",
            "reason": f"{' '.join(map(str, expired.cmd[1:4]))} ran past {timeout:.0f}s",
        }
    except Exception as error:  # the table records any failure; the next row still runs
        return {"status": "failed", "reason": f"{type(error).__name__}: {str(error).strip()[:400]}"}


def run_row(name: str, args: argparse.Namespace, work: Path, timeout: float) -> dict[str, Any]:
    """The row in a subprocess of its own, killed (with its servers) past ``timeout``."""
    result_file = work / f"{name}.result.json"
    command = [sys.executable, __file__, "--row", name, "--work", str(work), "--row-timeout", str(timeout),
               "--result", str(result_file), *(["--smoke"] if args.smoke else [])]  # fmt: skip
    started = time.monotonic()
    process = subprocess.Popen(command, start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = process.communicate(timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return {"status": "failed", "reason": f"timed out after {timeout + 30:.0f}s"}
    seconds = round(time.monotonic() - started, 1)
    if result_file.is_file():
        return {**json.loads(result_file.read_text()), "row_seconds": seconds}
    lines = [line for line in (stderr or "").splitlines() if line.strip()]
    return {"status": "failed", "reason": f"exited {process.returncode}: {lines[-1] if lines else ''}"}


def cell(value: Any, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def markdown(report: dict[str, Any]) -> str:
    lines = [f"GPU check on {report['device']} (torch {report['torch']}, transformers {report['transformers']})"
             f"{' — smoke run on CPU, numbers meaningless' if report['smoke'] else ''}", "",
             "| row | what | model | tokens/s | MFU | TTFT p50 / p99 | status |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in report["rows"]:
        ttft = f"{row['ttft_p50_ms']:.0f} / {row['ttft_p99_ms']:.0f} ms" if "ttft_p50_ms" in row else "—"
        mfu = f"{row['mfu']:.1%}" if row.get("mfu") is not None else "—"
        status = "ok" if row["status"] == "ok" else f"{row['status']}: {row.get('reason', '')}"
        lines.append(f"| {row['name']} | {row['what']} | {row['shape']} | {cell(row.get('tokens_per_s'), ',.0f')} "
                     f"| {mfu} | {ttft} | {status} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, two steps (CI)")
    parser.add_argument("--out", type=Path, default=REPO / ".bench" / "gpu-check")
    parser.add_argument("--budget", type=float, help="seconds for all rows together (450; --smoke: 1200)")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma list of rows to run")
    parser.add_argument("--work", type=Path, help="where models and runs go (default: a temporary folder)")
    parser.add_argument("--row", help=argparse.SUPPRESS)  # internal: run one row in this process
    parser.add_argument("--row-timeout", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        outcome = run_one(row_spec(args.row, args.smoke), args.work, args.smoke, args.row_timeout)
        args.result.write_text(json.dumps(outcome))
        return 0
    names = [name for name in args.rows.split(",") if name]
    unknown = [name for name in names if name not in ROWS]
    if unknown:
        parser.error(f"unknown rows {', '.join(unknown)}; choose from {', '.join(ROWS)}")
    if args.smoke:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch
    import transformers
    from gpu.models import DEVICE_ENV, device_name

    os.environ[DEVICE_ENV] = device_name()  # the rows' processes read it instead of importing torch
    args.budget = args.budget or (1200 if args.smoke else 450)
    work = args.work or Path(tempfile.mkdtemp(prefix="gym-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget
    rows = []
    for name in names:
        spec = row_spec(name, args.smoke)
        left = deadline - time.monotonic() - 30
        if args.smoke and smoke_skip(name):
            outcome = {"status": "skipped", "reason": smoke_skip(name)}
        elif left < 20:
            outcome = {"status": "skipped", "reason": f"the {args.budget:.0f}s budget was spent"}
        else:
            outcome = run_row(name, args, work, min(spec["timeout"], left))
        rows.append({"name": name, "what": spec["what"], "shape": spec["shape"], **outcome})
        print(f"{name}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    report = {"device": os.environ[DEVICE_ENV], "torch": torch.__version__, "transformers": transformers.__version__,
              "smoke": args.smoke, "rows": rows}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1) + "\n")
    table = markdown(report)
    (args.out / "gpu_check.md").write_text(table)
    print(table)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
