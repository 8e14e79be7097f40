"""The training rows: `gym train` on a generated gym.toml, exactly as a user runs it, read back from
train_results.json. Tokens/s is Gym's non-pad token count over Trainer.train's own clock; MFU is
6 x parameters x tokens/s over the device's dense bf16 peak (the usual estimate: LoRA skips the frozen
weights' gradients, so it overstates the work a little; gradient checkpointing's recompute is not counted).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from .models import build_model, device_name, peak_bf16_flops

# fmt: off
WORDS = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
    "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey",
    "xray", "yankee", "zulu", "model", "train", "serve", "data", "token", "layer", "weight", "adapter", "batch",
    "step", "loss", "grad", "shard", "device", "memory", "stream", "answer", "question",
)
# fmt: on


def write_rows(path: Path, model_dir: Path, count: int, max_length: int) -> None:
    """``count`` alpaca rows of random words, each about 80% of ``max_length`` tokens (none cut or skipped)."""
    from tokenizers import Tokenizer  # not transformers: this process stays light, gym train is timed

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    rng = random.Random(0)
    sample = " ".join(rng.choice(WORDS) for _ in range(400))
    per_word = len(tokenizer.encode(sample, add_special_tokens=False).ids) / 400
    words = max(4, int(0.8 * max_length / per_word / 2) - 8)  # half prompt, half answer; template margin
    with path.open("w") as out:
        for _ in range(count):
            prompt, answer = (" ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(2))
            out.write(json.dumps({"instruction": prompt, "input": "", "output": answer}) + "\n")


def gym_toml(out: Path, model_dir: Path, rows: Path, *, adapter: str, steps: int, batch: int,
             max_length: int, strategy: str = "none") -> str:  # fmt: skip
    return f"""\
[project]
name = "gpu-check"
output_dir = "{out}"

[model]
name_or_path = "{model_dir}"
template = "chatml"

[[datasets]]
path = "{rows}"
format = "alpaca"

[train]
method = "sft"
adapter = "{adapter}"
max_steps = {steps}
batch_size = {batch}
gradient_accumulation_steps = 1
learning_rate = 1e-4
lr_scheduler = "constant"
warmup_ratio = 0.0
max_length = {max_length}
save_steps = 100000
logging_steps = 5
resume = "never"

[train.distributed]
strategy = "{strategy}"
"""


def train_row(row: dict[str, Any], work: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run one training row (keys: shape, adapter, steps, batch, max_length, strategy) through `gym train`."""
    model_dir = work / "models" / row["shape"]
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    info = build_model(row["shape"], model_dir)
    folder = work / row["name"]
    folder.mkdir(parents=True, exist_ok=True)
    rows = folder / "rows.jsonl"
    write_rows(rows, model_dir, row["steps"] * row["batch"], row["max_length"])
    out = folder / "out"
    config = folder / "gym.toml"
    config.write_text(gym_toml(out, model_dir, rows, adapter=row["adapter"], steps=row["steps"],
                               batch=row["batch"], max_length=row["max_length"],
                               strategy=row.get("strategy", "none")))  # fmt: skip
    command = [sys.executable, "-m", "gym", "train", str(config), "--no-progress"]
    if (
        row.get("strategy", "none") != "none"
    ):  # one rank under torch's elastic launcher, as a GPU node runs it
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                   "--nproc-per-node", "1", "--module", "gym", "train", str(config), "--no-progress"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    (folder / "gym-train.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        raise RuntimeError(f"gym train exited with {done.returncode}: {lines[-1] if lines else 'no output'}")
    results = json.loads((out / "train_results.json").read_text())
    seconds = results.get("train_runtime") or results["wall_seconds"]
    tokens_per_s = results["tokens"] / seconds
    peak = peak_bf16_flops(device_name())
    decided = results.get("device") or {}
    return {
        "tokens_per_s": round(tokens_per_s, 1),
        "mfu": round(6 * info["parameters"] * tokens_per_s / peak, 4) if peak else None,
        "mfu_note": None if peak else f"no dense bf16 peak known for {device_name()}",
        "parameters": info["parameters"],
        "steps": results["steps"],
        "tokens": results["tokens"],
        "final_loss": results["final_loss"],
        "world_size": results.get("world_size"),
        "hardware": results.get("hardware"),
        "dtype": decided.get("dtype"),
        "attention": decided.get("attention"),
        "cpu_kernels": decided.get("cpu_kernels"),
    }
