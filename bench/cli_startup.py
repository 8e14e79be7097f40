"""CLI start-up: wall time of `gym --help` and `gym validate` beside `python -c "import torch"`.

Median of N runs each, in the same session, so the ratio is meaningful on any machine.
Target: gym commands <= 0.3 s here. Run: `.venv/bin/python bench/cli_startup.py [--runs 10]`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GYM = str(Path(sys.executable).parent / "gym")
COMMANDS = {
    "gym --help": [GYM, "--help"],
    "gym validate quickstart": [GYM, "validate", "-q", "examples/quickstart/gym.toml"],
    "python -c 'import gym.cli'": [sys.executable, "-c", "import gym.cli"],
    "python -c 'import torch' (baseline)": [sys.executable, "-c", "import torch"],
    "python -c 'pass' (interpreter)": [sys.executable, "-c", "pass"],
}


def median_seconds(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    results = {name: median_seconds(command, args.runs) for name, command in COMMANDS.items()}
    torch_time = results["python -c 'import torch' (baseline)"]
    print(f"median of {args.runs} runs (target for gym commands: <= 0.300 s)")
    for name, seconds in results.items():
        print(f"  {name:40s} {seconds:7.3f} s   {seconds / torch_time:5.2f}x import torch")


if __name__ == "__main__":
    main()
