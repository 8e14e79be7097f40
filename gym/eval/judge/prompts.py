"""Gym's judge prompts: versioned text files, a registry, and how a prompt is filled for one judgment.

Each prompt is a file under ``prompts/`` named ``<kind>_v<N>.txt``; its name is its version and is recorded
with every number the judge produces, so a score is always read together with the words that asked for
it. A changed wording is a new file (``pairwise_v2.txt``) registered here, never an edit of a released
one: cached judgments and the champion's recorded win rates stay comparable. A user's own file
(``eval.judge.pairwise_prompt``) is recorded as ``file:<name>@<sha256 prefix>``.

Placeholders are written ``{{name}}`` and replaced literally (the prompt's text is never a format string,
so braces in a user's prompt or answer mean nothing): pairwise prompts take ``question``, ``reference``,
``answer_a``, ``answer_b``; rubric prompts ``question``, ``reference``, ``answer`` and ``criteria``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).parent / "prompts"
PLACEHOLDERS = {
    "pairwise": ("question", "reference", "answer_a", "answer_b"),
    "rubric": ("question", "reference", "answer", "criteria"),
}


@dataclass(frozen=True)
class JudgePrompt:
    """One judge prompt: its kind (pairwise | rubric), the version recorded with scores, and its text."""

    kind: str
    version: str
    text: str

    def fill(self, **values: str) -> str:
        text = self.text
        for name in PLACEHOLDERS[self.kind]:
            text = text.replace("{{" + name + "}}", values.get(name, ""))
        return text


PROMPTS: dict[str, JudgePrompt] = {}
DEFAULTS = {"pairwise": "pairwise_v1", "rubric": "rubric_v1"}


def register_prompt(kind: str, version: str, text: str) -> JudgePrompt:
    """Make ``version`` available; the text must hold every placeholder of its ``kind``."""
    missing = [name for name in PLACEHOLDERS[kind] if "{{" + name + "}}" not in text]
    if missing:
        raise ValueError(f"the {kind} judge prompt {version} has no {{{{{missing[0]}}}}} placeholder")
    prompt = JudgePrompt(kind, version, text)
    PROMPTS[version] = prompt
    return prompt


def _register_defaults() -> None:
    if PROMPTS:
        return
    for path in sorted(FOLDER.glob("*_v*.txt")):
        register_prompt(path.stem.split("_v")[0], path.stem, path.read_text(encoding="utf-8"))


def judge_prompt(kind: str, override: Path | None = None) -> JudgePrompt:
    """Gym's current prompt of ``kind``, or the user's file (ValueError, one sentence, when it is unusable)."""
    _register_defaults()
    if override is None:
        return PROMPTS[DEFAULTS[kind]]
    try:
        text = override.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
        raise ValueError(f"eval.judge.{kind}_prompt: cannot read {override} ({why})") from None
    version = f"file:{override.name}@{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    missing = [name for name in PLACEHOLDERS[kind] if "{{" + name + "}}" not in text]
    if missing:
        names = ", ".join("{{" + name + "}}" for name in PLACEHOLDERS[kind])
        raise ValueError(
            f"eval.judge.{kind}_prompt: {override} has no {{{{{missing[0]}}}}} placeholder; a {kind} prompt "
            f"holds {names} (see Gym's {DEFAULTS[kind]}.txt)"
        )
    return JudgePrompt(kind, version, text)


def reference_block(reference: str | None) -> str:
    """The reference answer as the prompts show it, or nothing."""
    if not reference:
        return ""
    return f"\n[Reference answer]\n{reference}\n[End of reference answer]\n"
