"""`gym data preview` and `gym data prepare`: look at the training data exactly as the model will."""

from __future__ import annotations

import typer

from gym.cli.output import CONFIG_AND_FLAGS, console, fail, load_config_or_exit

data_app = typer.Typer(
    help="Training data: preview samples and loss masks, prepare (tokenize + cache).", no_args_is_help=True
)


def _prepare(args: list[str] | None, use_cache: bool):  # -> (PreparedData, tokenizer)
    config, _, _ = load_config_or_exit(args)
    from gym.data.prepare import prepare_data
    from gym.data.report import DataError
    from gym.model.loading import ModelError, load_tokenizer

    try:
        with console.status("loading the tokenizer"):
            tokenizer = load_tokenizer(config)
        return prepare_data(config, tokenizer, use_cache=use_cache), tokenizer
    except (DataError, ModelError) as error:
        raise fail(str(error)) from None


@data_app.command("preview")
def preview_command(
    args: list[str] | None = CONFIG_AND_FLAGS,
    count: int = typer.Option(3, "--count", "-n", min=0, help="Samples to show."),
    no_cache: bool = typer.Option(
        False, "--no-cache", help="Prepare again even when a cached result exists."
    ),
) -> None:
    """Show the first samples rendered through the chat template, trained tokens highlighted, and the stats."""
    prepared, tokenizer = _prepare(args, use_cache=not no_cache)
    from gym.data.preview import preview

    console.print(preview(prepared, tokenizer, count))


@data_app.command("prepare")
def prepare_command(args: list[str] | None = CONFIG_AND_FLAGS) -> None:
    """Load, template, tokenize and cache the datasets now (training then starts without this step)."""
    prepared, _ = _prepare(args, use_cache=True)
    from gym.data.preview import stats_table

    console.print(*prepared.reports, stats_table(prepared))
