"""Preprocessing side by side: Gym vs LLaMA-Factory, rows/s, cold cache, same files, tokenizer and window.

Each run is a fresh subprocess with empty caches (Gym's and `datasets`'). The timed window is the same
for both tools: from "here is the parsed configuration and the tokenizer" to "the tokenized, masked
dataset exists" (Gym: ``prepare_data``, which also writes its cache; LLaMA-Factory: ``get_dataset``,
which writes the `datasets` cache). Interpreter start-up and imports are outside the window for both.
LLaMA-Factory runs with ``TOKENIZERS_PARALLELISM=true`` (its worker processes keep the Rust pool);
Gym with the variable unset, its default, where it sizes the tokenizer's threads itself.

Cases (the tools alternate, median of ``--repeats`` runs each):
- alpaca_en_demo (chatml) and glaive_toolcall_en_demo (qwen3, tools) at cutoff 2048, one process each;
- 4x alpaca with 2 workers each (Gym ``num_proc=2``, LLaMA-Factory ``preprocessing_num_workers=2``);
- Gym's rows/s from 1k to 100k rows (alpaca repeated), with its default workers.
LLaMA-Factory cuts over-long rows at the cutoff; Gym never cuts an answer (oldest exchanges are
dropped, a row that cannot fit is skipped and counted). Besides rows/s (wall clock), each case prints
the ratio of CPU seconds spent in the window (the process, its threads and its finished worker
processes): on a shared machine wall time mostly measures the other users, CPU time the work done.
It does not credit Gym for running tokenization and rendering side by side on two cores.

    python bench/preprocess.py [--repeats 3] [--cutoff 2048] [--scale 1,10,100] [--only CASES] [--build-peers]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    FIXTURES,
    gym_env,
    llamafactory_python,
    log,
    median_of,
    ratio,
    run_result,
    thread_env,
    tiny_model,
)

CASES = {  # name: (fixture file, Gym format, template, extra Gym keys)
    "alpaca_en_demo": ("alpaca_en_demo.json", "alpaca", "chatml", ""),
    "glaive_toolcall_en_demo": ("glaive_toolcall_en_demo.json", "sharegpt", "qwen3",
                                'columns = { messages = "conversations", tools = "tools" }'),
}  # fmt: skip

CPU = """
import resource, time
def cpu():  # this process (all its threads) and its finished children (worker processes)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime
"""

GYM = (
    CPU
    + """
import json, sys, time
import datasets  # imported before the window, as LLaMA-Factory's own imports load it (Gym imports it lazily)
from gym.config import load_config
from gym.data.prepare import prepare_data
from gym.model.loading import load_tokenizer
config = load_config(sys.argv[1])
tokenizer = load_tokenizer(config)
started, cpu_started = time.perf_counter(), cpu()
prepared = prepare_data(config, tokenizer, num_proc=int(sys.argv[2]) or None)
seconds, cpu_seconds = time.perf_counter() - started, cpu() - cpu_started
print("RESULT", json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds,
                            "rows": sum(r.rows_read for r in prepared.reports), "kept": len(prepared.train)}))
"""
)

LLAMAFACTORY = (
    CPU
    + """
import json, sys, tempfile, time
from llamafactory.hparams import get_train_args
from llamafactory.model import load_tokenizer
from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
model_dir, dataset, dataset_dir, template, cutoff, workers = sys.argv[1:7]
args = dict(stage="sft", do_train=True, model_name_or_path=model_dir, dataset=dataset, dataset_dir=dataset_dir,
            template=template, cutoff_len=int(cutoff), output_dir=tempfile.mkdtemp(), overwrite_cache=True,
            preprocessing_num_workers=int(workers) or None, finetuning_type="lora", report_to="none")
model_args, data_args, training_args, finetuning_args, _ = get_train_args(args)
tokenizer = load_tokenizer(model_args)
template = get_template_and_fix_tokenizer(tokenizer["tokenizer"], data_args)
started, cpu_started = time.perf_counter(), cpu()
module = get_dataset(template, model_args, data_args, training_args, stage="sft", **tokenizer)
seconds, cpu_seconds = time.perf_counter() - started, cpu() - cpu_started
print("RESULT", json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "kept": len(module["train_dataset"])}))
"""
)


def write_data(folder: Path, name: str, copies: int) -> str:
    """The fixture repeated ``copies`` times, registered for LLaMA-Factory; returns the dataset name."""
    info = json.loads((FIXTURES / "dataset_info.json").read_text())[name]
    rows = json.loads((FIXTURES / CASES[name][0]).read_text())
    key = f"{name}_x{copies}"
    (folder / f"{key}.json").write_text(json.dumps(rows * copies, ensure_ascii=False))
    registry = folder / "dataset_info.json"
    known = json.loads(registry.read_text()) if registry.exists() else {}
    known[key] = {**info, "file_name": f"{key}.json"}
    registry.write_text(json.dumps(known, indent=1))
    return key


def gym_toml(folder: Path, name: str, key: str, cutoff: int) -> Path:
    _, fmt, template, extra = CASES[name]
    path = folder / f"{key}.toml"
    path.write_text(f"""
