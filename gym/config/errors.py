"""The one error type a user ever sees from loading a config, and how it prints."""

from __future__ import annotations

import os
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


# Environment variables that hold secrets whatever the config says: the defaults of Gym's ``*_env`` keys,
# the Hub's and GitHub's tokens, and the trackers' and API providers' keys.
SECRET_VARIABLES = {
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GYM_API_KEY", "GYM_REPORT_TOKEN", "GITHUB_TOKEN", "GH_TOKEN",
    "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "WANDB_API_KEY", "COMET_API_KEY", "NEPTUNE_API_TOKEN",
    "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
}  # fmt: skip
MIN_SECRET = 6  # shorter values are left alone: redacting "main" or "1234" everywhere would garble messages


def remember_secret_variables(names: object) -> None:
    """Add the variables a config names in its ``*_env`` keys: their values are redacted from now on."""
    if isinstance(names, str):
        SECRET_VARIABLES.add(names)
    else:
        SECRET_VARIABLES.update(name for name in names if isinstance(name, str))  # type: ignore[attr-defined]


def secret_env_names(data: object) -> list[str]:
    """The values of every ``*_env`` key in raw config data: the names of variables holding secrets."""
    found: list[str] = []
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, str) and key.endswith("_env") and isinstance(value, str):
                    found.append(value)
                else:
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return found


def known_secret_values() -> tuple[str, ...]:
    """The values of the secret variables set in the environment now, with the lower-cased and slugged
    forms a hint could make of them (a project name suggestion slugs what it was given)."""
    values = {os.environ.get(name, "") for name in SECRET_VARIABLES}
    forms = {
        form
        for value in values
        if len(value) >= MIN_SECRET
        for form in (value, value.lower(), re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-"))
    }
    return tuple(form for form in forms if len(form) >= MIN_SECRET)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with known secret values (``secrets``, and the values of :data:`SECRET_VARIABLES` in the
    environment) and secret-shaped strings replaced by ``***``. The one redaction every output goes through."""
    for secret in sorted({*secrets, *known_secret_values()}, key=len, reverse=True):
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
