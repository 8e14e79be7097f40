"""`gym eval`: score the trained model (and its base) with lm-eval, write eval_results.json and the card."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from gym.cli.output import CONFIG_AND_FLAGS, console, errors, fail, load_config_or_exit


def eval_command(
    args: list[str] | None = CONFIG_AND_FLAGS,
    model: str | None = typer.Option(
        None,
        "--model",
        help="Model to score instead of project.output_dir: a model or LoRA folder, or builtin:NAME.",
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        help="Where eval_results.json, README.md and .eval_results/ go (default: the --model folder, else output_dir).",
    ),
    chat_template: bool | None = typer.Option(
        None,
        "--chat-template/--no-chat-template",
        help="Render every prompt with the chat template (default: only Gym's own tasks).",
    ),
    license: str | None = typer.Option(
        None, "--license", help="License id for the model card (e.g. apache-2.0)."
    ),
    no_card: bool = typer.Option(False, "--no-card", help="Write eval_results.json only, not README.md."),
    experiences: Path | None = typer.Option(
        None,
        "--experiences",
        help="A training-free GRPO library (experiences/latest.json): score the model with it vs without it.",
    ),
) -> None:
    """Evaluate with lm-eval (eval.tasks: lm-eval names, task YAML paths, gym_reverse) and write the model card."""
    config, _, _ = load_config_or_exit(args)

    from gym.api.factory import build_serving_app
    from gym.eval import EvalError, evaluate, results_table_rich

    try:
        report = evaluate(
            config, model, chat_template=chat_template, experiences=experiences, serve_local=build_serving_app
        )
    except EvalError as error:
        raise fail(str(error)) from None
    folder = output or (Path(report.model) if Path(report.model).is_dir() else config.output_path)
    try:
        written = [report.write(folder)]
        if not no_card:
            from gym.hub.card import write_card

            written.append(write_card(report, config, folder, license=license))
    except (OSError, ValueError) as error:
        errors.print(
            f"[red]error[/red] could not write the results into {escape(str(folder))}: {escape(str(error))}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1) from None
    console.print(results_table_rich(report))
    console.print(f"[green]✓[/green] wrote {', '.join(str(p) for p in written)}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("eval", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
        eval_command
    )
