"""`gym webui`: the whole workflow in a browser, on the same gym.toml (Gradio is imported only here)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from gym.cli.output import console, fail


def webui(
    config: Path = typer.Argument(
        Path("gym.toml"), help="The gym.toml to open (created on Save if missing)."
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Interface to bind; other than loopback needs --auth."
    ),
    port: int = typer.Option(7860, "--port", help="TCP port."),
    share: bool = typer.Option(False, "--share", help="Also open a public gradio.live link (needs --auth)."),
    auth: str | None = typer.Option(
        None,
        "--auth",
        help="USER:PASSWORD required to open the UI (or $GYM_WEBUI_AUTH / $GYM_WEBUI_PASSWORD).",
        show_default=False,
    ),
) -> None:
    """Open the web UI: Config, Data, Train, Evaluate, Chat and Deploy tabs over one gym.toml."""
    from gym.webui.app import AuthRequired, resolve_auth

    try:
        credentials = resolve_auth(host, share, auth, dict(os.environ))
    except AuthRequired as error:
        raise fail(str(error), 2) from None
    try:
        from gym.webui.app import serve
    except ImportError as error:
        raise fail(f"gym webui needs Gradio: pip install 'zoo-gym[webui]' ({error.name})") from None
    console.print(
        f"gym webui: {config} on http://{host}:{port}" + (" (password required)" if credentials else "")
    )
    serve(config, host=host, port=port, share=share, auth=credentials)


def register(app: typer.Typer) -> None:
    app.command()(webui)
