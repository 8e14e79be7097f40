#!/usr/bin/env python3
"""A CPU Space's serving speed, side by side in one invocation, on real-sized random models.

Models: random weights with Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads / 2 KV heads,
intermediate 4864, vocab 151,936, tied embeddings) and, with ``--sizes 0.5b,1.5b``, Qwen2.5-1.5B's
(1536, 28, 12/2, 8960). Built offline with Gym's built-in tokenizer (its ids are a subset of the
vocabulary). The output rows of ids the tokenizer does not have, and of its special tokens, are zero, so
greedy answers stay inside its vocabulary and never end early at EOS: every request generates exactly
``max_tokens`` tokens, while each decode step still reads the whole 151,936-row output matrix.

Servers (each started, measured and stopped in turn, all on the same HF folder / GGUF files):
- ``gym-llamacpp-q8_0`` / ``gym-llamacpp-q4_k_m``: ``gym serve --backend llamacpp`` (needs ``make gguf``);
- ``gym-transformers``: ``gym serve`` (fp32 torch, the current default);
- ``transformers-serve``: ``transformers serve --continuous-batching``;
- ``llama-cpp-server``: ``python -m llama_cpp.server`` on the Q8_0 file (llama-cpp-python's own server,
  NOT llama.cpp's C++ ``llama-server``; one request at a time: ``pip install 'llama-cpp-python[server]'``
  into ``.venv-gguf``);
- ``llama-server``: llama.cpp's own C++ server (``make llama-server`` builds it from the llama.cpp
  sources llama-cpp-python vendors) on the Q8_0 file: 8 slots, continuous batching, the thread count
  Gym's policy gives at its start for prompts and decoding;
- ``llama-cpp-ceiling``: not a server: bench/llama_ceiling.py, llama.cpp's low-level decode of the Q8_0
  file as Gym's backend calls it, with no HTTP, tokenizer or sampling (the backend's ceiling), on
  prompts as long as the chat requests' once the chat template wraps them (33 and 212 tokens here).

The read bandwidth (one thread summing a 512 MiB array, best of 3) is measured at the start, and each
model file's weight-read ceiling (its bytes / that bandwidth: decode tok/s of one stream when every
step reads every weight once) is printed under the table.

Measures (official ``openai`` client, chat completions, temperature 0, non-streamed so every server's
``usage.completion_tokens`` counts the tokens): tokens/s for 1 stream and for 8 concurrent streams
(``--new-tokens`` new tokens each, short prompts, wall clock from the first request sent to the last
answer), and time to first token as the latency of a ``max_tokens=1`` request on a fresh ~200-token
prompt (median of ``--ttft-runs``). Ratios are printed against Gym's transformers backend, and the
llamacpp rows against ``llama-server`` (the issue asks for 80% of it at least).

    .venv/bin/python bench/cpu_space.py                      # 0.5B, every server (~15 min on 2 cores)
    .venv/bin/python bench/cpu_space.py --sizes 0.5b,1.5b --servers gym-llamacpp-q8_0,llama-server
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(os.environ.get("GYM_BENCH_DIR", REPO / ".bench"))
MAIN_PY, GGUF_PY = REPO / ".venv" / "bin" / "python", REPO / ".venv-gguf" / "bin" / "python"
SHAPES = {  # hidden, layers, heads, kv heads, intermediate
    "0.5b": (896, 24, 14, 2, 4864),
    "1.5b": (1536, 28, 12, 2, 8960),
}
VOCAB = 151_936
SERVERS = (
    "gym-llamacpp-q8_0",
    "gym-llamacpp-q4_k_m",
    "gym-transformers",
    "transformers-serve",
    "llama-cpp-server",
    "llama-server",
    "llama-cpp-ceiling",
)
LLAMA_SERVER = BENCH / "llama.cpp" / "bin" / "llama-server"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_model(size: str) -> Path:
    """The random HF folder of ``size``'s shape, once (fp32 safetensors + the built-in tokenizer)."""
    folder = BENCH / f"qwen2-{size}-random"
    if (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from gym.model.builtin import resolve_model_path

    hidden, layers, heads, kv, inter = SHAPES[size]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("builtin:tiny"))
    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv, intermediate_size=inter, max_position_embeddings=32768,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # tied: the embedding rows are the output rows
        known = len(tokenizer)
        model.get_output_embeddings().weight[known:] = 0
        model.get_output_embeddings().weight[tokenizer.all_special_ids] = 0
    log(f"saving {folder.name} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters)")
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def build_gguf(folder: Path, quant: str) -> Path | None:
    path = folder / "gguf" / f"model-{quant}.gguf"
    if path.is_file():
        return path
    if not GGUF_PY.exists():
        return None
    code = "import sys; from gym.export.gguf import convert_to_gguf; convert_to_gguf(sys.argv[1], sys.argv[2], sys.argv[3])"
    started = time.monotonic()
    subprocess.run([str(GGUF_PY), "-c", code, str(folder), str(path), quant], check=True, cwd=REPO)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (folder / name).is_file() and not (path.parent / name).exists():
            (path.parent / name).write_bytes((folder / name).read_bytes())
    log(f"converted {folder.name} to {quant} in {time.monotonic() - started:.0f} s")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def command(server: str, folder: Path, port: int) -> tuple[list[str], str] | str:
    """(argv, model name) of ``server``, or the reason it cannot run here."""
    where = ["--host", "127.0.0.1", "--port", str(port)]
    if server.startswith("gym-llamacpp"):
        quant = server.rsplit("-", 1)[1]
        gguf = build_gguf(folder, quant)
        if gguf is None:
            return "no .venv-gguf (make gguf)"
        return [str(GGUF_PY), "-m", "gym", "serve", str(gguf), "--backend", "llamacpp",
                "--max-batch-size", "8", "--served-model-name", "bench", *where], "bench"  # fmt: skip
    if server == "gym-transformers":
        return [
            str(MAIN_PY),
            "-m",
            "gym",
            "serve",
            str(folder),
            "--served-model-name",
            "bench",
            *where,
        ], "bench"
    if server == "transformers-serve":
        return [str(MAIN_PY.with_name("transformers")), "serve", str(folder), "--continuous-batching",
                "--device", "cpu", "--cb-max-memory-percent", "0.1", *where], str(folder)  # fmt: skip
    gguf = build_gguf(folder, "q8_0")
    if gguf is None:
        return "no .venv-gguf (make gguf)"
    if server == "llama-server":
        return llama_server(gguf, where)
    probe = subprocess.run([str(GGUF_PY), "-c", "import llama_cpp.server.app"], capture_output=True)
    if probe.returncode:
        return "llama_cpp.server missing: .venv-gguf/bin/pip install 'llama-cpp-python[server]==0.3.36'"
    # its default threads (half the cores for decode, all for prompts), as a CPU Space would run it
    return [str(GGUF_PY), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "bench",
            "--n_ctx", "4096", "--chat_format", "chatml", *where], "bench"  # fmt: skip


