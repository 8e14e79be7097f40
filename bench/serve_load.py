#!/usr/bin/env python3
"""Serving side by side: `gym serve` vs `transformers serve --continuous-batching` (vs LLaMA-Factory's API).

One invocation, the same model folder for every tool (``builtin:tiny`` and the random 26M Llama from
:mod:`bench.common`), the same load client (:mod:`bench.serve_client`: official ``openai`` client,
streaming, temperature 0, output tokens re-counted with the model's own tokenizer.json), the prompt mixes
of :mod:`bench.serve_workloads` (alpaca, short, long, shared-system, shared-prefix), on an idle machine
and with ``--busy N`` CPU-spinning processes running through both servers' runs.

Each repeat starts every server once per busy level, tools alternated (the order rotates from repeat to
repeat, so load from other processes hits them alike). One client process serves every workload: it
starts, sends a warm-up request, stays quiet for ``--settle`` seconds (so its own start-up, about 1.7
CPU-seconds of imports, is out of the load window Gym's thread policy reads), then for each workload
sends one more warm-up request and the timed ones. Per workload and busy level the table prints the
medians over repeats of tokens/s and TTFT p50/p99, Gym's ratios, the torch thread counts Gym's
thread policy chose while it was timed (polled from ``/health``), and the cores the client itself used.
A tool ``gym@REV`` runs the ``gym`` package of git revision REV (a before/after in one invocation),
``gym#N`` runs Gym with its torch threads pinned to N (what the thread policy's choice costs).

    python bench/serve_load.py                      # tiny and 26M, three servers, idle and --busy 2
    python bench/serve_load.py --models tiny --tools gym,transformers --busy 0,2 --repeats 2
    python bench/serve_load.py --models tiny --tools gym@HEAD~1,gym --workloads alpaca --busy 0,1,2
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH, MODELS, REPO, llamafactory_python, log, thread_env  # noqa: E402
from serve_workloads import WORKLOADS, busy_machine, write_prompts  # noqa: E402

CLIENT = Path(__file__).resolve().with_name("serve_client.py")
FIXTURE = REPO.parent / "shared" / "fixtures" / "llamafactory-data" / "alpaca_en_demo.json"
PEERS = ("transformers", "llamafactory")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def gym_checkout(revision: str, scratch: Path) -> Path:
    """The ``gym`` package of ``revision``, extracted once (run from there, it shadows the editable one)."""
    folder = scratch / f"gym-{revision.replace('/', '_').replace('~', '_')}"
    if not folder.is_dir():
        folder.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", revision, "gym"], cwd=REPO, check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def is_gym(tool: str) -> bool:
    """``gym``, ``gym@REV`` (that revision's package) and either with ``#N`` (torch threads pinned to N)."""
    name, _, pin = tool.partition("#")
    return (name == "gym" or name.startswith("gym@")) and (not pin or pin.isdigit())


def server_command(tool: str, model_dir: Path, port: int, scratch: Path):
    """(argv, extra environment, working folder, model name to request) of one tool's server, or None."""
    if is_gym(tool):
        name, _, pin = tool.partition("#")
        folder = REPO if name == "gym" else gym_checkout(name.split("@", 1)[1], scratch)
        argv = [sys.executable, "-m", "gym", "serve", str(model_dir), "--served-model-name", "bench",
                "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
        return (
            argv,
            {"PYTHONPATH": str(folder), **({"GYM_TORCH_THREADS": pin} if pin else {})},
            folder,
            "bench",
        )
    if tool == "transformers":
        cli = Path(sys.executable).with_name("transformers")
        if not cli.exists():
            return None
        # Its paged KV cache takes 90% of free memory by default: on a shared machine the kernel then
        # kills it mid-run. 10% still holds every stream of this benchmark many times over.
        argv = [str(cli), "serve", str(model_dir), "--continuous-batching", "--device", "cpu",
                "--cb-max-memory-percent", "0.1", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
        return argv, {}, REPO, str(model_dir)
    python = llamafactory_python()
    if python is None:
        return None
    argv = [str(python.with_name("llamafactory-cli")), "api", "--model_name_or_path", str(model_dir),
            "--template", "chatml", "--infer_backend", "huggingface", "--trust_remote_code", "true"]  # fmt: skip
    return argv, {"API_HOST": "127.0.0.1", "API_PORT": str(port), "API_MODEL_NAME": "bench"}, REPO, "bench"


def wait_ready(url: str, process: subprocess.Popen, timeout: float) -> str | None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"exited with code {process.returncode}"
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return None
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return f"not ready after {timeout:.0f}s"


class ThreadWatch:
    """Polls a Gym server's ``/health`` while the client runs: (time, torch threads its policy chose)."""

    def __init__(self, url: str | None) -> None:
        """``url`` None: a server without ``/health`` thread counts; nothing is polled."""
        self.url, self.seen, self._stop = url, [], threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        import httpx

        while not self._stop.wait(0.5):
            try:
                threads = httpx.get(self.url + "/health", timeout=2).json().get("torch_threads")
            except (httpx.HTTPError, ValueError):
                continue
            if threads is not None:
                self.seen.append((time.time(), threads))

    def between(self, started: float, ended: float) -> list[int] | None:
        return sorted({t for at, t in self.seen if started <= at <= ended}) if self.url else None

    def __enter__(self) -> ThreadWatch:
        if self.url:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self.url:
            self._thread.join()


def client_run(
    url: str, model_name: str, prompts: list[Path], model_dir: Path, args, streams: int
) -> list[dict]:
    """One client process for every workload (its start-up is then paid once, before a quiet spell)."""
    argv = [sys.executable, str(CLIENT), url + "/v1", model_name, str(streams), str(args.requests),
            str(args.max_tokens), "--tokenizer", str(model_dir / "tokenizer.json"), "--warmup", "1",
            "--deadline", str(args.deadline), "--settle", str(args.settle)]  # fmt: skip
    for path in prompts:
        argv += ["--prompts", str(path)]
    timeout = len(prompts) * (args.deadline + 60) + args.settle + 60
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=thread_env(None))
    by_file = {}
    for line in done.stdout.splitlines():
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            continue
        by_file[result.get("prompts")] = result
    failed = {"n_ok": 0, "errors_sample": [done.stderr[-300:]]}
    return [by_file.get(str(path), failed) for path in prompts]


def run_server(tool: str, model_dir: Path, threads: int | None, prompts: dict[str, Path], args, context: dict,
               scratch: Path) -> list[dict[str, Any]]:  # fmt: skip
    port = free_port()
    spec = server_command(tool, model_dir, port, scratch)
    if spec is None:
        log(f"  {tool}: not installed here, skipped")
        return []
    argv, extra, folder, model_name = spec
    log_path = BENCH / "logs" / f"{tool.replace('/', '_')}-{model_dir.name}-{threads or 'default'}-{port}.log"
    with log_path.open("w") as server_log:
        process = subprocess.Popen(argv, stdout=server_log, stderr=subprocess.STDOUT,
                                   env=thread_env(threads, **extra), cwd=folder)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    results = []
    try:
        problem = wait_ready(url, process, args.start_timeout)
        if problem:
            log(f"  {tool}: {problem}; see {log_path}")
            return []
        for streams in args.streams:
            with ThreadWatch(url if is_gym(tool) else None) as watch:
                measured = client_run(url, model_name, list(prompts.values()), model_dir, args, streams)
            for workload, result in zip(prompts, measured, strict=True):
                wall = result.get("wall_s") or 0.0
                row = {
                    **context, "tool": tool, "threads": threads or "default", "workload": workload,
                    "streams": streams, "tok_s": result.get("output_tok_per_s") or 0.0,
                    "ttft_p50": result.get("ttft_p50_s"), "ttft_p99": result.get("ttft_p99_s"),
                    "ok": result.get("n_ok", 0), "errors": result.get("n_err", 0), "cut": result.get("n_unfinished", 0),
                    "client_cores": round(result.get("client_cpu_s", 0.0) / wall, 2) if wall else None,
                    "torch_threads": watch.between(result.get("started_at", 0), result.get("ended_at", 0)),
                }  # fmt: skip
                if row["errors"] or row["cut"] or not row["ok"]:
                    row["error_sample"] = result.get("errors_sample")
                log(f"  {json.dumps(row)}")
                results.append(row)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return results


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt_seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:,.0f}"  # milliseconds


def cell(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not rows:
        return None
    threads = sorted({t for r in rows for t in (r["torch_threads"] or [])})
    return {
        "tok_s": median([r["tok_s"] for r in rows]), "errors": sum(r["errors"] for r in rows),
        "cut": sum(r.get("cut", 0) for r in rows),
        "ttft_p50": median([r["ttft_p50"] for r in rows if r["ttft_p50"] is not None]),
        "ttft_p99": median([r["ttft_p99"] for r in rows if r["ttft_p99"] is not None]),
        "client": median([r["client_cores"] for r in rows if r["client_cores"] is not None]),
        "threads": "/".join(map(str, threads)) if threads else "", "n": len(rows),
    }  # fmt: skip


def fmt_cell(c: dict[str, Any] | None) -> str:
    if not c:
        return "—"
    threads = f" [{c['threads']} thr]" if c["threads"] else ""
    errors = (f" ({c['cut']} cut)" if c["cut"] else "") + (f" ({c['errors']} err)" if c["errors"] else "")
    return (
        f"{c['tok_s']:,.0f} · {fmt_seconds(c['ttft_p50'])}/{fmt_seconds(c['ttft_p99'])} ms{threads}{errors}"
    )


def print_table(rows: list[dict[str, Any]], tools: list[str]) -> None:
    base = "gym" if "gym" in tools else tools[0]
    others = [t for t in tools if t != base]
    keys = sorted({(r["model"], r["busy"], r["workload"], r["streams"], r["threads"]) for r in rows},
                  key=lambda k: (k[0], k[1], WORKLOADS.index(k[2]), k[3], str(k[4])))  # fmt: skip
    ratio_heads = "".join(f" {base} / {t} tok/s · TTFT p99 |" for t in others)
    print(f"\n| model | busy | workload | streams | threads |{''.join(f' {t} |' for t in tools)}{ratio_heads} "
          "client cores |")  # fmt: skip
    print("|" + "---|" * (6 + len(tools) + len(others)))
    for key in keys:
        picked = [
            r for r in rows if (r["model"], r["busy"], r["workload"], r["streams"], r["threads"]) == key
        ]
        cells = {t: cell([r for r in picked if r["tool"] == t]) for t in tools}
        ratios = ""
        for t in others:
            ours, theirs = cells[base], cells[t]
            if ours and theirs and theirs["tok_s"] and ours["ttft_p99"] and theirs["ttft_p99"]:
                ratios += f" {ours['tok_s'] / theirs['tok_s']:.2f}x · {ours['ttft_p99'] / theirs['ttft_p99']:.2f}x |"
            else:
                ratios += " n/a |"
        client = median([r["client_cores"] for r in picked if r["client_cores"] is not None])
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} |"
              f"{''.join(f' {fmt_cell(cells[t])} |' for t in tools)}{ratios} {client or 0:.2f} |")  # fmt: skip
    print(f"\ncells: median output tok/s · TTFT p50/p99 ms [torch threads {base}'s policy chose while timed]; "
          "ratios: tok/s (higher is better) · TTFT p99 (lower is better); (N cut): requests the deadline "
          "ended, whose tokens count and whose wait for a first token counts as their TTFT; client cores: CPU "
          "the load client used per second of its timed run, on the same cores")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,26m", help=f"comma list of {','.join(MODELS)}")
    parser.add_argument(
        "--tools",
        default="gym,transformers,llamafactory",
        help="gym, gym@REV, gym#N, transformers, llamafactory",
    )
    parser.add_argument("--workloads", default="alpaca,short,long,shared-system", help=",".join(WORKLOADS))
    parser.add_argument("--busy", default="0,2", help="comma list: CPU-spinning processes during the runs")
    parser.add_argument("--streams", default="16")
    parser.add_argument("--threads", default="default", help="'default' and/or integers for OMP_NUM_THREADS")
    parser.add_argument(
        "--repeats", "--rounds", type=int, default=3, help="alternate the servers this many times"
    )
    parser.add_argument("--requests", type=int, default=64, help="timed requests per workload")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--deadline", type=float, default=600, help="seconds a workload's timed level may take"
    )
    parser.add_argument("--settle", type=float, default=6.0, help="quiet seconds after the client's start-up")
    parser.add_argument("--start-timeout", type=float, default=180)
    parser.add_argument("--json", type=Path, help="also write every raw row here (after each server's run)")
    parser.add_argument("--table", type=Path, help="only print the table of the rows in this --json file")
    args = parser.parse_args()
    args.streams = [int(s) for s in args.streams.split(",")]
    tools = [t for t in args.tools.split(",") if t]
    if args.table:
        print_table(json.loads(args.table.read_text()), tools)
        return
    unknown = {t for t in tools if t not in PEERS and not is_gym(t)}
    if unknown:
        sys.exit(f"unknown tools {sorted(unknown)}; choose from gym, gym@REV, gym#N, {', '.join(PEERS)}")
    threads = [None if t == "default" else int(t) for t in args.threads.split(",")]
    busy_levels = [int(b) for b in args.busy.split(",")]
    (BENCH / "logs").mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="gym-serve-bench-"))
    started_load, rows = loadavg(), []
    for model in args.models.split(","):
        model_dir = MODELS[model]()
        prompts = {
            w: write_prompts(w, FIXTURE, model_dir / "tokenizer.json", scratch)
            for w in args.workloads.split(",")
        }
        for repeat in range(args.repeats):
            order = tools[repeat % len(tools) :] + tools[: repeat % len(tools)]
            for busy in busy_levels:
                with busy_machine(busy):
                    for setting in threads:
                        for tool in order:
                            log(f"{model} · repeat {repeat + 1} · busy {busy} · {tool} · threads "
                                f"{setting or 'default'} · load {loadavg()}")  # fmt: skip
                            context = {"model": model, "busy": busy, "repeat": repeat}
                            rows += run_server(tool, model_dir, setting, prompts, args, context, scratch)
                            if args.json:  # a run cut short still leaves every row measured so far
                                args.json.write_text(json.dumps(rows, indent=1))
    print(f"\nserving, {args.requests} timed requests per workload, max_tokens {args.max_tokens}, temperature 0, "
          f"{args.repeats} repeat(s); load average {started_load} at the start, {loadavg()} at the end")  # fmt: skip
    print_table(rows, tools)


if __name__ == "__main__":
    main()
