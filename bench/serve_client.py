#!/usr/bin/env python3
"""A bounded streaming load client for an OpenAI-compatible server, whose prompts are whole message lists.

It follows the peers folder's ``loadtest_openai.py`` (official ``openai`` client, streaming; TTFT is the
time to the first chunk with text; output tokens are the streamed text re-encoded with the model's
``tokenizer.json``; tok/s is all output tokens over the wall time of the timed requests, counting
those streamed by requests a ``--deadline`` cut short) but takes each
request's ``messages`` from the prompts file, so a workload can send a system prompt. It also reports the
CPU time it used itself while timing: the client runs on the same cores as the server, and a server that
sizes its thread pool by what other processes use sees the client as one of them.

    python bench/serve_client.py URL MODEL STREAMS REQUESTS MAX_TOKENS --prompts FILE --tokenizer FILE

Prints one JSON object per prompts file (``--prompts`` repeats), one process for all of them: a
server that sizes its threads by the machine's load then sees the client's start-up once, before
``--settle`` seconds of quiet, instead of right before each timed level.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any


def percentile(values: list[float], p: float) -> float | None:
    """Nearest rank, as the peers' client computes it (p99 of 32 samples is the maximum)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


async def one_request(
    client: Any,
    args: argparse.Namespace,
    messages: list[dict[str, str]],
    counter: Any,
    seen: dict | None = None,
):
    """One streamed request. ``seen`` records its progress as it goes (``sent``, ``ttft``, ``text``), so a
    deadline that cuts it still counts the tokens it streamed and how long it waited for the first."""
    seen = {} if seen is None else seen
    started = seen["sent"] = time.perf_counter()
    text = seen["text"] = []
    try:
        stream = await client.chat.completions.create(
            model=args.model, messages=messages, max_tokens=args.max_tokens, temperature=0.0, stream=True
        )
        async for chunk in stream:
            for choice in chunk.choices or []:
                if choice.delta is not None and choice.delta.content:
                    seen.setdefault("ttft", time.perf_counter() - started)
                    text.append(choice.delta.content)
        tokens = len(counter.encode("".join(text), add_special_tokens=False).ids)
        return {"ok": True, "ttft": seen.get("ttft"), "e2e": time.perf_counter() - started, "tokens": tokens}
    except Exception as error:  # noqa: BLE001 - a failed request is counted, not fatal
        return {"ok": False, "error": f"{type(error).__name__}: {str(error)[:200]}"}


async def timed_level(client: Any, args: argparse.Namespace, conversations: list, counter: Any) -> dict:
    gate = asyncio.Semaphore(args.streams)
    progress: list[dict] = [{} for _ in conversations]

    async def guarded(messages: list[dict[str, str]], seen: dict) -> dict[str, Any]:
        async with gate:
            return await one_request(client, args, messages, counter, seen)

    cpu_before, started, started_at = time.process_time(), time.perf_counter(), time.time()
    tasks = [asyncio.create_task(guarded(c, s)) for c, s in zip(conversations, progress, strict=True)]
    done, pending = await asyncio.wait(tasks, timeout=args.deadline)
    for task in pending:
        task.cancel()
    ended = time.perf_counter()
    wall = ended - started
    client_cpu = time.process_time() - cpu_before
    results = [t.result() for t in done if not t.cancelled() and t.exception() is None]
    ok = [r for r in results if r["ok"]]
    # Requests cut by the deadline count too: their tokens, and for one still waiting for its first
    # token, the time it had waited (a lower bound, so a server that never answers cannot look fast).
    sent = [s for s in progress if "sent" in s]
    ttfts = [s.get("ttft", ended - s["sent"]) for s in sent]
    tokens = sum(len(counter.encode("".join(s["text"]), add_special_tokens=False).ids) for s in sent)
    return {
        "n_ok": len(ok), "n_err": len(results) - len(ok), "n_unfinished": len(pending),
        "ttft_cut": sum(1 for s in sent if "ttft" not in s),
        "errors_sample": [r["error"] for r in results if not r["ok"]][:3], "wall_s": round(wall, 3),
        "started_at": started_at, "ended_at": time.time(), "output_tokens": tokens,
        "output_tok_per_s": round(tokens / wall, 2) if wall > 0 else None,
        "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99),
        "e2e_p50_s": percentile([r["e2e"] for r in ok], 50), "client_cpu_s": round(client_cpu, 3),
    }  # fmt: skip


async def run(args: argparse.Namespace) -> None:
    """Each prompts file in turn: its warm-up requests one by one, then its timed requests."""
    import openai
    from tokenizers import Tokenizer

    counter = Tokenizer.from_file(args.tokenizer)
    client = openai.AsyncOpenAI(base_url=args.url, api_key="none", timeout=args.timeout, max_retries=0)
    for index, prompts in enumerate(args.prompts):
        conversations = json.loads(Path(prompts).read_text())
        wanted = args.warmup + args.requests
        conversations = [conversations[i % len(conversations)] for i in range(wanted)]
        warm = [await one_request(client, args, c, counter) for c in conversations[: args.warmup]]
        if index == 0:
            await asyncio.sleep(args.settle)
        result = await timed_level(client, args, conversations[args.warmup :], counter)
        result.update(prompts=prompts, warmup_ok=sum(1 for r in warm if r["ok"]))
        print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the server's /v1 address (loopback)")
    parser.add_argument("model")
    parser.add_argument("streams", type=int)
    parser.add_argument("requests", type=int)
    parser.add_argument("max_tokens", type=int)
    parser.add_argument(
        "--prompts", required=True, action="append", help="JSON list of message lists; repeatable"
    )
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json that counts output tokens")
    parser.add_argument("--warmup", type=int, default=1, help="untimed requests sent one by one first")
    parser.add_argument(
        "--settle", type=float, default=6.0, help="seconds of quiet after the first warm-up: the client's own "
        "start-up (about 1.7 CPU-seconds of imports) is then out of the server's load window"
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--deadline", type=float, default=600.0)
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
