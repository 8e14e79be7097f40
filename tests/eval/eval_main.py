"""`gym eval` as its own program for the tests (the command is registered into gym/cli/app.py separately)."""

import typer

from gym.cli.eval_commands import register

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.callback()
def _root() -> None:
    """Subcommands only."""


register(app)

if __name__ == "__main__":
    app()
