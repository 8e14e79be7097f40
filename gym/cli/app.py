"""`gym` entry point: the Typer app and the commands every later layer hangs off."""

from __future__ import annotations

import sys

import typer

from gym import __version__
from gym.cli import (
    config_commands,
    eval_commands,
    history_commands,
    launch_commands,
    serve_commands,
    train_commands,
    webui_commands,
)

app = typer.Typer(
    name="gym",
    help="GitOps for fine-tuning language models: one gym.toml, validated, trained, evaluated and deployed.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gym {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Print Gym's version and exit."
    ),
) -> None:
    """GitOps for fine-tuning language models."""


config_commands.register(app)
train_commands.register(app)
eval_commands.register(app)
launch_commands.register(app)
serve_commands.register(app)
webui_commands.register(app)
history_commands.register(app)


def _add_lazy_groups() -> None:
    from gym.cli.data_commands import data_app
    from gym.cli.model_commands import model_app

    app.add_typer(model_app, name="model")
    app.add_typer(data_app, name="data")


_add_lazy_groups()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (`gym`)."""
    try:
        app(args=argv, prog_name="gym")
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
