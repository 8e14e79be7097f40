"""Asking the judge: an OpenAI-compatible endpoint through the ``openai`` client, cached, capped and bounded.

Every judgment is keyed by the sha256 of (judge model, judge prompt version, the filled prompt), and the
filled prompt holds the question, the reference, the answers and their order; so a rerun, or the champion
comparison of a later run on the same answers, pays nothing. Only readable verdicts are cached: a
verdict the parser could not read is asked again next time.

Before the first call, the calls still needed (after the cache) and their estimated tokens are checked
against ``eval.judge.max_calls`` and ``max_tokens``; while judging, the tokens the endpoint reports are
counted and the judging stops once they pass the cap. 429, 5xx, timeouts and refused connections are
retried twice with backoff; then, as for any other HTTP error, judging stops with one sentence naming the
endpoint (never the key).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.eval.errors import EvalError

if TYPE_CHECKING:
    from gym.config.judge import JudgeConfig

CACHE_FILE = "judge_cache.jsonl"
TRIES = 3
CHARS_PER_TOKEN = 3  # a cautious estimate for the cap check (English averages about four)


@dataclass
class Usage:
    """What one evaluation asked of the judge."""

    calls: int = 0  # HTTP requests made, retries included
    cached: int = 0  # judgments read from the cache
    tokens: int = 0  # prompt + completion tokens the endpoint reported

    def as_dict(self) -> dict[str, int]:
        return {"calls": self.calls, "cached": self.cached, "tokens": self.tokens}


class JudgmentCache:
    """``judge_cache.jsonl`` in the run folder: one ``{"key", "text"}`` a line; damaged lines are skipped."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / CACHE_FILE
        self.entries: dict[str, str] = {}
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            lines = []
        for line in lines:
            try:
                row = json.loads(line)
                if isinstance(row.get("key"), str) and isinstance(row.get("text"), str):
                    self.entries[row["key"]] = row["text"]
            except (ValueError, AttributeError, RecursionError):
                continue

    def add(self, key: str, text: str) -> None:
        self.entries[key] = text
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps({"key": key, "text": text}, ensure_ascii=False) + "\n")


def judgment_key(model: str, version: str, prompt: str) -> str:
    return hashlib.sha256(json.dumps([model, version, prompt], ensure_ascii=False).encode()).hexdigest()


@dataclass(frozen=True)
class Ask:
    """One judgment to obtain: its cache key, the filled judge prompt, and whether a verdict is readable."""

    key: str
    prompt: str
    readable: Callable[[str], bool]


class Judge:
    """The judge endpoint of ``[eval.judge]`` with its cache and caps."""

    def __init__(self, settings: JudgeConfig, folder: Path) -> None:
        self.settings = settings
        self.cache = JudgmentCache(folder)
        self.usage = Usage()
        env = settings.api_key_env
        self.key = os.environ.get(env) if env else None
        if env and not self.key:
            raise EvalError(
                f"eval.judge.api_key_env: ${env} is not set, and the judge at {settings.base_url} needs its key; "
                "set it, or remove api_key_env for an endpoint that needs none"
            )

    def where(self) -> str:
        return f"the judge {self.settings.model} at {self.settings.base_url}"

    def ask(self, asks: list[Ask]) -> dict[str, str]:
        """``{key: verdict text}`` for every ask, from the cache or the endpoint; EvalError when it fails."""
        todo: dict[str, Ask] = {}
        found: dict[str, str] = {}
        for item in asks:
            if item.key in self.cache.entries:
                found[item.key] = self.cache.entries[item.key]
            else:
                todo.setdefault(item.key, item)
        self.usage.cached += len(asks) - len(todo)
        self._check_caps(list(todo.values()))
        if todo:
            found.update(asyncio.run(self._ask_all(list(todo.values()))))
        return found

    def _check_caps(self, todo: list[Ask]) -> None:
        settings = self.settings
        if len(todo) > settings.max_calls:
            raise EvalError(
                f"eval.judge needs {len(todo)} judge calls ({self.usage.cached} more are cached), more than "
                f"eval.judge.max_calls = {settings.max_calls}; raise the cap or judge fewer prompts (eval.judge.limit)"
            )
        estimate = sum(len(item.prompt) // CHARS_PER_TOKEN + settings.verdict_tokens for item in todo)
        if estimate > settings.max_tokens:
            raise EvalError(
                f"eval.judge needs about {estimate:,} judge tokens for {len(todo)} calls, more than "
                f"eval.judge.max_tokens = {settings.max_tokens:,}; raise the cap or judge fewer prompts "
                "(eval.judge.limit)"
            )

    async def _ask_all(self, todo: list[Ask]) -> dict[str, str]:
        from openai import AsyncOpenAI

        client = AsyncOpenAI(base_url=self.settings.base_url, api_key=self.key or "EMPTY", max_retries=0,
                             timeout=self.settings.timeout)  # fmt: skip
        gate = asyncio.Semaphore(self.settings.concurrency)

        async def one(item: Ask) -> tuple[str, str]:
            async with gate:
                text = await self._call(client, item.prompt)
            if item.readable(text):
                self.cache.add(item.key, text)
            return item.key, text

        tasks = [asyncio.ensure_future(one(item)) for item in todo]
        try:
            return dict(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.close()

    async def _call(self, client: Any, prompt: str) -> str:
        import openai

        settings = self.settings
        for attempt in range(TRIES):
            if self.usage.tokens > settings.max_tokens:
                raise EvalError(
                    f"{self.where()} used {self.usage.tokens:,} tokens, past eval.judge.max_tokens = "
                    f"{settings.max_tokens:,}; the judgments so far are cached: raise the cap and run again"
                )
            self.usage.calls += 1
            try:
                response = await client.chat.completions.create(
                    model=settings.model, messages=[{"role": "user", "content": prompt}], temperature=0,
                    max_tokens=settings.verdict_tokens,
                )  # fmt: skip
            except openai.APIStatusError as error:
                if (error.status_code == 429 or error.status_code >= 500) and attempt + 1 < TRIES:
                    await asyncio.sleep(0.5 * 2**attempt)
                    continue
                raise EvalError(self._refused(error.status_code, attempt + 1)) from None
            except openai.APIConnectionError as error:
                if attempt + 1 < TRIES:
                    await asyncio.sleep(0.5 * 2**attempt)
                    continue
                raise EvalError(
                    f"cannot reach {self.where()} ({type(error).__name__}, {TRIES} tries); start it or fix "
                    "eval.judge.base_url; nothing is pushed"
                ) from None
            usage = getattr(response, "usage", None)
            if usage is not None:
                self.usage.tokens += (usage.prompt_tokens or 0) + (usage.completion_tokens or 0)
            choices = getattr(response, "choices", None) or []
            message = getattr(choices[0], "message", None) if choices else None
            return str(getattr(message, "content", None) or "")
        raise AssertionError("unreachable: the last try returns or raises")

    def _refused(self, status: int, tries: int) -> str:
        env = self.settings.api_key_env
        if status in (401, 403):
            key = f"the key in ${env}" if env else "no key (eval.judge.api_key_env is not set)"
            return f"{self.where()} refused {key} (HTTP {status}); fix the key; nothing is pushed"
        if status == 404:
            return (
                f"{self.where()} answered HTTP 404: check eval.judge.base_url (up to /v1) and that it serves "
                f"the model {self.settings.model!r}; nothing is pushed"
            )
        return (
            f"{self.where()} answered HTTP {status} ({tries} {'try' if tries == 1 else 'tries'}); retry later or "
            "use another judge; nothing is pushed"
        )
