"""`make bench`: every side-by-side benchmark, one at a time, then one table of Gym's ratios to its peers.

Builds what the comparisons need first (LLaMA-Factory's venv and Gym's train-only venv under .bench/,
the 26M model), then runs
bench/preprocess.py, bench/train_throughput.py and bench/serve_load.py, each printing its own table,
and ends with the ratios together. Each script also runs alone, with its own options.

    python bench/run_all.py [--only preprocess,train,serve] [--repeats 3] [--rounds 1]

``--repeats`` is the runs per tool of preprocessing and training (medians); serving takes ``--rounds``
instead, one by default: three rounds of both models, both workloads and three servers took over 90
minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, gym_train_python, llamafactory_python, log, model_26m  # noqa: E402

SCRIPTS = {"preprocess": "preprocess.py", "train": "train_throughput.py", "serve": "serve_load.py"}


def ratios(name: str, rows: list[dict]) -> list[tuple[str, str, str]]:
    """(benchmark, figure, ratio) for every ratio a script reported."""
    found = []
    for row in rows:
        label = " ".join(str(row[k]) for k in ("case", "model", "threads", "workload", "streams") if k in row)
        for key, value in row.items():
            if key == "ratio" or "_vs_" in key:
                found.append((name, f"{label} {key if key != 'ratio' else ''}".strip(), str(value)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join(SCRIPTS))
    parser.add_argument("--repeats", type=int, default=3, help="runs per tool (preprocess, train)")
    parser.add_argument("--rounds", type=int, default=1, help="serving rounds (serve)")
    args = parser.parse_args()
    llamafactory_python(build=True)
    gym_train_python(build=True)
    model_26m()
    table: list[tuple[str, str, str]] = []
    for name in args.only.split(","):
        log(f"== {name} ==")
        repeat = ["--rounds", str(args.rounds)] if name == "serve" else ["--repeats", str(args.repeats)]
        done = subprocess.run([sys.executable, str(REPO / "bench" / SCRIPTS[name]), *repeat],
                              capture_output=True, text=True)  # fmt: skip
        print(done.stdout.rsplit("RESULT ", 1)[0], flush=True)
        if done.returncode != 0:
            print(f"{name} failed:\n{done.stderr[-2000:]}")
            continue
        if "RESULT " in done.stdout:  # serve_load prints its ratios in its own table above
            table += ratios(name, json.loads(done.stdout.rsplit("RESULT ", 1)[1]))
    print("Gym / peer, same invocation, same model folders, data and threads:")
    for name, figure, value in table:
        print(f"  {name:10s} {figure:70s} {value:>8s}")


if __name__ == "__main__":
    main()
