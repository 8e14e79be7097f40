"""SFT LoRA side by side: Gym vs LLaMA-Factory vs plain TRL, non-pad tokens/s and whole-command wall time.

Same for every tool (the peers folder's README, ``PEERS`` in bench/common.py): the model folder (builtin:tiny, and the random 26M
Llama of bench/common.py), the rows (alpaca_en_demo rows whose chatml rendering fits the cutoff for
every tool, so truncation decides nothing), LoRA r 8 on all linear layers, 30 steps x batch 8, cutoff
128, learning rate 1e-4 constant, no gradient checkpointing, fp32, no checkpoint saving.

The timed window is the same for every tool: Hugging Face ``Trainer.train``'s own ``train_runtime``
(all three train through it), and tokens are each tool's non-pad count over that run (Gym's token
counter, LLaMA-Factory's ``include_num_input_tokens_seen: non_padding``, TRL's ``num_tokens``). Gym
and LLaMA-Factory also report the process CPU time of their training window (``on_train_begin`` to
``on_train_end``: Gym's ``train_cpu_seconds``; LLaMA-Factory runs what ``llamafactory-cli train``
runs on one device, ``run_exp``, with one callback added that records it), printed as the ratio of
tokens per training CPU-second: on a shared machine the wall clock mostly measures the other users.
The whole command (start-up, data, model, training, saving) is timed from outside for Gym and
LLaMA-Factory, each from a venv holding what its training command needs (Gym: ``zoo-gym[train]`` in
``.bench/gym-train``, the project venv's versions; see bench/common.py), in wall time and in CPU seconds (user + system of the command and its children). Each
run is a fresh process; tools alternate; medians of ``--repeats``. Thread settings: each tool's
default and ``OMP_NUM_THREADS=1``.

Packing (``--packing tiny``): Gym with ``train.packing = true`` against Gym unpacked, both as padded
batches (``train.padding_free = false``, how the peers batch unpacked rows) and as Gym's default
padding-free rows, and against LLaMA-Factory unpacked (padded batches) and packed (its ``neat_packing``,
which keeps attention within each row), one epoch over the same ``--pack-rows`` alpaca rows that fit
``--pack-cutoff`` (512) tokens, so the rows' lengths vary from a few dozen to 500 tokens; all five
alternate, non-pad tokens/s over ``train_runtime``.

Plain TRL is TRL 1.x's ``SFTTrainer`` as shipped: it has no switch for its per-step entropy and
top-1 accuracy pass (a fused LM head computes them on every step), so its figure includes that cost.
TRL's ``SFTConfig`` defaults to ``bf16=True``, which on a CPU with AVX512-BF16 trains under bf16
autocast (1.5x faster on the 26M model here, none on the tiny one): it is set to False so that all
three tools train in fp32.

    python bench/train_throughput.py [--models tiny,26m] [--threads default,1] [--repeats 3] [--steps 30]
                                     [--packing tiny] [--pack-cutoff 512] [--pack-rows 240]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    FIXTURES,
    MODELS,
    gym_env,
    gym_train_python,
    llamafactory_python,
    log,
    median_of,
    ratio,
    run_result,
    thread_env,
)

BATCH, LR, CUTOFF, RANK = 8, 1e-4, 128, 8
PACK_CUTOFF, PACK_ROWS = 512, 240  # the packing comparison: variable-length rows (up to 512 tokens)
PACK_MODES = {"padded": "padded", "padding_free": "default", "packed": "packed"}  # column: gym_run's batching

TRL = """
import json, sys, time
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer
from gym.data.templates import TEMPLATES
model_dir, rows_file, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
tok = AutoTokenizer.from_pretrained(model_dir)
tok.chat_template = TEMPLATES["chatml"].jinja
rows = json.load(open(rows_file))
chats = [{"messages": [{"role": "user", "content": (r["instruction"] + "\\n" + r["input"]).strip()},
                       {"role": "assistant", "content": r["output"]}]} for r in rows]
