"""The judge in words: its lines in the card and the pull-request comment, and its line in the launch plan.

The section comes from ``eval_results.json``, which a pull request's run writes: every value is checked
for its type before use, and prompt and answer text (anything a user or a model wrote) is shown only
inside code fences longer than any backtick run in it, so it renders as the characters it is.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gym.markup import md_code, md_text

if TYPE_CHECKING:
    from gym.config.root import GymConfig


def _number(value: Any, digits: int = 4) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—"
    return f"{value:.{digits}f}"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _fence(text: Any) -> str:
    text = str(text)
    ticks = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{ticks}text\n{text.rstrip()}\n{ticks}\n"


def judge_markdown(section: Any) -> str:
    """The judge's header line, win-rate table and the disagreement examples ('' without a judge)."""
    if not isinstance(section, dict) or not section.get("model"):
        return ""
    versions = section.get("prompt_versions") if isinstance(section.get("prompt_versions"), dict) else {}
    generation = section.get("generation") if isinstance(section.get("generation"), dict) else {}
    usage = section.get("usage") if isinstance(section.get("usage"), dict) else {}
    prompts = section.get("prompts") if isinstance(section.get("prompts"), dict) else {}
    head = (
        f"**LLM judge:** {md_code(section['model'])} · prompts "
        + ", ".join(md_code(v) for v in versions.values())
        + f" · answers at temperature {_number(generation.get('temperature'), 2)}, at most "
        f"{_count(generation.get('max_tokens'))} tokens, seed {_count(generation.get('seed'))}"
        f" · {_count(prompts.get('count'))} prompts · {_count(usage.get('calls'))} judge calls, "
        f"{_count(usage.get('cached'))} cached, {_count(usage.get('tokens')):,} tokens\n"
    )
    lines = [head]
    pairwise = section.get("pairwise") if isinstance(section.get("pairwise"), dict) else {}
    rows = []
    for against, result in pairwise.items():
        if not isinstance(result, dict):
            continue
        if result.get("note"):
            rows.append(f"| vs {md_text(against)} | — | — | — | {md_text(result['note'])} |")
            continue
        rows.append(
            f"| vs {md_text(against)} | {_number(result.get('winrate'))} | {_number(result.get('ci_low'), 2)}–"
            f"{_number(result.get('ci_high'), 2)} | {_count(result.get('wins'))} / {_count(result.get('ties'))} / "
            f"{_count(result.get('losses'))} | {_count(result.get('unparsed'))} of {_count(result.get('verdicts'))} |"
        )
    if rows:
        lines.append("\n| judged | win rate | 95% interval | wins / ties / losses | unreadable verdicts |\n"
                     "| --- | ---: | ---: | ---: | ---: |\n" + "\n".join(rows) + "\n")  # fmt: skip
    rubric = section.get("rubric") if isinstance(section.get("rubric"), dict) else {}
    unread = [
        f"{md_text(name)} {_count(r.get('unparsed'))}" for name, r in rubric.items() if isinstance(r, dict)
    ]
    if unread:
        lines.append(
            f"\nRubric scores 1–10 are rows `judge.<criterion>` above; unreadable verdicts: {', '.join(unread)}.\n"
        )
    lines.append(_examples(section.get("examples")))
    return "".join(lines)


def _examples(examples: Any) -> str:
    if not isinstance(examples, list) or not examples:
        return ""
    parts = [f"\n<details><summary>{len(examples)} prompts where the models disagreed most</summary>\n\n"]
    for number, example in enumerate(examples, start=1):
        if not isinstance(example, dict):
            continue
        against = md_text(example.get("against", "other"))
        parts.append(
            f"**{number}. tuned vs {against}** (tuned scored {_number(example.get('score'), 2)} of 1)\n\n"
            f"Prompt:\n\n{_fence(example.get('prompt', ''))}\nTuned:\n\n{_fence(example.get('tuned', ''))}\n"
            f"{against.capitalize()}:\n\n{_fence(example.get('other', ''))}\n"
        )
    return "".join(parts) + "</details>\n"


def plan_note(config: GymConfig) -> str | None:
    """The judge's cost bound as the launch plan shows it (None without ``[eval.judge]``)."""
    settings = config.eval.judge
    if settings is None:
        return None
    try:
        with config.resolve_path(settings.prompts).open(encoding="utf-8") as stream:
            count = sum(1 for line in stream if line.strip())
    except (OSError, UnicodeDecodeError):
        count = 0
    if settings.limit:
        count = min(count, settings.limit)
    per_prompt = (
        2 * ("base" in settings.pairwise) + 2 * ("champion" in settings.pairwise) + 2 * bool(settings.rubric)
    )
    need = f"{count} prompts need {count * per_prompt} judge calls before the cache; " if count else ""
    return (
        f"LLM judge {settings.model} at {settings.base_url}: {need}at most {settings.max_calls:,} calls and "
        f"{settings.max_tokens:,} tokens (eval.judge.max_calls, eval.judge.max_tokens)"
    )
