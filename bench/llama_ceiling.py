#!/usr/bin/env python3
"""llama.cpp's own speed on a GGUF file, with nothing around it: the ceiling of Gym's llamacpp backend.

The same low-level calls the backend makes (one context, one KV sequence per stream, one
``llama_decode`` per step), without HTTP, tokenizer, sampling or logprobs: every step feeds a fixed
token. Threads follow Gym's policy (the cores other processes leave free), as the backend's do.
Prints one JSON line: ``tok_s_1``/``tok_s_8`` (a ``--prompt-tokens`` prompt then ``--new-tokens``
steps per stream, prompt passes included and fed in the backend's 256-token chunks, as
bench/cpu_space.py times a server), ``ttft_p50`` (a fresh ``--long-prompt-tokens`` prompt pass, median
of ``--ttft-runs``), ``threads`` and the per-step times. bench/cpu_space.py passes the lengths its chat
requests have once the chat template wraps them, so both sides decode the same number of tokens.

    .venv-gguf/bin/python bench/llama_ceiling.py .bench/qwen2-0.5b-random/gguf/model-q8_0.gguf
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STREAMS = 8


def main() -> None:
    import llama_cpp as lib

    from gym.engine.cputhreads import ThreadPolicy
    from gym.engine.llamacpp_backend import DEFAULT_CONTEXT, PREFILL_CHUNK

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--ttft-runs", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=24)
    parser.add_argument("--long-prompt-tokens", type=int, default=200)
    args = parser.parse_args()
    lib.llama_backend_init()
    model = lib.llama_model_load_from_file(str(args.gguf).encode(), lib.llama_model_default_params())
    threads = ThreadPolicy(set_threads=lambda n: None).apply(force=True)
    params = lib.llama_context_default_params()  # as the backend's context
    params.n_ctx, params.n_seq_max, params.kv_unified = DEFAULT_CONTEXT * STREAMS, STREAMS, True
    params.n_batch = params.n_ubatch = PREFILL_CHUNK + STREAMS
    params.n_threads = params.n_threads_batch = threads
    params.no_perf, params.flash_attn_type = True, lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
    ctx = lib.llama_init_from_model(model, params)
    memory, batch = lib.llama_get_memory(ctx), lib.llama_batch_init(params.n_batch, 0, 1)

    def decode(rows: list[tuple[int, int, bool]]) -> float:  # (sequence, position, wants logits)
        for i, (seq, pos, logits) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = 100 + (pos * 7 + seq) % 500, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, logits
        batch.n_tokens = len(rows)
        started = time.perf_counter()
        if lib.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")
        return time.perf_counter() - started

    def streams(n: int) -> tuple[float, float]:
        """tokens/s of ``n`` streams (prompt pass included) and the mean decode step."""
        started, prompt = time.perf_counter(), args.prompt_tokens
        rows = [(s, p, p == prompt - 1) for s in range(n) for p in range(prompt)]
        for chunk in range(0, len(rows), PREFILL_CHUNK):
            decode(rows[chunk : chunk + PREFILL_CHUNK])
        steps = [decode([(s, prompt + k, True) for s in range(n)]) for k in range(args.new_tokens)]
        wall = time.perf_counter() - started
        for s in range(n):
            lib.llama_memory_seq_rm(memory, s, -1, -1)
        return n * args.new_tokens / wall, statistics.mean(steps)

    decode([(0, p, p == 3) for p in range(4)])  # warm-up
    lib.llama_memory_seq_rm(memory, 0, -1, -1)
    result: dict[str, float] = {"threads": threads}
    for n in (1, STREAMS):
        result[f"tok_s_{n}"], result[f"step_ms_{n}"] = (x for x in streams(n))
        result[f"step_ms_{n}"] *= 1000
    passes = []
    for _ in range(args.ttft_runs):
        long = args.long_prompt_tokens
        passes.append(sum(decode([(0, p, p == long - 1) for p in range(c, min(c + PREFILL_CHUNK, long))])
                          for c in range(0, long, PREFILL_CHUNK)))  # fmt: skip
        lib.llama_memory_seq_rm(memory, 0, -1, -1)
    result["ttft_p50"] = statistics.median(passes)
    print(json.dumps(result), flush=True)
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)
    lib.llama_model_free(model)


if __name__ == "__main__":
    main()