args = SFTConfig(output_dir=out, max_steps=steps, per_device_train_batch_size=%(batch)d, learning_rate=%(lr)g,
                 max_length=%(cutoff)d, logging_steps=10, save_strategy="no", report_to="none", seed=42,
                 use_cpu=True, disable_tqdm=True, lr_scheduler_type="constant", dataloader_num_workers=0,
                 gradient_checkpointing=False, assistant_only_loss=False, bf16=False)
trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), args=args,
                     train_dataset=Dataset.from_list(chats), processing_class=tok,
                     peft_config=LoraConfig(r=%(rank)d, lora_alpha=%(alpha)d, target_modules="all-linear", lora_dropout=0.0))
output = trainer.train()
tokens = max((e.get("num_tokens", 0) for e in trainer.state.log_history), default=0)
print("RESULT", json.dumps({"tokens": tokens, "seconds": output.metrics["train_runtime"]}))
""" % {"batch": BATCH, "lr": LR, "cutoff": CUTOFF, "rank": RANK, "alpha": 2 * RANK}  # noqa: UP031 (braces)


LLAMAFACTORY_TRAIN = """
import json, sys, time
import yaml
from transformers import TrainerCallback
from llamafactory.train.tuner import run_exp

class TrainCpu(TrainerCallback):  # process CPU time over on_train_begin..on_train_end, as Gym records it
    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.process_time()

    def on_train_end(self, args, state, control, **kwargs):
        json.dump({"cpu": time.process_time() - self.started}, open(sys.argv[2], "w"))

run_exp(yaml.safe_load(open(sys.argv[1])), callbacks=[TrainCpu()])
"""


def fitting_rows(
    folder: Path, model_dir: Path, cutoff: int = CUTOFF, name: str = "fit", limit: int | None = None
) -> Path:
    """alpaca_en_demo rows whose chatml rendering fits ``cutoff`` (whole, for every tool); the first ``limit``."""
    from transformers import AutoTokenizer

    from gym.data.templates import TEMPLATES

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = json.loads((FIXTURES / "alpaca_en_demo.json").read_text())
    kept = []
    for row in rows:
        messages = [{"role": "user", "content": (row["instruction"] + "\n" + row["input"]).strip()},
                    {"role": "assistant", "content": row["output"]}]  # fmt: skip
        text = tokenizer.apply_chat_template(
            messages, chat_template=TEMPLATES["chatml"].jinja, tokenize=False
        )
        if (
            len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= cutoff - 8
        ):  # margin: LF's own template
            kept.append(row)
    kept = kept[:limit]
    path = folder / f"{name}.json"
    path.write_text(json.dumps(kept, ensure_ascii=False))
    (folder / "dataset_info.json").write_text(json.dumps({name: {"file_name": path.name}}))
    log(f"{len(kept)} alpaca rows fit {cutoff} tokens")
    return path


def gym_python() -> str:
    """Gym as installed for training (``zoo-gym[train]``, see bench/common.py), else the project's venv."""
    python = gym_train_python()
    return str(python) if python is not None else sys.executable


def gym_run(folder: Path, model_dir: Path, rows: Path, steps: int, threads: int | None, *,
            cutoff: int = CUTOFF, batching: str = "default") -> dict[str, Any]:  # fmt: skip
    """One ``gym train``; ``steps`` 0: one epoch over the rows (the packing comparison: the same rows).

    ``batching``: ``default`` (Gym's: padding-free on CPU), ``padded`` (``train.padding_free = false``,
    right-padded batches as the peers train) or ``packed`` (``train.packing = true``).
    """
    out = folder / "gym-out"
    config = folder / "gym.toml"
    config.write_text(f"""
[project]
name = "bench"
output_dir = "{out}"
[model]
name_or_path = "{model_dir}"
template = "chatml"
[[datasets]]
path = "{rows}"
format = "alpaca"
[train]
method = "sft"
adapter = "lora"
max_steps = {steps or -1}
epochs = 1
batch_size = {BATCH}
gradient_accumulation_steps = 1
learning_rate = {LR}
lr_scheduler = "constant"
warmup_ratio = 0.0
max_length = {cutoff}
packing = {str(batching == "packed").lower()}
padding_free = {"false" if batching == "padded" else '"auto"'}
gradient_checkpointing = false
save_steps = 100000
logging_steps = 10
resume = "never"
[train.lora]
r = {RANK}
alpha = {2 * RANK}
dropout = 0.0
""")
    with tempfile.TemporaryDirectory() as cache:
        run = run_result(
            [gym_python(), "-m", "gym", "train", str(config)], gym_env(threads, GYM_CACHE_DIR=cache)
        )
    results = json.loads((out / "train_results.json").read_text())
    return {"tokens": results["tokens"], "seconds": results.get("train_runtime") or results["wall_seconds"],
            "train_cpu": results.get("train_cpu_seconds"), "wall": run["wall"], "cpu": run["cpu"]}  # fmt: skip


