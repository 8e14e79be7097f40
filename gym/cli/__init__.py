"""The `gym` command line (Typer). Heavy libraries are imported inside the commands that need them."""

from gym.cli.app import app, main

__all__ = ["app", "main"]
