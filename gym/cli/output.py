"""Console helpers shared by the commands: one place decides how errors and summaries look."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from gym.config.errors import ConfigError

console = Console()
errors = Console(stderr=True)


def report_config_error(error: ConfigError) -> None:
    """Print every config issue as ``file:line:col: key: message`` (plain, so editors can jump to it)."""
    for issue in error.issues:
        errors.print(str(issue), markup=False, highlight=False, soft_wrap=True)
    count = len(error.issues)
    errors.print(f"[red]{count} problem{'s' if count != 1 else ''} found[/red]")