def llamafactory_run(python: Path, folder: Path, model_dir: Path, steps: int, threads: int | None, *,
                     dataset: str = "fit", cutoff: int = CUTOFF, packed: bool = False) -> dict[str, Any]:  # fmt: skip
    """One LLaMA-Factory SFT run; ``steps`` 0: one epoch over ``dataset``; ``packed``: its ``neat_packing``
    (rows packed into ``cutoff``-token sequences, each attending only to itself: a 4D block-diagonal mask
    on CPU)."""
    out = folder / "lf-out"
    config = folder / "lf.yaml"
    config.write_text(f"""
model_name_or_path: {model_dir}
stage: sft
do_train: true
finetuning_type: lora
lora_rank: {RANK}
lora_alpha: {2 * RANK}
lora_dropout: 0.0
lora_target: all
dataset: {dataset}
dataset_dir: {folder}
template: chatml
cutoff_len: {cutoff}
neat_packing: {str(packed).lower()}
overwrite_cache: true
preprocessing_num_workers: 1
output_dir: {out}
overwrite_output_dir: true
per_device_train_batch_size: {BATCH}
gradient_accumulation_steps: 1
learning_rate: {LR}
lr_scheduler_type: constant
warmup_ratio: 0.0
{f"max_steps: {steps}" if steps else "num_train_epochs: 1"}
logging_steps: 10
save_strategy: "no"
bf16: false
disable_gradient_checkpointing: true
include_num_input_tokens_seen: non_padding
report_to: none
dataloader_num_workers: 0
seed: 42
""")
    # What `llamafactory-cli train` runs on one device (run_exp, in process), with one callback added
    # that records the training window's CPU time the way Gym's train_results.json does.
    cpu_file = folder / "lf-train-cpu.json"
    with tempfile.TemporaryDirectory() as cache:
        env = thread_env(threads, HF_DATASETS_CACHE=cache, HF_HOME=f"{cache}/hf")
        env.pop("PYTHONPATH")
        run = run_result([str(python), "-c", LLAMAFACTORY_TRAIN, str(config), str(cpu_file)], env)
    metrics = json.loads((out / "train_results.json").read_text())
    state = json.loads((out / "trainer_state.json").read_text())
    tokens = max((e.get("num_input_tokens_seen", 0) for e in state["log_history"]), default=0)
    return {"tokens": tokens, "seconds": metrics["train_runtime"], "train_cpu": json.loads(cpu_file.read_text())["cpu"],
            "wall": run["wall"], "cpu": run["cpu"]}  # fmt: skip


def trl_run(folder: Path, model_dir: Path, rows: Path, steps: int, threads: int | None) -> dict[str, Any]:
    args = [sys.executable, "-c", TRL, str(model_dir), str(rows), str(steps), str(folder / "trl-out")]
    return run_result(args, thread_env(threads))


