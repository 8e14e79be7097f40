"""What every command shares: how it reads ``[gym.toml] [--flags]``, and how errors and summaries look."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

if TYPE_CHECKING:
    from gym.config import GymConfig
    from gym.config.errors import ConfigError


class RedactingConsole(Console):
    """A rich Console whose every rendered line has known secret values and secret shapes replaced by
    ``***`` (:func:`gym.config.errors.redact`): whatever key a secret was interpolated into, and whatever
    command prints it (a plan, a summary, a task YAML), it never reaches the terminal or a log."""

    def print(self, *objects: Any, **options: Any) -> None:
        """Text is redacted before it is laid out too, so a secret wrapped over two lines is still caught."""
        from gym.config.errors import redact

        super().print(*(redact(o) if isinstance(o, str) else o for o in objects), **options)

    def _render_buffer(self, buffer: Any) -> str:
        from gym.config.errors import redact

        return redact(super()._render_buffer(buffer))


# emoji=False: user text such as ':100:' in a value is printed as typed, never turned into an emoji.
console = RedactingConsole(emoji=False)
errors = RedactingConsole(stderr=True, emoji=False)

CONFIG_AND_FLAGS = typer.Argument(
    None,
    metavar="[GYM.TOML] [--KEY VALUE]...",
    help="The gym.toml (default ./gym.toml), then flags overriding its keys: --learning_rate 1e-4, "
    "--train.lora.r=8, --set eval.limit=10, or LLaMA-Factory names (--model_name_or_path, --dataset, ...).",
    show_default=False,
)
"""The positional argument of every command that reads a config: a path, then override flags."""

EXTRA_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}
"""Typer context settings that let override flags through to :data:`CONFIG_AND_FLAGS`."""


def report_config_error(error: ConfigError) -> None:
    """Print every config issue as ``file:line:col: key: message`` (plain, so editors can jump to it)."""
    from gym.config.errors import redact

    for issue in error.issues:
        errors.print(redact(str(issue)), markup=False, highlight=False, soft_wrap=True)
    count = len(error.issues)
    errors.print(f"[red]{count} problem{'s' if count != 1 else ''} found[/red]")


def load_config_or_exit(args: list[str] | None) -> tuple[GymConfig, Path | None, list[str]]:
    """(config, its path or None for flags only, the flags) from ``[gym.toml] [--flags]``; exit 1 on errors."""
    from gym.config import ConfigError, config_from_args
    from gym.config.cli_args import split_config_and_flags

    path, flags = split_config_and_flags(args or [])
    notes: list[str] = []
    try:
        config = config_from_args(path, flags, notes=notes)
    except ConfigError as error:
        report_config_error(error)
        raise typer.Exit(1) from None
    # LLaMA-Factory options that mean nothing in Gym, each said once; keys honoured in an older place.
    for note in [*notes, *config.notes]:
        errors.print(f"note {note}", markup=False, highlight=False, soft_wrap=True)
    return config, path, flags


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error <message>`` and return the Exit to raise.

    The user's text is never read as markup, and control characters in it (ANSI escapes from data or
    file names) are shown rather than sent to the terminal.
    """
    from rich.markup import escape

    from gym.config.errors import redact
    from gym.failures import printable

    errors.print(f"[red]error[/red] {escape(printable(redact(message)))}", highlight=False, soft_wrap=True)
    return typer.Exit(code)
