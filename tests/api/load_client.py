"""A bounded load client run as a separate process: N requests, C in flight, one JSON line of counts."""

import asyncio
import json
import sys

import httpx


async def main(url: str, key: str, concurrency: int, total: int, max_tokens: int) -> None:
    statuses: dict[str, int] = {}
    todo = iter(range(total))
    headers = {"Authorization": f"Bearer {key}"}

    async def worker(client: httpx.AsyncClient) -> None:
        for i in todo:
            body = {"model": "builtin:tiny", "max_tokens": max_tokens, "temperature": 0.7, "seed": i,
                    "messages": [{"role": "user", "content": f"Reverse: {' '.join('abcdefgh'[: 1 + i % 8])}"}]}  # fmt: skip
            try:
                if i % 2:
                    async with client.stream(
                        "POST", url + "/v1/chat/completions", json={**body, "stream": True}, headers=headers
                    ) as r:
                        text = "".join([line async for line in r.aiter_lines()])
                        ok = r.status_code != 200 or text.endswith("data: [DONE]")
                        key_ = str(r.status_code) if ok else "truncated"
                else:
                    r = await client.post(url + "/v1/chat/completions", json=body, headers=headers)
                    key_ = str(r.status_code)
            except httpx.HTTPError as error:
                key_ = type(error).__name__
            statuses[key_] = statuses.get(key_, 0) + 1

    async with httpx.AsyncClient(timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    print(json.dumps(statuses))


if __name__ == "__main__":
    url, key, c, n, m = sys.argv[1:6]
    asyncio.run(main(url, key, int(c), int(n), int(m)))
