"""Run Gym's serving commands as a CLI in a subprocess, without depending on gym/cli/app.py wiring."""

import typer

from gym.cli.serve_commands import register

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
register(app)

if __name__ == "__main__":
    app()
