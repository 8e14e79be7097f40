"""The one error type a user ever sees from loading a config, and how it prints."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Shapes of well-known secrets; any match is replaced before a message is shown or raised.
SECRET_SHAPES = (
    r"hf_[A-Za-z0-9]{20,}",  # Hugging Face user tokens
    r"api_org_[A-Za-z0-9]{20,}",  # Hugging Face organisation tokens
    r"sk-[A-Za-z0-9_-]{20,}",  # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-) and compatible API keys
    r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens: personal, OAuth, user-to-server, server, refresh
    r"github_pat_[A-Za-z0-9_]{20,}",  # GitHub fine-grained personal access tokens
    r"(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)[0-9A-Z]{16}",  # AWS access key ids
    r"AIza[0-9A-Za-z_-]{35}",  # Google API keys
    r"xox[abpr]-[A-Za-z0-9-]{10,}",  # Slack tokens
    r"glpat-[A-Za-z0-9_-]{20,}",  # GitLab personal access tokens
    r"wandb_v1_[A-Za-z0-9_]{20,}",  # Weights & Biases keys (new format)
)
SECRET_PATTERNS = re.compile("|".join(f"(?:{shape})" for shape in SECRET_SHAPES))
# AWS secret access keys: exactly 40 characters of base64 standing alone, with upper and lower case
# and a digit (a git sha, lowercase hex, is not one). Checked in two steps to stay linear on long text.
AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")


def _is_aws_secret(text: str) -> bool:
    return (
        any(c.isupper() for c in text) and any(c.islower() for c in text) and any(c.isdigit() for c in text)
    )


def looks_like_secret(text: str) -> bool:
    """True when ``text`` contains something shaped like a well-known token or key."""
    return SECRET_PATTERNS.search(text) is not None or any(
        _is_aws_secret(match.group()) for match in AWS_SECRET.finditer(text)
    )


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with known secret values and secret-shaped strings replaced by ``***``."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    text = SECRET_PATTERNS.sub("***", text)
    return AWS_SECRET.sub(lambda match: "***" if _is_aws_secret(match.group()) else match.group(), text)


def shorten(text: str, limit: int = 80) -> str:
    """``text`` cut in the middle to at most ``limit`` characters, so a pasted megabyte is not echoed."""
    if len(text) <= limit:
        return text
    keep = (limit - 1) // 2
    return f"{text[:keep]}…{text[-keep:]}"


LONG_RUN = re.compile(r"\"[^\"\n]{81,}\"|'[^'\n]{81,}'|[^\s\"']{81,}")


def shorten_long_values(text: str, limit: int = 80) -> str:
    """``text`` with every quoted value or unbroken run longer than ``limit`` cut in the middle."""

    def cut(match: re.Match[str]) -> str:
        run = match.group()
        if run[0] in "\"'" and run[-1] == run[0]:
            return run[0] + shorten(run[1:-1], limit) + run[0]
        return shorten(run, limit)

    return LONG_RUN.sub(cut, text)


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config: where it is (file, line, column, dotted key) and what is wrong.

    Key and message are redacted (secret-shaped strings become ``***``) and long values shortened
    when the issue is made, so no way of printing or raising it can echo a pasted token or a megabyte.
    """

    source: str
    key: str
    message: str
    line: int | None = None
    column: int | None = None

    def __post_init__(self) -> None:
        for name in ("key", "message"):
            object.__setattr__(self, name, shorten_long_values(redact(getattr(self, name))))

    def __str__(self) -> str:
        where = self.source
        if self.line is not None:
            where += f":{self.line}:{self.column or 1}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class ConfigError(Exception):
    """Every problem found in a config at once; ``str()`` is one ``file:line:col: key: message`` per line."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = sorted(issues, key=lambda i: (i.source, i.line or 0, i.column or 0, i.key))
        super().__init__("\n".join(map(str, self.issues)))

    @classmethod
    def single(
        cls, source: str, message: str, key: str = "", line: int | None = None, column: int | None = None
    ) -> ConfigError:
        return cls([ConfigIssue(source=source, key=key, message=message, line=line, column=column)])
