"""The learner's three steps per group (summaries, semantic group advantage, library operations) and the
batch consolidation, each one LLM call whose JSON reply is checked.

A reply that is not the JSON asked for is re-requested (``json_retries`` more times); after that the
stage is skipped with a logged warning: a summary missing from a group, a group contributing no
operations, or (for consolidation) the proposed operations merged by the rules alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gym.train.training_free import prompts
from gym.train.training_free.client import PolicyClient
from gym.train.training_free.library import Library, Operation

log = logging.getLogger("gym.train.training_free")
T = TypeVar("T")


@dataclass
class Group:
    """One query's rollouts and rewards (``None``: the rollout failed or could not be judged)."""

    problem: list[dict[str, Any]]
    reference: str | None
    completions: list[str | None]
    rewards: list[float | None]

    def graded(self) -> list[tuple[str, float]]:
        return [
            (c, r)
            for c, r in zip(self.completions, self.rewards, strict=True)
            if c is not None and r is not None
        ]

    @property
    def informative(self) -> bool:
        """Kept only when the rewards differ: an all-equal group has no advantage to learn from."""
        return len({r for _, r in self.graded()}) > 1


@dataclass
class Learner:
    """The learning calls, sent to the learner's endpoint (``train.grpo.learner_api_base``, else the policy's)."""

    client: PolicyClient
    k: int = 2
    temperature: float = 0.3
    max_tokens: int = 2048
    json_retries: int = 3

    async def ask(self, prompt: str, what: str, read: Callable[[dict[str, Any]], T]) -> T | None:
        """``read`` of the reply's JSON; retried on a malformed reply, None (logged) when it never comes."""
        messages = [
            {"role": "system", "content": prompts.LEARNER_SYSTEM},
            {"role": "user", "content": prompt},
        ]
        problem = "the request failed"
        for _ in range(self.json_retries + 1):
            text = await self.client.chat(
                messages, temperature=self.temperature, max_tokens=self.max_tokens, role="learner"
            )
            if text is None:  # already counted and logged as a failed request
                return None
            try:
                return read(prompts.parse_json_object(text))
            except (ValueError, KeyError, TypeError) as error:
                problem = str(error)
        log.warning("skipped %s: no valid JSON after %d attempts (%s)", what, self.json_retries + 1, problem)
        return None

    async def summarise(self, group: Group) -> list[tuple[str, float]]:
        """(summary, reward) of each graded rollout whose summary came back."""
        problem = prompts.problem_text(group.problem)

        def read(data: dict[str, Any]) -> str:
            summary = data["summary"]
            if not isinstance(summary, str) or not summary.strip():
                raise ValueError("'summary' must be a non-empty string")
            return summary.strip()

        graded = group.graded()
        summaries = await asyncio.gather(
            *(
                self.ask(prompts.summary_prompt(problem, group.reference, c, r), "a rollout summary", read)
                for c, r in graded
            )  # fmt: skip
        )
        return [(s, r) for s, (_, r) in zip(summaries, graded, strict=True) if s is not None]

    async def advantage(
        self, library: Library, group: Group, summaries: list[tuple[str, float]]
    ) -> list[str]:
        """The semantic group advantage against the current library: at most K experiences
        "When <condition>, <strategy>" that the library does not already give."""

        def read(data: dict[str, Any]) -> list[str]:
            items = data["experiences"]
            if not isinstance(items, list) or not all(isinstance(e, str) for e in items):
                raise ValueError("'experiences' must be a list of strings")
            return [" ".join(e.split()) for e in items if e.strip()][: self.k]

        if len({r for _, r in summaries}) < 2:  # what is left no longer contrasts better and worse
            return []
        prompt = prompts.advantage_prompt(
            prompts.problem_text(group.problem), group.reference, summaries, self.k, library.enumerated()
        )
        return await self.ask(prompt, "a group's experiences", read) or []

    async def decide(self, library: Library, proposals: list[str]) -> list[Operation]:
        """ADD / UPDATE(id) / DELETE(id) / NONE for each proposal, against the current library."""
        size = len(library.experiences)

        def read(data: dict[str, Any]) -> list[Operation]:
            items = data["operations"]
            if not isinstance(items, list):
                raise ValueError("'operations' must be a list")
            operations = []
            for item in items:
                try:
                    op = Operation.parse(item)
                except ValueError as error:  # one bad entry: drop it, keep the rest
                    log.warning("dropped a library operation: %s", error)
                    continue
                if op.id is not None and not 1 <= op.id <= size:
                    log.warning("dropped %s of experience %d: the library has %d", op.kind, op.id, size)
                    continue
                operations.append(op)
            return operations

        if not proposals:
            return []
        return (
            await self.ask(
                prompts.update_prompt(library.enumerated(), proposals), "a group's operations", read
            )
            or []
        )

    async def learn(self, library: Library, group: Group) -> list[Operation]:
        """All three steps for one kept group."""
        summaries = await self.summarise(group)
        return await self.decide(library, await self.advantage(library, group, summaries))

    async def consolidate(self, library: Library, proposed: list[Operation]) -> list[Operation]:
        """One call merging the batch's operations; the proposals themselves when it fails or is not needed."""
        changes = [op for op in proposed if op.kind != "NONE"]
        if len(changes) < 2:
            return changes

        def read(data: dict[str, Any]) -> list[Operation]:
            items = data["operations"]
            if not isinstance(items, list):
                raise ValueError("'operations' must be a list")
            return [op for op in map(Operation.parse, items) if op.kind != "NONE"]

        prompt = prompts.consolidate_prompt(library.enumerated(), [op.as_json() for op in changes])
        merged = await self.ask(prompt, "the batch consolidation", read)
        return changes if merged is None else merged
