"""The policy endpoint: an OpenAI-compatible chat API, remote or an in-process `gym serve` of the local model.

Rollouts and learner calls share one ``AsyncOpenAI`` client behind a semaphore (``concurrency``
requests in flight). The client's own retries are off so that every HTTP attempt is counted here:
429, 5xx, timeouts and connection errors are retried with exponential backoff (``Retry-After`` is
honoured, capped); anything else, or the last failure, makes the call return ``None``: a failed
request is counted and logged, never raised, so one bad rollout cannot end a run.

The API keys are read once from the environment variables named by ``train.grpo.api_key_env`` (and
``learner_api_key_env``) and handed to the clients; they are scrubbed from every message this module logs.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

log = logging.getLogger("gym.train.training_free")
ROLES = ("rollout", "learner")


@dataclass
class Usage:
    """Counters of one kind of call. ``requests`` counts HTTP attempts, retries included."""

    requests: int = 0
    failed: int = 0
    retries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0

    def minus(self, other: Usage) -> Usage:
        return Usage(*(a - b for a, b in zip(asdict(self).values(), asdict(other).values(), strict=True)))


@dataclass
class Meter:
    """Usage per role; :meth:`snapshot` and :meth:`since` give the counters of one step."""

    roles: dict[str, Usage] = field(default_factory=lambda: {r: Usage() for r in ROLES})

    def snapshot(self) -> dict[str, Usage]:
        return {r: Usage(**asdict(u)) for r, u in self.roles.items()}

    def since(self, before: dict[str, Usage]) -> dict[str, Any]:
        return summarise({r: u.minus(before[r]) for r, u in self.roles.items()})

    def total(self) -> dict[str, Any]:
        return summarise(self.roles)


def summarise(roles: dict[str, Usage]) -> dict[str, Any]:
    """Totals over roles plus the per-role breakdown, as stored in step files and train_results.json."""
    total = Usage()
    for usage in roles.values():
        total = Usage(*(a + b for a, b in zip(asdict(total).values(), asdict(usage).values(), strict=True)))
    return {**asdict(total), "by_role": {r: asdict(u) for r, u in roles.items()}}


def add_totals(previous: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
    """Run totals after a step: ``previous`` (from the resumed library, maybe empty) plus ``step``."""
    keys = asdict(Usage()).keys()
    merged: dict[str, Any] = {k: previous.get(k, 0) + step[k] for k in keys}
    merged["by_role"] = {
        r: {k: previous.get("by_role", {}).get(r, {}).get(k, 0) + step["by_role"][r][k] for k in keys}
        for r in step["by_role"]
    }
    return merged


class PolicyClient:
    """Chat completions with bounded concurrency, retries, backoff and usage counting."""

    def __init__(self, client: Any, model: str, *, concurrency: int = 16, retries: int = 4,
                 backoff: float = 1.0, secret: str | None = None, closer: Any = None,
                 meter: Meter | None = None, semaphore: asyncio.Semaphore | None = None) -> None:  # fmt: skip
        """``meter`` and ``semaphore`` are shared when the learner has its own endpoint: one run's counters
        and one bound on requests in flight (``train.grpo.concurrency``)."""
        self.client, self.model = client, model
        self.semaphore = semaphore or asyncio.Semaphore(max(1, concurrency))
        self.retries, self.backoff = retries, backoff
        self.meter = meter or Meter()
        self._secret, self._closer = secret, closer

    def scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    async def chat(self, messages: list[dict[str, Any]], *, temperature: float, max_tokens: int,
                   role: str = "rollout") -> str | None:  # fmt: skip
        """The reply text, or None when the request failed (after retries where retrying helps)."""
        import openai

        usage = self.meter.roles[role]
        for attempt in range(self.retries + 1):
            usage.requests += 1
            retry_after = None
            try:
                async with self.semaphore:
                    response = await self.client.chat.completions.create(
                        model=self.model, messages=messages, temperature=temperature, max_tokens=max_tokens
                    )
            except openai.APIStatusError as error:
                retryable = error.status_code == 429 or error.status_code >= 500
                retry_after = error.response.headers.get("retry-after") if error.response else None
                reason = f"HTTP {error.status_code}: {error.message}"
            except openai.APIConnectionError as error:  # timeouts included
                retryable, reason = True, f"{type(error).__name__}: {error}"
            else:
                if response.usage is not None:
                    usage.tokens_in += response.usage.prompt_tokens or 0
                    usage.tokens_out += response.usage.completion_tokens or 0
                choice = response.choices[0] if response.choices else None
                return (choice.message.content or "") if choice is not None else ""
            if not retryable or attempt == self.retries:
                usage.failed += 1
                log.warning("%s request failed: %s", role, self.scrub(reason)[:300])
                return None
            usage.retries += 1
            await asyncio.sleep(self._delay(attempt, retry_after))
        return None  # unreachable: the loop returns on its last attempt

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        try:
            if retry_after is not None:
                return min(60.0, max(0.0, float(retry_after)))
        except ValueError:
            pass
        return self.backoff * (2**attempt) * (0.5 + random.random() / 2)

    async def aclose(self) -> None:
        await self.client.close()
        if self._closer is not None:
            self._closer()


async def served_model(client: Any, wanted: str) -> str:
    """The model id to send: ``wanted`` when the endpoint lists it or lists nothing, else its only model."""
    try:
        ids = [m.id async for m in client.models.list()]
    except Exception:  # an endpoint without /models: send what the config names
        return wanted
    if wanted in ids or len(ids) != 1:
        return wanted
    return ids[0]


def open_endpoint(api_base: str, api_key: str | None, timeout: float) -> Any:
    """An AsyncOpenAI client for ``api_base`` (the key is only ever given to the client)."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=api_base, api_key=api_key or "EMPTY", max_retries=0, timeout=timeout)


def open_local(model: str, timeout: float, serve_local: Callable[[str], Any] | None) -> tuple[Any, str, Any]:
    """The local model behind Gym's own OpenAI app, called in process (no port): client, model id, closer.

    ``serve_local`` is `gym serve`'s app factory (:func:`gym.api.factory.build_serving_app`), handed down
    by the command that trains: rollouts get its continuous batching and chat template, and the learner
    calls go through exactly the code a served model would.
    """
    if serve_local is None:
        raise ValueError(
            "train.grpo.api_base is not set and nothing serves the local model in process: run `gym train`, "
            "or set train.grpo.api_base"
        )
    import httpx
    from openai import AsyncOpenAI

    app = serve_local(model)
    transport = httpx.ASGITransport(app=app)
    http = httpx.AsyncClient(transport=transport, base_url="http://gym.local/v1", timeout=timeout)
    client = AsyncOpenAI(base_url="http://gym.local/v1", api_key="local", max_retries=0, http_client=http)
    return client, app.state.backend.model_id, app.state.backend.close