def llama_server(gguf: Path, where: list[str]) -> tuple[list[str], str] | str:
    """llama.cpp's C++ server as Gym's backend is configured: 8 KV sequences of 4,096 tokens, batched."""
    if not LLAMA_SERVER.is_file():
        return f"no llama.cpp server binary at {LLAMA_SERVER} (make llama-server)"
    from gym.engine.cputhreads import ThreadPolicy
    from gym.engine.llamacpp_backend import DEFAULT_CONTEXT

    threads = str(ThreadPolicy(set_threads=lambda n: None).apply(force=True))
    log(f"    llama-server threads: {threads}")
    return [str(LLAMA_SERVER), "--model", str(gguf), "--alias", "bench", "--parallel", "8", "--cont-batching",
            "--ctx-size", str(DEFAULT_CONTEXT * 8), "--threads", threads, "--threads-batch", threads, "--no-webui",
            *where], "bench"  # fmt: skip


def prompt_of(tokenizer, rng: random.Random, tokens: int, head: str = "") -> str:
    """A user message of ``tokens`` tokens under the model's tokenizer (words of a small pool)."""
    pool = ["the", "model", "answers", "a", "short", "question", "about", "cats", "dogs", "rivers", "music"]
    text = head
    while len(tokenizer.encode(text)) < tokens:
        text += " " + rng.choice(pool)
    return text


