"""`gym data preview` and `gym data prepare`: look at the training data exactly as the model will."""

from __future__ import annotations

import typer

from gym.cli.output import CONFIG_AND_FLAGS, console, fail, load_config_or_exit

data_app = typer.Typer(
    help="Training data: preview samples and loss masks, prepare (tokenize + cache).", no_args_is_help=True
)


def _prepare(
    args: list[str] | None, use_cache: bool, check: bool = True
):  # -> (PreparedData, tokenizer, config)
    config, _, _ = load_config_or_exit(args)
    from gym.data.prepare import prepare_data
    from gym.data.report import DataError
    from gym.model.loading import ModelError, load_tokenizer
    from gym.model.vision import model_vision

    try:
        with console.status("loading the tokenizer"):
            tokenizer = load_tokenizer(config)
        prepared = prepare_data(
            config, tokenizer, use_cache=use_cache, check=check, vision=model_vision(config)
        )
        return prepared, tokenizer, config
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
    prepared, tokenizer, config = _prepare(args, use_cache=not no_cache, check=False)
    from rich.text import Text

    from gym.data.prepare import checked
    from gym.data.preview import preview
    from gym.data.report import DataError
    from gym.failures import printable

    console.print(preview(prepared, tokenizer, count))
    try:
        checked(prepared, config)
    except DataError as error:  # shown, not fatal: the preview is where the user finds out why
        console.print(Text.assemble(("training would stop: ", "bold yellow"), printable(str(error))))


@data_app.command("prepare")
def prepare_command(args: list[str] | None = CONFIG_AND_FLAGS) -> None:
    """Load, template, tokenize and cache the datasets now (training then starts without this step)."""
    prepared, _, _ = _prepare(args, use_cache=True)
    from gym.data.preview import stats_table

    console.print(*prepared.reports, stats_table(prepared))
