"""Preprocessing throughput: load + convert + template + tokenize + mask, rows/s, cold and warm cache.

Data: LLaMA-Factory's own demo files (../shared/fixtures/llamafactory-data): alpaca_en_demo.json
(chatml template) and glaive_toolcall_en_demo.json (qwen3 template: tools and tool calls), with the
built-in tokenizer and max_length 1024 (the peers measured LLaMA-Factory at cutoff 128, where it truncates;
Gym never cuts an answer, and at 128 every glaive row would be skipped as too long). Cold: fresh Gym and `datasets`
caches; warm: the same run again.

Baseline side by side: with `--llamafactory-python PATH` (a separate venv with llamafactory 0.9.5,
see ../shared/peers/README.md) LLaMA-Factory's `get_dataset` is timed in the same run on the same
files; without it the figure measured on this machine kind (peers README) is printed and marked so.
Target: >= 3x LLaMA-Factory's rows/s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "fixtures" / "llamafactory-data"
RECORDED_LLAMAFACTORY = {"alpaca_en_demo": 791.0, "glaive_toolcall_en_demo": 360.0}  # rows/s, peers README
CASES = {
    "alpaca_en_demo": ("alpaca_en_demo.json", "alpaca", "chatml", ""),
    "glaive_toolcall_en_demo": (
        "glaive_toolcall_en_demo.json",
        "sharegpt",
        "qwen3",
        'columns = { messages = "conversations", tools = "tools" }',
    ),
}


def gym_toml(folder: Path, name: str, max_length: int) -> Path:
    file, fmt, template, extra = CASES[name]
    path = folder / f"{name}.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [project]
            name = "bench"
            [model]
            name_or_path = "builtin:tiny"
            template = "{template}"
            [[datasets]]
            path = "{DATA / file}"
            format = "{fmt}"
            max_bad_fraction = 1.0
            {extra}
            [train]
            max_length = {max_length}
            """
        )
    )
    return path


def time_gym(name: str, max_length: int, num_proc: int) -> tuple[int, float, float]:
    """(rows read, cold seconds, warm seconds) for one dataset."""
    from transformers import AutoTokenizer

    from gym.config import load_config
    from gym.data.prepare import prepare_data
    from gym.model.builtin import ensure_builtin

    tokenizer = AutoTokenizer.from_pretrained(ensure_builtin("builtin:tiny"))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GYM_CACHE_DIR"] = str(Path(tmp) / "gym")
        os.environ["HF_DATASETS_CACHE"] = str(Path(tmp) / "datasets")
        config = load_config(gym_toml(Path(tmp), name, max_length))
        started = time.perf_counter()
        prepared = prepare_data(config, tokenizer, num_proc=num_proc)
        cold = time.perf_counter() - started
        started = time.perf_counter()
        again = prepare_data(config, tokenizer, num_proc=num_proc)
        warm = time.perf_counter() - started
        assert again.from_cache and len(again.train) == len(prepared.train)
    return prepared.reports[0].rows_read, cold, warm


LLAMAFACTORY_SNIPPET = """
import sys, time, json, tempfile
from llamafactory.hparams import get_train_args
from llamafactory.model import load_tokenizer
from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
model_dir, dataset, template, cutoff = sys.argv[1:5]
out = tempfile.mkdtemp()
args = dict(stage="sft", do_train=True, model_name_or_path=model_dir, dataset=dataset, dataset_dir=sys.argv[5],
            template=template, cutoff_len=int(cutoff), output_dir=out, overwrite_cache=True,
            preprocessing_num_workers=2, finetuning_type="lora", report_to="none")
model_args, data_args, training_args, finetuning_args, _ = get_train_args(args)
tok = load_tokenizer(model_args)
tpl = get_template_and_fix_tokenizer(tok["tokenizer"], data_args)
t = time.perf_counter()
get_dataset(tpl, model_args, data_args, training_args, stage="sft", **tok)
print(json.dumps({"seconds": time.perf_counter() - t}))
"""


def time_llamafactory(python: str, name: str, max_length: int) -> float | None:
    from gym.model.builtin import ensure_builtin

    template = "chatml" if name == "alpaca_en_demo" else "qwen3"
    done = subprocess.run(
        [
            python,
            "-c",
            LLAMAFACTORY_SNIPPET,
            str(ensure_builtin("builtin:tiny")),
            name,
            template,
            str(max_length),
            str(DATA),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(f"  LLaMA-Factory run failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--llamafactory-python", help="python of a venv with llamafactory 0.9.5 installed")
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"fixtures not found at {DATA}")
    from datasets.utils import logging as ds_logging

    ds_logging.disable_progress_bar()
    print(
        f"preprocessing, max_length {args.max_length}, {args.num_proc} worker(s); target >= 3.0x LLaMA-Factory"
    )
    for name in CASES:
        rows, cold, warm = time_gym(name, args.max_length, args.num_proc)
        baseline_label = "recorded"
        baseline = RECORDED_LLAMAFACTORY[name]
        if args.llamafactory_python:
            seconds = time_llamafactory(args.llamafactory_python, name, args.max_length)
            if seconds:
                baseline, baseline_label = rows / seconds, "same run"
        print(
            f"  {name:26s} rows {rows:5d}  gym cold {rows / cold:8.0f} rows/s ({rows / cold / baseline:4.1f}x)"
            f"  warm {rows / warm:9.0f} rows/s ({rows / warm / baseline:6.1f}x)"
            f"  LLaMA-Factory {baseline:6.0f} rows/s ({baseline_label})"
        )


if __name__ == "__main__":
    main()