def main() -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="tiny,26m")
    parser.add_argument("--threads", default="default,1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--no-trl", action="store_true", help="leave plain TRL out (Gym and LLaMA-Factory only)"
    )
    parser.add_argument(
        "--packing", default="tiny", help="models of the packed-vs-unpacked comparison ('none': skip)"
    )
    parser.add_argument("--pack-cutoff", type=int, default=PACK_CUTOFF)
    parser.add_argument("--pack-rows", type=int, default=PACK_ROWS)
    args = parser.parse_args()
    python = llamafactory_python()
    if python is None:
        log("LLaMA-Factory's venv is missing (make bench builds it): Gym and TRL only")
    if gym_train_python() is None:
        log(
            "Gym's train-only venv is missing (make bench builds it): Gym runs from the project's venv, whose "
            "unused extras (bitsandbytes, scikit-learn) add ~2 s to every whole-command wall time"
        )
    table = []
    for model in [m for m in args.models.split(",") if m != "none"]:
        model_dir = MODELS[model]()
        for setting in args.threads.split(","):
            threads = None if setting == "default" else int(setting)
            runs: dict[str, list[dict[str, Any]]] = {"gym": [], "llamafactory": [], "trl": []}
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                rows = fitting_rows(folder, model_dir)
                for _ in range(args.repeats):
                    runs["gym"].append(gym_run(folder, model_dir, rows, args.steps, threads))
                    if python is not None:
                        runs["llamafactory"].append(
                            llamafactory_run(python, folder, model_dir, args.steps, threads)
                        )
                    if not args.no_trl:
                        runs["trl"].append(trl_run(folder, model_dir, rows, args.steps, threads))
                    log(json.dumps({k: v[-1] for k, v in runs.items() if v}))
            rates = {k: [r["tokens"] / r["seconds"] for r in v] for k, v in runs.items() if v}
            rate = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
            per_cpu = {k: statistics.median(r["tokens"] / r["train_cpu"] for r in v)
                       for k, v in runs.items() if v and all(r.get("train_cpu") for r in v)}  # fmt: skip
            best_peer = max((v for k, v in rate.items() if k != "gym"), default=None)
            table.append({
                "model": model, "threads": setting, **{f"{k}_tok_per_s": round(v) for k, v in rate.items()},
                "gym_vs_llamafactory": ratio(rate["gym"], rate.get("llamafactory")),
                "gym_vs_best_peer": ratio(rate["gym"], best_peer),
                **{f"{k}_tok_per_cpu_s": round(v) for k, v in per_cpu.items()},
                "gym_vs_llamafactory_per_cpu_s": ratio(per_cpu.get("gym", 0), per_cpu.get("llamafactory")),
                "gym_wall_s": round(median_of(runs["gym"], "wall"), 1),
                "llamafactory_wall_s": round(median_of(runs["llamafactory"], "wall"), 1) if runs["llamafactory"] else None,
                "gym_cpu_s": round(median_of(runs["gym"], "cpu"), 1),
                "llamafactory_cpu_s": round(median_of(runs["llamafactory"], "cpu"), 1) if runs["llamafactory"] else None,
            })  # fmt: skip
    print(f"SFT LoRA r{RANK}, {args.steps} steps x batch {BATCH}, cutoff {CUTOFF}, median of {args.repeats}; "
          "target >= 1.2x LLaMA-Factory")  # fmt: skip
    print(f"{'model':5s} {'threads':>7s} {'Gym tok/s':>10s} {'LF tok/s':>9s} {'TRL tok/s':>10s} {'Gym/LF':>7s} "
          f"{'Gym wall':>9s} {'LF wall':>8s} {'Gym CPU':>8s} {'LF CPU':>7s} {'Gym/LF per train CPU-s':>23s}")  # fmt: skip
    for row in table:
        print(f"{row['model']:5s} {row['threads']:>7s} {row['gym_tok_per_s']:>10,} "
              f"{row.get('llamafactory_tok_per_s', 0):>9,} {row.get('trl_tok_per_s', 0):>10,} {row['gym_vs_llamafactory']:>7s} "
              f"{row['gym_wall_s']:>8.1f}s {row['llamafactory_wall_s'] or 0:>7.1f}s "
              f"{row['gym_cpu_s']:>7.1f}s {row['llamafactory_cpu_s'] or 0:>6.1f}s "
              f"{row['gym_vs_llamafactory_per_cpu_s']:>23s}")  # fmt: skip
    packing = packing_table(args)
    print("RESULT " + json.dumps(table + packing))
    return table + packing