def measure(url: str, model: str, folder: Path, args: argparse.Namespace) -> dict[str, float]:
    import openai
    from tokenizers import Tokenizer

    client = openai.OpenAI(base_url=url + "/v1", api_key="bench", timeout=600, max_retries=0)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    rng = random.Random(0)

    def ask(prompt: str, max_tokens: int) -> int:
        answer = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0
        )
        return answer.usage.completion_tokens

    # every prompt is written before the warm-up, and the client then stays quiet for longer than the
    # servers' thread policies look back: the client's own start-up (imports, tokenizer) is not a load
    # the server meets on a Space, and counted as one it costs the first row a core
    short = {n: [prompt_of(tokenizer, rng, 24, f"Question {i}:") for i in range(n)] for n in (1, 8)}
    long = [prompt_of(tokenizer, rng, 200, f"Run {i} {rng.random()}:") for i in range(args.ttft_runs)]
    ask("warm up", 4)
    time.sleep(args.settle)
    result: dict[str, float] = {}
    for streams, prompts in short.items():
        started = time.monotonic()
        with ThreadPoolExecutor(streams) as pool:
            tokens = sum(pool.map(lambda p: ask(p, args.new_tokens), prompts))
        result[f"tok_s_{streams}"] = tokens / (time.monotonic() - started)
        log(f"    {streams} stream(s): {tokens} tokens, {result[f'tok_s_{streams}']:.1f} tok/s")
    latencies = []
    for prompt in long:  # fresh prompts: no server can reuse an earlier prefill
        started = time.monotonic()
        ask(prompt, 1)
        latencies.append(time.monotonic() - started)
    result["ttft_p50"] = statistics.median(latencies)
    log(f"    TTFT p50 (200-token prompt): {result['ttft_p50']:.2f} s")
    return result


