"""Training throughput, side by side in one run: non-pad tokens/s of plain TRL vs Gym.

Same model (builtin:tiny + LoRA r=16 on all linear layers), same data (alpaca_en_demo from
../shared/fixtures/llamafactory-data, chat template chatml, max_length 256), same batch, learning rate,
steps, seed and torch threads. Each run is a fresh subprocess; only `trainer.train()` is timed (data
preparation excluded on both sides).

1. TRL: a plain SFTTrainer script with TRL's defaults (its own tokenization, padding).
2. Gym sft+lora, padded batches (target >= 1.0x TRL: Gym adds no overhead).
3. Gym sft+lora with `packing = true` (padding-free; target >= 1.5x TRL on variable-length chat data).

Run: `.venv/bin/python bench/train_throughput.py [--steps 40] [--threads 1]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "fixtures" / "llamafactory-data" / "alpaca_en_demo.json"
BATCH, LR, MAX_LENGTH, RANK = 8, 2e-4, 256, 16

TRL_SCRIPT = """
import json, sys, time
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer
from gym.model.builtin import ensure_builtin
from gym.data.templates import TEMPLATES
steps, out = int(sys.argv[1]), sys.argv[2]
folder = ensure_builtin("builtin:tiny")
tok = AutoTokenizer.from_pretrained(folder)
tok.chat_template = TEMPLATES["chatml"].jinja
rows = json.load(open(sys.argv[3]))
chats = [{"messages": [{"role": "user", "content": (r["instruction"] + "\\n" + r["input"]).strip()},
                       {"role": "assistant", "content": r["output"]}]} for r in rows]
# The rows Gym keeps: Gym skips a row longer than max_length where TRL would truncate it, so both train
# on the same whole conversations and tokens/s compares like with like.
chats = [c for c in chats if len(tok.apply_chat_template(c["messages"], tokenize=True, return_dict=False)) <= %(max_length)d]
data = Dataset.from_list(chats)
args = SFTConfig(output_dir=out, max_steps=steps, per_device_train_batch_size=%(batch)d, learning_rate=%(lr)g,
                 max_length=%(max_length)d, logging_steps=10, save_strategy="no", report_to="none", seed=42,
                 use_cpu=True, disable_tqdm=True, lr_scheduler_type="constant", dataloader_num_workers=0)
trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(folder), args=args, train_dataset=data,
                     processing_class=tok,
                     peft_config=LoraConfig(r=%(rank)d, lora_alpha=%(alpha)d, target_modules="all-linear", lora_dropout=0.05))
started = time.perf_counter()
trainer.train()
seconds = time.perf_counter() - started
print("RESULT", json.dumps({"tokens": trainer._total_train_tokens, "seconds": seconds}))
""" % {"batch": BATCH, "lr": LR, "max_length": MAX_LENGTH, "rank": RANK, "alpha": 2 * RANK}  # noqa: UP031 (the script is full of braces)

GYM_SCRIPT = """
import json, sys
from gym.config import load_config
from gym.train.runner import run_training
result = run_training(load_config(sys.argv[1]), show_progress=False)
print("RESULT", json.dumps({"tokens": result.tokens, "seconds": result.wall_seconds}))
"""


def gym_config(folder: Path, steps: int, packing: bool) -> Path:
    path = folder / f"gym-{'packed' if packing else 'padded'}.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [project]
            name = "bench"
            output_dir = "{folder / ("packed" if packing else "padded")}"
            [model]
            name_or_path = "builtin:tiny"
            template = "chatml"
            [[datasets]]
            path = "{DATA}"
            format = "alpaca"
            max_bad_fraction = 1.0
            [train]
            adapter = "lora"
            max_steps = {steps}
            batch_size = {BATCH}
            gradient_accumulation_steps = 1
            learning_rate = {LR}
            lr_scheduler = "constant"
            warmup_ratio = 0.0
            max_length = {MAX_LENGTH}
            packing = {str(packing).lower()}
            save_steps = 100000
            logging_steps = 10
            resume = "never"
            [train.lora]
            r = {RANK}
            alpha = {2 * RANK}
            """
        )
    )
    return path


def run(args: list[str], threads: int, cache: Path) -> dict[str, float]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "GYM_CACHE_DIR": str(cache),
        "CUDA_VISIBLE_DEVICES": "",
    }
    done = subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"run failed:\n{done.stderr[-2000:]}")
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    options = parser.parse_args()
    if not DATA.is_file():
        raise SystemExit(f"fixture not found: {DATA}")
    with tempfile.TemporaryDirectory() as tmp:
        folder, cache = Path(tmp), Path(tmp) / "cache"
        runs = {
            "TRL SFTTrainer (defaults)": [TRL_SCRIPT, str(options.steps), str(folder / "trl"), str(DATA)],
            "Gym sft+lora (padded)": [GYM_SCRIPT, str(gym_config(folder, options.steps, packing=False))],
            "Gym sft+lora (packing, padding-free)": [
                GYM_SCRIPT,
                str(gym_config(folder, options.steps, packing=True)),
            ],
        }
        results = {name: run(args, options.threads, cache) for name, args in runs.items()}
    baseline = results["TRL SFTTrainer (defaults)"]
    base_rate = baseline["tokens"] / baseline["seconds"]
    print(
        f"{options.steps} steps, batch {BATCH}, max_length {MAX_LENGTH}, LoRA r={RANK}, {options.threads} thread(s)"
    )
    for name, result in results.items():
        rate = result["tokens"] / result["seconds"]
        print(
            f"  {name:40s} {rate:9,.0f} non-pad tok/s  {rate / base_rate:5.2f}x TRL  ({result['tokens']:,} tokens)"
        )
    print("targets: Gym padded >= 1.00x, Gym packing >= 1.50x")


if __name__ == "__main__":
    main()
