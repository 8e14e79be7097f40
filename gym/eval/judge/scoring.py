"""Reading the judge's verdicts and turning them into win rates and rubric means, with their uncertainty.

A verdict that cannot be read is ``None`` and counted as unparsed by the caller, never guessed at.

Pairwise: each prompt is judged twice, the tuned answer first (A) and then second (B). A win counts 1, a
tie 0.5, a loss 0, and the prompt's score is the mean of its readable orders, so a judge that always
prefers the first answer scores every prompt 0.5: the swap cancels position bias. The win rate is the mean
over prompts; its 95% interval is Wilson's score interval with the prompts as trials (ties as half a
win), and its standard error the sample standard deviation of the prompt scores over sqrt(n).

Rubric: each criterion's mean over prompts, and its standard error (sample sd over sqrt(n)).
"""

from __future__ import annotations

import json
import math
import re
from statistics import mean, stdev

PAIRWISE = re.compile(r"\[\[\s*(A|B|C|TIE)\s*\]\]", re.IGNORECASE)
OBJECT = re.compile(r"\{[^{}]*\}")
Z95 = 1.959963984540054


def pairwise_verdict(text: str) -> str | None:
    """'A', 'B' or 'C' (tie) from the judge's last ``[[X]]``; None when it gave none."""
    found = PAIRWISE.findall(text or "")
    if not found:
        return None
    last = found[-1].upper()
    return "C" if last == "TIE" else last


def tuned_score(verdict: str | None, tuned_is_a: bool) -> float | None:
    """The tuned answer's score in one order: 1 a win, 0.5 a tie, 0 a loss, None unreadable."""
    if verdict is None:
        return None
    if verdict == "C":
        return 0.5
    return 1.0 if (verdict == "A") == tuned_is_a else 0.0


def rubric_verdict(text: str, criteria: list[str]) -> dict[str, int | None]:
    """Each criterion's score 1-10 from the judge's last JSON object naming it; None where it gave none."""
    scores: dict[str, int | None] = dict.fromkeys(criteria)
    for blob in reversed(OBJECT.findall(text or "")):
        try:
            data = json.loads(blob)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        for name in criteria:
            value = data.get(name)
            if scores[name] is None and _score(value) is not None:
                scores[name] = _score(value)
    return scores


def _score(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if value == int(value) and 1 <= value <= 10 else None


def wilson(p: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a proportion ``p`` of ``n`` trials."""
    if n == 0:
        return 0.0, 1.0
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def stderr(values: list[float]) -> float | None:
    """Standard error of the mean (None for fewer than two values)."""
    return stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None


def summary(scores: list[float]) -> dict[str, float | int | None]:
    """Win rate, its interval and standard error, and the counts, from per-prompt scores (None: unread)."""
    read = [s for s in scores if s is not None]
    if not read:
        return {"winrate": None, "ci_low": None, "ci_high": None, "stderr": None, "n": 0,
                "wins": 0, "ties": 0, "losses": 0}  # fmt: skip
    rate = mean(read)
    low, high = wilson(rate, len(read))
    return {
        "winrate": rate, "ci_low": low, "ci_high": high, "stderr": stderr(read), "n": len(read),
        "wins": sum(s > 0.5 for s in read), "ties": sum(s == 0.5 for s in read),
        "losses": sum(s < 0.5 for s in read),
    }  # fmt: skip
