"""The Gradio Blocks app of `gym webui`, and how it is served (loopback by default, auth for the network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym.webui import chat_tab, config_tab, data_tab, deploy_tab, eval_tab, train_tab
from gym.webui.workspace import Workspace

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
CSS = ".gym-preview { max-height: 640px; overflow: auto; }"


class AuthRequired(Exception):
    """Serving beyond loopback without a password; the message says how to add one."""


def build_app(path: str | Path) -> Any:
    """The Blocks app for the gym.toml at ``path`` (which may not exist yet, or be unreadable)."""
    import gradio as gr

    workspace = Workspace(path)
    with gr.Blocks(title=f"Gym · {workspace.display}") as demo:
        gr.Markdown(
            f"# Gym · `{workspace.display}`\nEvery tab reads and writes this file: what you click can be committed."
        )
        with gr.Tabs():
            with gr.Tab("Config", id="config"):
                editor = config_tab.build(workspace, demo)
            with gr.Tab("Data", id="data"):
                data_tab.build(workspace, editor)
            with gr.Tab("Train", id="train"):
                train_tab.build(workspace, editor)
            with gr.Tab("Evaluate", id="evaluate"):
                eval_tab.build(workspace, editor)
            with gr.Tab("Chat", id="chat"):
                chat_tab.build(workspace)
            with gr.Tab("Deploy / Cloud", id="deploy"):
                deploy_tab.build(workspace)
    demo.workspace = workspace
    return demo


def resolve_auth(host: str, share: bool, auth: str | None, env: dict[str, str]) -> tuple[str, str] | None:
    """The (user, password) to require, from ``--auth`` or ``$GYM_WEBUI_AUTH`` / ``$GYM_WEBUI_PASSWORD``.

    Loopback needs none; any other interface, or ``--share``, refuses to start without one: the UI runs
    training, holds tokens and writes files.
    """
    text = auth or env.get("GYM_WEBUI_AUTH")
    if not text and env.get("GYM_WEBUI_PASSWORD"):
        text = "gym:" + env["GYM_WEBUI_PASSWORD"]
    if text:
        user, sep, password = text.partition(":")
        if not sep or not user or not password:
            raise AuthRequired("--auth: expected USER:PASSWORD")
        return user, password
    if host not in LOOPBACK or share:
        where = "--share" if share else f"--host {host}"
        raise AuthRequired(
            f"{where} makes the web UI (which starts training and holds tokens) reachable from other "
            "machines: pass --auth USER:PASSWORD or set GYM_WEBUI_PASSWORD (user 'gym') or GYM_WEBUI_AUTH"
        )
    return None


def serve(path: str | Path, host: str = "127.0.0.1", port: int = 7860, share: bool = False,
          auth: tuple[str, str] | None = None) -> None:  # fmt: skip
    demo = build_app(path)
    demo.queue(default_concurrency_limit=4).launch(
        server_name=host, server_port=port, share=share, auth=auth, css=CSS, quiet=False,
        inbrowser=False, show_error=True,
    )  # fmt: skip
