"""The Deploy / Cloud tab: the `gym deploy --dry-run` plan and the `gym launch --cloud --dryrun` SkyPilot
task, shown before anything is sent, and buttons that run them for real.

A token typed here goes into this process's environment only (under the variable the gym.toml names),
never to disk, a log or the page: every message shown is built by the deploy and launch code, which
scrub secrets.
"""

from __future__ import annotations

import os

from gym.webui.workspace import Workspace


def _secret(name: str, value: str) -> str:
    if value and value.strip():
        os.environ[name] = value.strip()
        return f"${name} set for this process (not saved anywhere). "
    return ""


def deploy(workspace: Workspace, token: str, dry_run: bool) -> str:
    """The deploy plan (dry run) or the deploy itself, as the lines `gym deploy` prints."""
    from gym.hub.push import DeployError, plan_deploy, run_deploy

    note = ""
    lines: list[str] = []
    try:
        if token:
            token_env = "HF_TOKEN"
            try:
                config = workspace.config()
                token_env = config.hub.token_env if config.hub else token_env
            except Exception:  # noqa: BLE001 - plan_deploy reports the config's problems itself
                pass
            note = _secret(token_env, token)
        plan = plan_deploy(workspace.path, dry_run=dry_run)
        if not dry_run:  # the gym.toml's promotion gates, as `gym deploy` checks them (no --force here)
            from gym.hub.promotion import gate_deploy

            gate_deploy(workspace.path, plan.model_dir, force=False, token=plan.token, echo=lines.append)
        run_deploy(plan, echo=lines.append)
    except (DeployError, ValueError) as error:
        table = "\n```\n" + "\n".join(lines) + "\n```" if lines else ""
        return note + f"✗ {error}" + table
    return note + "\n```\n" + "\n".join(lines) + "\n```"


def cloud(workspace: Workspace, dryrun: bool, secrets: str = "") -> str:
    """The checked SkyPilot task (dry run, secrets redacted) or the launch, as `gym launch --cloud` prints."""
    from gym.config import ConfigError
    from gym.launch.task import LaunchError

    note = ""
    for line in (secrets or "").split():  # NAME=value pairs: process environment only
        if "=" in line:
            name, value = line.split("=", 1)
            note += _secret(name.strip(), value)
    out: list[str] = []
    try:
        config = workspace.config()
        from gym.launch.cloud import launch_cloud

        launch_cloud(config, workspace.path, dryrun=dryrun, detach=True, echo=out.append, warn=out.append)
    except ConfigError as error:
        return f"✗ the saved gym.toml has problems:\n```\n{error}\n```"
    except LaunchError as error:
        return note + f"✗ {error}"
    except ImportError as error:
        return f"✗ launching on the cloud needs SkyPilot: pip install 'zoo-gym[cloud]' ({error.name})"
    return note + "\n```\n" + "\n".join(out) + "\n```"


def build(workspace: Workspace) -> None:
    import gradio as gr

    gr.Markdown("### Hub and Space (`gym deploy`)")
    token = gr.Textbox(label="Hub token (kept in this process's environment only)", type="password")
    with gr.Row():
        plan = gr.Button("Show the plan (dry run)", elem_id="deploy-plan")
        real = gr.Button("Deploy for real", variant="stop")
    deploy_out = gr.Markdown(elem_id="deploy-output")
    plan.click(lambda t: deploy(workspace, t, True), token, deploy_out, api_name="deploy_plan")
    real.click(lambda t: deploy(workspace, t, False), token, deploy_out, api_name="deploy")

    gr.Markdown("### Cloud (`gym launch --cloud` through SkyPilot)")
    secrets = gr.Textbox(label="Secrets the task needs, NAME=value separated by spaces (environment only)",
                         type="password")  # fmt: skip
    with gr.Row():
        task = gr.Button("Show the SkyPilot task (dry run)", elem_id="cloud-plan")
        launch = gr.Button("Launch on the cloud", variant="stop")
    cloud_out = gr.Markdown(elem_id="cloud-output")
    task.click(lambda s: cloud(workspace, True, s), secrets, cloud_out, api_name="cloud_plan")
    launch.click(lambda s: cloud(workspace, False, s), secrets, cloud_out, api_name="cloud_launch")