def chat_lengths(folder: Path) -> tuple[int, int]:
    """Tokens of :func:`measure`'s short and long prompts once the chat template wraps them."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    chat, plain, rng = (
        AutoTokenizer.from_pretrained(str(folder)),
        Tokenizer.from_file(str(folder / "tokenizer.json")),
        random.Random(0),
    )

    def length(text: str) -> int:
        messages = [{"role": "user", "content": text}]
        rendered = chat.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return len(chat.encode(rendered, add_special_tokens=False))

    return length(prompt_of(plain, rng, 24, "Question 0:")), length(prompt_of(plain, rng, 200, "Run 0 0.5:"))


def ceiling(folder: Path, args: argparse.Namespace) -> dict[str, float] | str:
    gguf = build_gguf(folder, "q8_0")
    if gguf is None:
        return "no .venv-gguf (make gguf)"
    short, long = chat_lengths(folder)
    argv = [str(GGUF_PY), str(REPO / "bench" / "llama_ceiling.py"), str(gguf),
            "--new-tokens", str(args.new_tokens), "--ttft-runs", str(args.ttft_runs),
            "--prompt-tokens", str(short), "--long-prompt-tokens", str(long)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        return f"exited with {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    log(f"    {result}")
    return result


def read_bandwidth() -> float:
    """GB/s one thread reads memory at now (a 512 MiB array summed, best of 3)."""
    import numpy as np

    data = np.ones(128 * 2**20, dtype=np.float32)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - started)
    return data.nbytes / best / 1e9


def run(server: str, folder: Path, args: argparse.Namespace) -> dict[str, float] | str:
    if server == "llama-cpp-ceiling":
        return ceiling(folder, args)
    port = free_port()
    spec = command(server, folder, port)
    if isinstance(spec, str):
        return spec
    argv, model = spec
    logs = BENCH / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"cpu_space-{server}-{folder.name}.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    with log_path.open("w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        import httpx

        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + args.start_timeout
        while True:
            if process.poll() is not None:
                return f"exited with {process.returncode} (see {log_path})"
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                return f"not ready after {args.start_timeout} s"
            time.sleep(0.5)
        try:
            result = measure(url, model, folder, args)
            health = httpx.get(url + "/health", timeout=5)
            if health.status_code == 200 and "decode_seconds" in health.json():
                stats = health.json()  # Gym's llamacpp worker: its llama_decode time within its steps
                log(f"    worker: llama_decode {stats['decode_seconds']:.2f} s of {stats['step_seconds']:.2f} s "
                    f"in {stats['steps']} steps, threads {stats.get('llama_threads')}")  # fmt: skip
            return result
        except Exception as error:  # noqa: BLE001 - one server failing must not lose the others' rows
            return f"{type(error).__name__}: {str(error)[:200]}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def ceilings(folder: Path, bandwidth: float) -> str:
    files = [folder / "model.safetensors", *sorted((folder / "gguf").glob("*.gguf"))]
    parts = [f"{f.name} ({f.stat().st_size / 1e6:,.0f} MB) {bandwidth * 1e9 / f.stat().st_size:.1f} tok/s"
             for f in files if f.is_file()]  # fmt: skip
    return f"\nweight-read ceiling per stream at {bandwidth:.1f} GB/s: " + ", ".join(parts)


def table(size: str, rows: dict[str, dict[str, float] | str]) -> str:
    base = rows.get("gym-transformers")
    lines = [f"\n### {size}\n", "| server | tok/s, 1 stream | tok/s, 8 streams | TTFT p50, 200-token prompt "
             "| 8 streams vs gym-transformers |", "|---|---|---|---|---|"]  # fmt: skip
    for server, row in rows.items():
        if isinstance(row, str):
            lines.append(f"| {server} | – | – | – | not run: {row} |")
            continue
        ratio = f"{row['tok_s_8'] / base['tok_s_8']:.2f}×" if isinstance(base, dict) else "–"
        lines.append(
            f"| {server} | {row['tok_s_1']:.1f} | {row['tok_s_8']:.1f} | {row['ttft_p50']:.2f} s | {ratio} |"
        )
    own = rows.get("llama-server")
    for server, row in rows.items():  # the target: within 20% of llama.cpp's own server
        if server.startswith("gym-llamacpp") and isinstance(row, dict) and isinstance(own, dict):
            lines.append(f"\n{server} / llama-server: {row['tok_s_1'] / own['tok_s_1']:.0%} (1 stream), "
                         f"{row['tok_s_8'] / own['tok_s_8']:.0%} (8 streams), TTFT "
                         f"{row['ttft_p50'] / own['ttft_p50']:.0%}")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="0.5b", help="comma-separated: 0.5b, 1.5b")
    parser.add_argument(
        "--servers", default=",".join(SERVERS), help=f"comma-separated of {', '.join(SERVERS)}"
    )
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--ttft-runs", type=int, default=3)
    parser.add_argument("--start-timeout", type=int, default=600)
    parser.add_argument(
        "--settle",
        type=float,
        default=7.0,
        help="seconds of quiet after the warm-up (> the thread policy's 5 s)",
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    import openai  # noqa: F401 - imported before any server runs, not while the first one is measured
    import tokenizers  # noqa: F401

    load = os.getloadavg()[0]
    log(f"load average at start: {load:.1f} on {len(os.sched_getaffinity(0))} cores")
    bandwidth = read_bandwidth()
    log(f"read bandwidth (one thread): {bandwidth:.1f} GB/s")
    everything = {}
    for size in args.sizes.split(","):
        folder = build_model(size)
        rows: dict[str, dict[str, float] | str] = {}
        for server in args.servers.split(","):
            log(f"  {size} {server}")
            rows[server] = run(server, folder, args)
        everything[size] = rows
        print(table(size, rows) + ceilings(folder, bandwidth), flush=True)
    log(f"load average at end: {os.getloadavg()[0]:.1f}, read bandwidth {read_bandwidth():.1f} GB/s")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
