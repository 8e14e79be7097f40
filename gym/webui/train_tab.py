"""The Train tab: start, stop and resume local runs of the saved gym.toml; live plots from the run's files."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from gym.webui import runs
from gym.webui.workspace import Workspace


def _output_dir(workspace: Workspace) -> Path:
    return workspace.config().output_path


def _unsaved(workspace: Workspace, text: str) -> str | None:
    if workspace.loaded_text is None:
        return f"✗ {workspace.load_error}"
    if workspace.unsaved(text):
        return "✗ the editor has unsaved changes: press Save on the Config tab first, so the run trains what the file says"
    return None


def start(workspace: Workspace, text: str, resume_only: bool = False) -> str:
    """Start (or resume) `gym train` on the saved file; the sentence shown under the buttons."""
    from gym.config import ConfigError

    problem = _unsaved(workspace, text)
    if problem:
        return problem
    try:
        config = workspace.config()
        missing = [
            f"datasets.{index}.path: {dataset.path} does not exist ({config.resolve_path(dataset.path)})"
            for index, dataset in enumerate(config.datasets)
            if dataset.path is not None and not config.resolve_path(dataset.path).exists()
        ]
        if missing:
            return "✗ nothing started: " + "; ".join(missing) + " — fix the path on the Config tab"
        output = config.output_path
        status = runs.start_run(workspace.path, output, resume_only=resume_only)
    except ConfigError as error:
        return "✗ the saved gym.toml has problems:\n\n```\n" + str(error) + "\n```"
    except (runs.RunError, OSError) as error:
        return f"✗ {error}"
    complete = [step for step, done in status.checkpoints if done]
    where = f", resuming from checkpoint-{complete[-1]}" if complete else ""
    return f"▶ started `gym train {workspace.display}` (pid {status.pid}){where} → {output}"


def stop(workspace: Workspace, force: bool = False) -> str:
    from gym.config import ConfigError

    try:
        config = workspace.config()
        if not force and (config.train.method == "ppo" or config.train.grpo.training_free):
            return (
                "✗ this method's training loop does not take stop requests between steps: use Force stop "
                "(the newest complete checkpoint is kept and Resume continues from it)"
            )
        return "■ " + runs.stop_run(config.output_path, force=force)
    except (ConfigError, runs.RunError, OSError) as error:
        return f"✗ {error}"


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA —"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"ETA {minutes}m {secs:02d}s" if minutes else f"ETA {secs}s"


def progress_html(status: runs.RunStatus) -> str:
    percent = round(100 * status.fraction)
    detail = f"step {status.step} / {status.max_steps or '?'} · {percent}% · {_eta(status.eta_seconds)}"
    return (
        f'<div id="run-progress" data-state="{status.state}" data-step="{status.step}">'
        f'<progress value="{status.step}" max="{status.max_steps or 1}" style="width:100%;height:18px"></progress>'
        f"<div><b>{html.escape(status.state)}</b> · {detail}</div>"
        f"<div>{html.escape(status.message)}</div></div>"
    )


def status_json(workspace: Workspace) -> dict[str, Any]:
    """The run's state as data (for scripts and tests through gradio_client)."""
    from gym.config import ConfigError

    try:
        status = runs.run_status(_output_dir(workspace))
    except ConfigError as error:
        return {"state": "invalid config", "message": str(error)}
    return {
        "output_dir": str(status.output_dir), "state": status.state, "step": status.step,
        "max_steps": status.max_steps, "eta_seconds": status.eta_seconds, "message": status.message,
        "checkpoints": [{"step": step, "complete": done} for step, done in status.checkpoints],
        "points": len(status.curve),
    }  # fmt: skip


def refresh(workspace: Workspace) -> tuple[Any, ...]:
    """Progress bar, three plots, the runs table and the log tail."""
    import pandas as pd

    from gym.config import ConfigError

    try:
        output = _output_dir(workspace)
    except ConfigError:
        empty = pd.DataFrame({"step": [], "value": []})
        return "<div id='run-progress'>the saved gym.toml has problems</div>", empty, empty, empty, None, ""
    status = runs.run_status(output)
    frame = pd.DataFrame(status.curve or [{"step": 0}])

    def series(column: str) -> Any:
        if column not in frame:
            return pd.DataFrame({"step": [], column: []})
        return frame[["step", column]].dropna()

    table = [
        [str(run.output_dir), run.state, run.step, ", ".join(f"{s}{'' if ok else ' (incomplete)'}" for s, ok in run.checkpoints) or "—", run.message]
        for run in runs.list_runs([output.parent, output])
    ]  # fmt: skip
    runs_frame = pd.DataFrame(table, columns=["output_dir", "state", "step", "checkpoints", "message"])
    return (progress_html(status), series("loss"), series("learning_rate"), series("tokens_per_second"),
            runs_frame, runs.log_tail(output))  # fmt: skip


def build(workspace: Workspace, editor: Any) -> None:
    import gradio as gr

    gr.Markdown(
        "Runs `gym train` on the **saved** gym.toml in its own process: it keeps training when this page "
        "reloads. Stop saves a checkpoint first; Resume continues from the newest complete checkpoint."
    )
    with gr.Row():
        start_button = gr.Button("Start training", variant="primary", elem_id="start-run")
        resume_button = gr.Button("Resume")
        stop_button = gr.Button("Stop (checkpoint first)", variant="stop", elem_id="stop-run")
        kill_button = gr.Button("Force stop")
    message = gr.Markdown(elem_id="run-message")
    progress = gr.HTML(elem_id="progress-box")
    with gr.Row():
        loss = gr.LinePlot(x="step", y="loss", title="loss", label="loss")
        rate = gr.LinePlot(x="step", y="learning_rate", title="learning rate", label="learning rate")
        speed = gr.LinePlot(x="step", y="tokens_per_second", title="tokens / second", label="tokens/s")
    table = gr.Dataframe(label="Runs (output_dir folders next to this one)", interactive=False)
    log = gr.Code(language=None, label="train.log (last lines)", interactive=False, lines=8)
    state = gr.JSON(visible=False)
    outputs = [progress, loss, rate, speed, table, log]

    start_button.click(lambda t: start(workspace, t), editor, message, api_name="start_run")
    resume_button.click(lambda t: start(workspace, t, True), editor, message, api_name="resume_run")
    stop_button.click(lambda: stop(workspace), None, message, api_name="stop_run")
    kill_button.click(lambda: stop(workspace, True), None, message, api_name="force_stop_run")
    gr.Button("Refresh", size="sm").click(lambda: refresh(workspace), None, outputs, api_name="refresh_runs")
    timer = gr.Timer(1.5)
    timer.tick(lambda: refresh(workspace), None, outputs, api_visibility="private", show_progress="hidden")
    # status as JSON for clients (a hidden component, so the endpoint has an output)
    gr.Button("status", visible=False).click(
        lambda: status_json(workspace), None, state, api_name="run_status"
    )
