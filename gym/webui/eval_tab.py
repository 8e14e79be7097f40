"""The Evaluate tab: run `gym eval` on the saved gym.toml, then the base → tuned table, a bar chart per
task and the model card it wrote, all read from the files the command writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from gym.webui.workspace import Workspace


def results(output: Path) -> tuple[str, Any, str]:
    """(table markdown, scores DataFrame, model card markdown) from ``output``'s eval_results.json."""
    import pandas as pd

    from gym.eval.report import RESULTS_FILE, EvalReport, results_table_markdown

    empty = pd.DataFrame({"score": [], "value": [], "model": []})
    if not (output / RESULTS_FILE).is_file():
        return f"no {RESULTS_FILE} in {output} yet: press Evaluate", empty, ""
    report = EvalReport.read(output)
    rows = []
    for score in report.results:
        label = f"{score.task} · {score.label}"
        if score.base_value is not None:
            rows.append({"score": label, "value": score.base_value, "model": "base"})
        if score.value is not None:
            rows.append({"score": label, "value": score.value, "model": "tuned"})
    card_path = output / "README.md"
    card = card_path.read_text(encoding="utf-8") if card_path.is_file() else "(no model card written)"
    if card.startswith("---\n") and "\n---\n" in card[4:]:  # the Hub's YAML metadata is not for reading
        card = card[4:].split("\n---\n", 1)[1]
    title = f"**{Path(report.model).name}**" + (
        f" vs base **{report.base_model}**" if report.base_model else ""
    )
    return title + "\n\n" + results_table_markdown(report), pd.DataFrame(rows) if rows else empty, card


def evaluate(workspace: Workspace, text: str) -> tuple[str, str, Any, str]:
    """Run `gym eval FILE` (the command itself, in a subprocess) and show what it wrote."""
    from gym.config import ConfigError

    if workspace.unsaved(text):
        return "✗ the editor has unsaved changes: press Save on the Config tab first", "", None, ""
    try:
        output = workspace.config().output_path
    except ConfigError as error:
        return f"✗ the saved gym.toml has problems:\n```\n{error}\n```", "", None, ""
    done = subprocess.run(
        [sys.executable, "-m", "gym", "eval", str(workspace.path)], cwd=workspace.path.parent,
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        return (
            "✗ `gym eval` failed: " + (lines[-1] if lines else f"exit code {done.returncode}"),
            "",
            None,
            "",
        )
    table, scores, card = results(output)
    return f"✓ `gym eval {workspace.display}` finished", table, scores, card


def load(workspace: Workspace) -> tuple[str, Any, str]:
    from gym.config import ConfigError

    try:
        return results(workspace.config().output_path)
    except ConfigError:
        return "", None, ""


def build(workspace: Workspace, editor: Any) -> None:
    import gradio as gr

    with gr.Row():
        button = gr.Button("Evaluate (gym eval)", variant="primary", elem_id="evaluate")
        show = gr.Button("Show last results")
    message = gr.Markdown(elem_id="eval-message")
    table = gr.Markdown(elem_id="eval-table")
    chart = gr.BarPlot(x="score", y="value", color="model", title="base vs tuned", label="scores")
    with gr.Accordion("Model card (README.md)", open=False):
        card = gr.Markdown(elem_id="model-card")
    button.click(lambda t: evaluate(workspace, t), editor, [message, table, chart, card], api_name="evaluate")
    show.click(lambda: load(workspace), None, [table, chart, card], api_name="eval_results")