def packing_table(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Packed vs unpacked: one epoch over the same variable-length rows, alternated, non-pad tokens/s.

    Gym padded, padding-free (its default) and packed; LLaMA-Factory unpacked (padded batches) and packed
    (``neat_packing``, attention kept within each row as Gym's packing keeps it), when its venv is there.
    """
    python = llamafactory_python()
    table = []
    for model in [m for m in args.packing.split(",") if m != "none"]:
        model_dir = MODELS[model]()
        for setting in args.threads.split(","):
            threads = None if setting == "default" else int(setting)
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                rows = fitting_rows(folder, model_dir, args.pack_cutoff, "vary", args.pack_rows)
                modes = {
                    mode: functools.partial(gym_run, folder, model_dir, rows, 0, threads,
                                            cutoff=args.pack_cutoff, batching=batching)
                    for mode, batching in PACK_MODES.items()
                }  # fmt: skip
                if python is not None:
                    for mode, packed in (("lf_unpacked", False), ("lf_packed", True)):
                        modes[mode] = functools.partial(llamafactory_run, python, folder, model_dir, 0, threads,
                                                        dataset="vary", cutoff=args.pack_cutoff, packed=packed)  # fmt: skip
                runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
                for _ in range(args.repeats):
                    for mode, run in modes.items():
                        runs[mode].append(run())
                    if "lf_packed" in runs and runs["lf_packed"][-1]["tokens"] <= 0:
                        # LF's non-pad counter sums the 4D block-diagonal mask of neat_packing (a negative
                        # number); it trains every row once, as its unpacked run does: count those tokens.
                        runs["lf_packed"][-1]["tokens"] = runs["lf_unpacked"][-1]["tokens"]
                    log(json.dumps({k: v[-1] for k, v in runs.items()}))
            rate = {k: sorted(r["tokens"] / r["seconds"] for r in v)[len(v) // 2] for k, v in runs.items()}
            table.append({"model": model, "threads": setting, "comparison": "packing",
                          **{f"{k}_tok_per_s": round(v) for k, v in rate.items()},
                          "packed_vs_padded": ratio(rate["packed"], rate["padded"]),
                          "packed_vs_padding_free": ratio(rate["packed"], rate["padding_free"]),
                          "packed_vs_llamafactory_unpacked": ratio(rate["packed"], rate.get("lf_unpacked")),
                          "packed_vs_llamafactory_packed": ratio(rate["packed"], rate.get("lf_packed")),
                          "tokens": runs["packed"][-1]["tokens"]})  # fmt: skip
    if table:
        print(f"SFT LoRA r{RANK}, packed vs unpacked, one epoch over {args.pack_rows} alpaca rows that fit "
              f"{args.pack_cutoff} tokens, batch {BATCH}, median of {args.repeats}; target packed >= 1.5x unpacked. "
              "Gym's default unpacked batches are padding-free on CPU already, which is where packing's gain "
              "comes from; its padded batches (train.padding_free = false) are length-grouped.")  # fmt: skip
        print(f"{'model':5s} {'threads':>7s} {'Gym padded':>11s} {'Gym pad-free':>13s} {'Gym packed':>11s} "
              f"{'LF unpacked':>12s} {'LF packed':>10s} {'packed/padded':>14s} {'packed/pad-free':>16s} "
              f"{'packed/LF unp.':>15s} {'packed/LF packed':>17s}")  # fmt: skip
        for row in table:
            print(f"{row['model']:5s} {row['threads']:>7s} {row['padded_tok_per_s']:>11,} "
                  f"{row['padding_free_tok_per_s']:>13,} {row['packed_tok_per_s']:>11,} "
                  f"{row.get('lf_unpacked_tok_per_s', 0):>12,} {row.get('lf_packed_tok_per_s', 0):>10,} "
                  f"{row['packed_vs_padded']:>14s} {row['packed_vs_padding_free']:>16s} "
                  f"{row['packed_vs_llamafactory_unpacked']:>15s} {row['packed_vs_llamafactory_packed']:>17s}")  # fmt: skip
    return table


if __name__ == "__main__":
    main()