[project]
name = "bench"
[model]
name_or_path = "{tiny_model()}"
template = "{template}"
[[datasets]]
path = "{folder / (key + ".json")}"
format = "{fmt}"
max_bad_fraction = 1.0
{extra}
[train]
max_length = {cutoff}
""")
    return path


def time_gym(folder: Path, name: str, key: str, cutoff: int, workers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cache:
        env = gym_env(None, GYM_CACHE_DIR=f"{cache}/gym", HF_DATASETS_CACHE=f"{cache}/datasets")
        return run_result(
            [sys.executable, "-c", GYM, str(gym_toml(folder, name, key, cutoff)), str(workers)], env
        )


def time_llamafactory(
    python: Path, folder: Path, name: str, key: str, cutoff: int, workers: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cache:
        env = thread_env(None, HF_DATASETS_CACHE=f"{cache}/datasets", HF_HOME=f"{cache}/hf")
        env.pop("PYTHONPATH")
        args = [str(tiny_model()), key, str(folder), CASES[name][2], str(cutoff), str(workers)]
        return run_result([str(python), "-c", LLAMAFACTORY, *args], env)


def compare(folder: Path, python: Path | None, name: str, copies: int, cutoff: int, workers: int,
            repeats: int) -> dict[str, Any]:  # fmt: skip
    key = write_data(folder, name, copies)
    gym_runs, lf_runs = [], []
    for _ in range(repeats):  # alternate the tools, so a slow moment of the machine hits both
        gym_runs.append(time_gym(folder, name, key, cutoff, workers))
        if python is not None:
            lf_runs.append(time_llamafactory(python, folder, name, key, cutoff, workers))
    rows = gym_runs[0]["rows"]
    gym_rate = rows / median_of(gym_runs, "seconds")
    lf_rate = rows / median_of(lf_runs, "seconds") if lf_runs else None
    gym_cpu = median_of(gym_runs, "cpu_seconds")
    lf_cpu = median_of(lf_runs, "cpu_seconds") if lf_runs else None
    return {"case": f"{name} x{copies}", "rows": rows, "workers": workers, "gym_rows_per_s": round(gym_rate),
            "llamafactory_rows_per_s": round(lf_rate) if lf_rate else None, "ratio": ratio(gym_rate, lf_rate),
            "gym_cpu_s": round(gym_cpu, 3), "llamafactory_cpu_s": round(lf_cpu, 3) if lf_cpu else None,
            "cpu_ratio": ratio(1 / gym_cpu, 1 / lf_cpu if lf_cpu else None),
            "gym_kept": gym_runs[0]["kept"], "llamafactory_kept": lf_runs[0]["kept"] if lf_runs else None}  # fmt: skip


def main() -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cutoff", type=int, default=2048)
    parser.add_argument("--scale", default="1,10,100", help="copies of alpaca for Gym's scaling rows")
    parser.add_argument("--build-peers", action="store_true", help="build LLaMA-Factory's venv when missing")
    parser.add_argument("--only", default="", help="comma-separated cases to run (alpaca_en_demo, "
                        "glaive_toolcall_en_demo, alpaca_en_demo_x4); default: all")  # fmt: skip
    args = parser.parse_args()
    wanted = set(filter(None, args.only.split(","))) or {*CASES, "alpaca_en_demo_x4"}
    python = llamafactory_python(build=args.build_peers)
    if python is None:
        log("LLaMA-Factory's venv is missing (make bench builds it): Gym's figures only")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in (name for name in CASES if name in wanted):
            rows.append(compare(folder, python, name, 1, args.cutoff, 1, args.repeats))
            log(json.dumps(rows[-1]))
        if "alpaca_en_demo_x4" in wanted:
            rows.append(compare(folder, python, "alpaca_en_demo", 4, args.cutoff, 2, args.repeats))
            log(json.dumps(rows[-1]))
        for copies in (int(c) for c in args.scale.split(",") if c):
            key = write_data(folder, "alpaca_en_demo", copies)
            run = time_gym(folder, "alpaca_en_demo", key, args.cutoff, 0)
            rows.append({"case": f"alpaca_en_demo x{copies} (Gym scaling, default workers)", "rows": run["rows"],
                         "gym_rows_per_s": round(run["rows"] / run["seconds"])})  # fmt: skip
            log(json.dumps(rows[-1]))
    print(
        f"preprocessing, cutoff {args.cutoff}, cold cache, median of {args.repeats}; target >= 3x LLaMA-Factory"
    )
    print(
        f"{'case':58s} {'workers':>7s} {'Gym rows/s':>11s} {'LF rows/s':>10s} {'ratio':>7s} {'CPU-s ratio':>11s}"
    )
    for row in rows:
        lf = row.get("llamafactory_rows_per_s")
        print(f"{row['case']:58s} {row.get('workers', 'auto')!s:>7s} {row['gym_rows_per_s']:>11,} "
              f"{(f'{lf:,}' if lf else '-'):>10s} {row.get('ratio', '-'):>7s} {row.get('cpu_ratio', '-'):>11s}")  # fmt: skip
    print("RESULT " + json.dumps(rows))
    return rows


if __name__ == "__main__":
    main()
