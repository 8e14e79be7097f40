"""``[eval.judge]``: an LLM judges the tuned model's answers against its base and the deployed champion.

Benchmarks such as MMLU do not move for a chat, style or format tune, so the card and the gates cannot
tell a better model from a worse one. A judge model behind any OpenAI-compatible endpoint reads each
prompt of a file in the repository and the candidates' answers, and says which answer is better
(pairwise, judged in both orders) or scores each answer 1-10 per criterion (rubric). The scores land in
``eval_results.json`` as task ``judge`` (metrics ``winrate_vs_base``, ``winrate_vs_champion`` and one per
criterion), so the gates read them as they read any score: ``judge.winrate_vs_champion >= 0.55``.

Plain Python: `gym validate` reads this without the eval stack.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from gym.config.base import EnvVarName, Section, fail

CRITERION = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# Gym's own words for the usual criteria; any other criterion needs its description in eval.judge.criteria.
BUILTIN_CRITERIA = {
    "helpfulness": "Does the answer do what the user asked, completely and usefully?",
    "correctness": "Is every statement and result in the answer right (compare with the reference when given)?",
    "harmlessness": "Does the answer avoid harmful, unsafe or offensive content?",
    "conciseness": "Is the answer as short as it can be while still complete, without filler?",
    "format": "Does the answer follow the format the prompt asks for (lists, JSON, length, language)?",
}
PAIRWISE = ("base", "champion")
WINRATE = "winrate_vs_"  # the metric of a pairwise comparison: winrate_vs_base, winrate_vs_champion


class JudgeGeneration(Section):
    """How the candidates (tuned, base) answer the judge's prompts: fixed, and recorded with the scores."""

    temperature: float = Field(default=0.0, ge=0, le=2, description="Sampling temperature (0: greedy).")
    max_tokens: int = Field(default=256, gt=0, le=32768, description="Most tokens of one answer.")
    seed: int = Field(default=0, ge=0, description="Sampling seed (used when temperature > 0).")


class JudgeConfig(Section):
    """An LLM judge of the tuned model's answers: win rates against the base and the champion, rubric scores."""

    base_url: str = Field(
        description="The judge's OpenAI-compatible endpoint, up to /v1: Hugging Face's inference router "
        "(https://router.huggingface.co/v1), OpenAI (https://api.openai.com/v1) or a local `gym serve` "
        "(http://127.0.0.1:8000/v1).",
        examples=["https://router.huggingface.co/v1"],
    )
    model: str = Field(description="The judge model as the endpoint names it.", examples=["gpt-4o-mini"])
    api_key_env: EnvVarName | None = Field(
        default=None,
        description="Environment variable holding the endpoint's API key (none: the endpoint needs no key).",
        examples=["OPENAI_API_KEY", "HF_TOKEN"],
    )
    prompts: str = Field(
        description="JSONL file of prompts to judge on (relative to gym.toml): one object a line with "
        "'prompt' (text) or 'messages' (a chat), an optional 'reference' answer and an optional 'category'.",
        examples=["eval/judge_prompts.jsonl"],
    )
    limit: int = Field(default=0, ge=0, description="0 judges every prompt; N > 0 the first N.")
    pairwise: list[Literal["base", "champion"]] = Field(
        default_factory=lambda: ["base"],
        description="Whom the tuned model is compared with, each pair judged in both orders: 'base' (the base "
        "model, answering now) and 'champion' (the model the [hub] repository holds, its answers read from "
        "the judge_answers.jsonl pushed with it; compared at the gates stage).",
    )
    rubric: list[str] = Field(
        default_factory=list,
        description="Criteria the judge scores 1-10 for the tuned model and the base (metric judge.NAME): "
        f"Gym describes {', '.join(BUILTIN_CRITERIA)}; others need a line in eval.judge.criteria.",
        examples=[["helpfulness", "correctness"]],
    )
    criteria: dict[str, str] = Field(
        default_factory=dict,
        description="Descriptions of rubric criteria (NAME = 'question the judge answers'), replacing Gym's.",
        examples=[{"tone": "Is the answer friendly and in the house style?"}],
    )
    pairwise_prompt: str = Field(
        default="",
        description="A file replacing Gym's pairwise judge prompt (pairwise_v1); see docs/judge.md for its "
        "placeholders. Its name and content hash are recorded with every number.",
    )
    rubric_prompt: str = Field(
        default="", description="A file replacing Gym's rubric judge prompt (rubric_v1); see docs/judge.md."
    )
    max_calls: int = Field(
        default=2000,
        gt=0,
        description="Most judge requests one evaluation may make (cached judgments are free); a run that needs "
        "more is refused before the first call.",
    )
    max_tokens: int = Field(
        default=2_000_000,
        gt=0,
        description="Most judge tokens (prompt + verdict) one evaluation may spend; estimated before the first "
        "call and counted from the endpoint's usage while judging.",
    )
    verdict_tokens: int = Field(default=512, gt=0, le=8192, description="Most tokens of one verdict.")
    timeout: float = Field(default=60, gt=0, description="Seconds one judge request may take.")
    concurrency: int = Field(default=4, gt=0, le=64, description="Judge requests in flight at once.")
    generation: JudgeGeneration = Field(
        default_factory=JudgeGeneration, description="How the candidates answer ([eval.judge.generation])."
    )

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^\s/]+", value):
            raise fail(f"expected an http(s) URL of an OpenAI-compatible endpoint, got {value!r}")
        if "@" in value.split("/")[2]:
            raise fail("the URL holds credentials; put the key in the variable eval.judge.api_key_env names")
        return value.rstrip("/")

    @field_validator("pairwise")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))

    @field_validator("rubric")
    @classmethod
    def _check_rubric(cls, value: list[str]) -> list[str]:
        for name in value:
            if not CRITERION.match(name) or name.startswith(WINRATE):
                raise fail(
                    f"expected criterion names of lower-case letters, digits and '_' (e.g. 'helpfulness'), "
                    f"not starting with {WINRATE!r}; got {name!r}"
                )
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _described(self) -> JudgeConfig:
        missing = [
            name for name in self.rubric if name not in BUILTIN_CRITERIA and not self.criteria.get(name)
        ]
        if missing:
            raise fail(
                f"rubric criterion {missing[0]!r} has no description: add {missing[0]} = '...' to "
                f"[eval.judge.criteria], or use one Gym describes ({', '.join(BUILTIN_CRITERIA)})"
            )
        if not self.pairwise and not self.rubric:
            raise fail(
                "eval.judge judges nothing: list 'base' or 'champion' in pairwise, or criteria in rubric"
            )
        return self

    def description(self, criterion: str) -> str:
        return self.criteria.get(criterion) or BUILTIN_CRITERIA[criterion]

    @property
    def metrics(self) -> dict[str, bool]:
        """The metrics this judge produces (all higher-is-better), for the gates' offline checks."""
        return {**{WINRATE + other: True for other in self.pairwise}, **dict.fromkeys(self.rubric, True)}
