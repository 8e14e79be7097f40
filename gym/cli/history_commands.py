"""`gym history`, `gym rollback`, `gym pin` and `gym outdated`: GitOps in both directions (gym/gitops/).

Each reads a gym.toml's ``[hub]`` (history, rollback) or its Hub inputs (pin, outdated); every failure is
one sentence and exit 1, never a traceback or a token.
"""

from __future__ import annotations

import json
import os

import typer

from gym.cli.output import CONFIG_AND_FLAGS, EXTRA_ARGS, console, fail, load_config_or_exit


def _say(text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def history(
    args: list[str] | None = CONFIG_AND_FLAGS,
    as_json: bool = typer.Option(False, "--json", help="Print the promotions as JSON."),
) -> None:
    """List the promotions of the \\[hub] repository: Hub commit, date, source commit/PR, gates, forced."""
    from gym.gitops.history import HistoryError, history_lines, read_history
    from gym.gitops.history import as_json as promotions_json

    config, _, _ = load_config_or_exit(args)
    if config.hub is None:
        raise fail("gym history needs a [hub] table naming the model repository (hub.repo_id)")
    try:
        head, promotions = read_history(
            config.hub.repo_id, os.environ.get(config.hub.token_env), config.hub.token_env
        )
    except HistoryError as error:
        raise fail(str(error)) from None
    if as_json:
        typer.echo(json.dumps(promotions_json(promotions, head), indent=2))
        return
    for line in history_lines(config.hub.repo_id, head, promotions):
        _say(line)


def rollback(
    args: list[str] | None = CONFIG_AND_FLAGS,
    to: str | None = typer.Option(
        None, "--to", help="The Hub commit to serve again (default: the promotion before the current one)."
    ),
    reason: str = typer.Option("", "--reason", help="Why, recorded in the rollback's Hub commit."),
    no_wait: bool = typer.Option(
        False, "--no-wait", help="Do not follow the Space until it runs and answers."
    ),
) -> None:
    """Serve an earlier promoted model again: a new Hub commit restoring its files, and the Space pointed at it."""
    from gym.gitops.rollback import RollbackError
    from gym.gitops.rollback import rollback as roll_back

    config, _, _ = load_config_or_exit(args)
    try:
        roll_back(config, to=to, reason=reason, wait=not no_wait, echo=_say)
    except RollbackError as error:
        raise fail(str(error)) from None


def pin(args: list[str] | None = CONFIG_AND_FLAGS) -> None:
    """Write the Hub commits the base model and datasets are at now into gym.toml (model.revision, datasets[].revision)."""
    from gym.gitops.pins import PinError, hub_inputs, pins, write_moves

    config, path, _ = load_config_or_exit(args)
    if path is None:
        raise fail("gym pin writes into a gym.toml: name one (or run it where ./gym.toml is)")
    try:
        moves = pins(config)
        if not moves:
            _say(f"{path}: every Hub input is pinned to a commit already" if hub_inputs(config)
                 else f"{path}: no Hub model or dataset to pin")  # fmt: skip
            return
        write_moves(path, moves)
    except PinError as error:
        raise fail(str(error)) from None
    for move in moves:
        _say(f"pinned {move.line()}")


def outdated(
    args: list[str] | None = CONFIG_AND_FLAGS,
    write: bool = typer.Option(False, "--write", help="Bump the moved pins in gym.toml."),
    as_json: bool = typer.Option(False, "--json", help="Print the moves as JSON."),
) -> None:
    """Compare the pinned Hub revisions with the Hub (and lm-eval with the one that scored the last run)."""
    from gym.gitops.pins import PinError, lm_eval_note, write_moves
    from gym.gitops.pins import outdated as find_outdated

    config, path, _ = load_config_or_exit(args)
    try:
        moves, loose = find_outdated(config)
        if write and moves:
            if path is None:
                raise fail("gym outdated --write writes into a gym.toml: name one")
            write_moves(path, moves)
    except PinError as error:
        raise fail(str(error)) from None
    note = lm_eval_note(config)
    if as_json:
        typer.echo(json.dumps({
            "moved": [{"key": m.input.key, "repo": m.input.repo, "old": m.input.revision, "new": m.new} for m in moves],
            "unpinned": [{"key": i.key, "repo": i.repo, "revision": i.revision} for i in loose],
            "lm_eval": note,
        }, indent=2))  # fmt: skip
        return
    for move in moves:
        _say(f"{'bumped' if write else 'moved'} {move.line()}")
    for item in loose:
        _say(f"unpinned {item.key}  {item.repo}  ({item.revision or 'main'}): `gym pin` pins it")
    if note:
        _say(note)
    if not moves and not loose and not note:
        _say(f"{path or 'the config'}: every pinned input is at the Hub's latest commit")


def register(app: typer.Typer) -> None:
    for command in (history, rollback, pin, outdated):
        app.command(context_settings=EXTRA_ARGS)(command)
