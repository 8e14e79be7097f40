"""The prompts of training-free GRPO and the parsing of the learner's JSON replies.

Wording follows the paper's released prompts (Youtu-agent ``training_free_grpo``), shortened. Every
learner prompt asks for one JSON object and starts with a ``## Task:`` line naming its stage, so logs
(and the scripted test server) can tell the four stages apart.
"""

from __future__ import annotations

import json
import re
from typing import Any

APPLY_EXPERIENCES = (
    "When solving problems, you MUST first carefully read and understand the helpful instructions and "
    "experiences:"
)
SUMMARY_TASK = "## Task: summarise one attempt"
ADVANTAGE_TASK = "## Task: extract experiences"
UPDATE_TASK = "## Task: update the experience library"
CONSOLIDATE_TASK = "## Task: consolidate library operations"
LEARNER_SYSTEM = "You improve a library of problem-solving experiences. Reply with one JSON object only."


def rollout_messages(problem: list[dict[str, Any]], experiences: list[str]) -> list[dict[str, Any]]:
    """The problem's conversation with the library where inference puts it: in the system prompt.

    `gym serve --experiences` and `gym eval --experiences` call the same
    :func:`gym.train.experiences.with_experiences`, so the policy learns with exactly the prompt it is
    later served and scored with.
    """
    from gym.train.experiences import render_system_prompt, with_experiences

    return with_experiences(problem, render_system_prompt(experiences))


def problem_text(problem: list[dict[str, Any]]) -> str:
    """The problem as the learner sees it: the user turns (earlier turns are context of the last)."""
    return "\n".join(str(m.get("content") or "") for m in problem if m.get("role") == "user")


def summary_prompt(problem: str, reference: str | None, attempt: str, reward: float) -> str:
    return f"""{SUMMARY_TASK}
An assistant, given a library of experiences, produced the attempt below for the problem.
Summarise the attempt step by step: what each step did and which experience (if any) it used. Given
the reward and the reference answer, say what helped, and which steps were detours or errors, why
they happened and what they cost.

Problem:
{problem}

Reference answer: {reference if reference is not None else "(none)"}
Reward of this attempt: {reward:g}

Attempt:
{attempt}

Reply with JSON: {{"summary": "<the step-by-step summary>"}}"""


def advantage_prompt(
    problem: str, reference: str | None, graded: list[tuple[str, float]], k: int, enumerated: str
) -> str:
    """The semantic group advantage, relative to the library: the attempts were made with ``enumerated``
    in their prompt, so what made the difference is what the library does not already say."""
    attempts = "\n\n".join(f"Attempt {i} (reward {r:g}):\n{s}" for i, (s, r) in enumerate(graded, 1))
    return f"""{ADVANTAGE_TASK}
Several attempts at one problem were made with the experience library below in their prompt, and
graded. Compare the summaries of the better and the worse attempts and state what made the
difference, as at most {k} general experiences that would help on other problems too. Say only what
the library does not already say, or what in it misled the worse attempts. Each experience is one
sentence of the form "When <condition>, <strategy>." Do not mention this problem's specific numbers
or answer.

Current experience library:
{enumerated}

Problem:
{problem}

Reference answer: {reference if reference is not None else "(none)"}

{attempts}

Reply with JSON: {{"experiences": ["When ..., ...", ...]}}"""


def update_prompt(enumerated: str, proposals: list[str]) -> str:
    proposed = "\n".join(f"- {p}" for p in proposals)
    return f"""{UPDATE_TASK}
Current experience library:
{enumerated}

Newly proposed experiences:
{proposed}

For each proposed experience choose one operation on the library:
- ADD: it is new; "content" is the experience.
- UPDATE: it refines experience "id"; "content" is the merged, improved experience.
- DELETE: it shows experience "id" is wrong or harmful.
- NONE: it is already covered.
Keep experiences general, one sentence each, "When <condition>, <strategy>."

Reply with JSON: {{"operations": [{{"operation": "ADD|UPDATE|DELETE|NONE", "id": <id or null>, "content": "..."}}]}}"""


def consolidate_prompt(enumerated: str, operations: list[dict[str, Any]]) -> str:
    listed = json.dumps(operations, ensure_ascii=False, indent=1)
    return f"""{CONSOLIDATE_TASK}
Current experience library:
{enumerated}

Operations proposed by different problems of one batch:
<operations>
{listed}
</operations>

Merge them into one consistent list: several UPDATEs of one id become one UPDATE whose content
combines them; a DELETE of an id replaces any UPDATE of it; ADDs that say the same thing become one
ADD; keep every other operation as it is. Drop NONE.

Reply with JSON: {{"operations": [{{"operation": "ADD|UPDATE|DELETE", "id": <id or null>, "content": "..."}}]}}"""


FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_json_object(text: str | None) -> dict[str, Any]:
    """The JSON object in a reply: the whole text, a ```json fence, or the outermost ``{...}``.

    ValueError when there is none: the caller retries the request.
    """
    if not text:
        raise ValueError("empty reply")
    candidates = [text.strip(), *FENCE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise ValueError("no JSON object in the reply")
