"""The one error type a user ever sees from loading a config, and how it prints."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Shapes of well-known secrets; any match is replaced before a message is shown or raised.
SECRET_PATTERNS = re.compile(
    r"(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,})"
)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with known secret values and secret-shaped strings replaced by ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return SECRET_PATTERNS.sub("***", text)


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config: where it is (file, line, column, dotted key) and what is wrong."""

    source: str
    key: str
    message: str
    line: int | None = None
    column: int | None = None

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
