"""`gym init`, `gym validate` and `gym schema`: the commands that need nothing but the config layer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand

from gym.cli.output import (
    CONFIG_AND_FLAGS,
    EXTRA_ARGS,
    console,
    errors,
    fail,
    load_config_or_exit,
    report_config_error,
)

if TYPE_CHECKING:
    from gym.config import GymConfig


def _unexpanded(config: GymConfig, text: str) -> str:
    """``text`` with values that came from ``${VAR}`` shown as the reference, and secret shapes redacted."""
    from gym.config.errors import redact

    expanded = config.model_dump(mode="json")
    for path, original in config.env_references.items():
        value: object = expanded
        for part in path:
            try:
                value = value[part]  # type: ignore[index]
            except (KeyError, IndexError, TypeError):
                value = None
                break
        if isinstance(value, str) and len(value) >= 4:
            text = text.replace(value, original)
    return redact(text)


def _summary(config: GymConfig) -> None:
    from rich.markup import escape
    from rich.table import Table

    from gym.config.errors import shorten_long_values

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold cyan")
    table.add_column()

    def add(label: str, text: str) -> None:
        # The user's text: never rich markup, never a secret, never a megabyte.
        table.add_row(label, escape(shorten_long_values(_unexpanded(config, text))))

    model = config.model
    add("project", f"{config.project.name}  →  {config.project.output_dir}")
    add(
        "model",
        f"{model.name_or_path}  (template {model.template}, dtype {model.dtype}"
        + (f", {model.quantization}" if model.quantization != "none" else "")
        + ")",
    )
    for dataset in config.datasets:
        source = dataset.path if dataset.path is not None else f"hub:{dataset.hub}"
        extra = f", max {dataset.max_samples} rows" if dataset.max_samples else ""
        add("dataset", f"{dataset.name}: {source}  ({dataset.format}, split {dataset.split}{extra})")
    train = config.train
    length = f"{train.max_steps} steps" if train.max_steps > 0 else f"{train.epochs:g} epochs"
    add(
        "train",
        f"{train.method} + {train.adapter}, {length}, lr {train.learning_rate:g}, "
        f"batch {train.batch_size}×{train.gradient_accumulation_steps}, max_length {train.max_length}"
        + (", training-free" if train.grpo.training_free else ""),
    )
    add("eval", ", ".join(config.eval.tasks) if config.eval.tasks else "none")
    compute = config.compute
    if compute is not None:
        where = compute.infra or "any cloud"
        add(
            "compute",
            f"{' or '.join(compute.accelerators)} × {compute.num_nodes} node(s) on {where}"
            + (", spot" if compute.use_spot else "")
            + (", managed job" if compute.managed else ", cluster"),
        )
    else:
        add("compute", "local (no [compute]; `gym launch --cloud` needs one)")
    if config.hub is not None:
        add("hub", f"{config.hub.repo_id} (push {config.hub.push}, token from ${config.hub.token_env})")
    if config.space is not None:
        add("space", f"{config.space.repo_id} ({config.space.hardware}, {config.space.backend})")
    console.print(table)


def _warnings(config: GymConfig) -> list[str]:
    """Things that are valid but probably not what the user wants; shown, never fatal."""
    from gym.config.errors import shorten

    notes = []
    for index, dataset in enumerate(config.datasets):
        if dataset.path is None:
            continue
        try:
            exists = config.resolve_path(dataset.path).exists()
        except (OSError, RuntimeError):  # longer than the file system's path limit, a symlink loop
            notes.append(
                f"datasets.{index}.path: {shorten(dataset.path)} cannot be looked up (too long a path?)"
            )
            continue
        if not exists:
            notes.append(f"datasets.{index}.path: {dataset.path} does not exist (yet)")
    from gym.gitops.pins import unpinned_notes

    notes += unpinned_notes(config)  # a Hub input on a branch trains on whatever was pushed last
    compute = config.compute
    if compute is not None and compute.use_spot and not compute.managed:
        notes.append(
            "compute.use_spot: spot instances without managed = true are not recovered after preemption"
        )
    return notes


def validate(
    args: list[str] | None = CONFIG_AND_FLAGS,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing when the file is valid."),
    online: bool = typer.Option(
        False,
        "--online",
        help="Also ask the Hub (with the token): the Space's hardware against the owner's "
        "plan, and a Hugging Face Jobs flavor against what the account is offered.",
    ),
) -> None:
    """Check a gym.toml (and any override flags); exit 1 listing every problem with file:line:col."""
    loaded, config, _ = load_config_or_exit(args)
    from gym.data.vision_check import text_model_with_images
    from gym.model.vision import model_vision

    refusal = text_model_with_images(loaded, model_vision(loaded))
    if refusal is not None:
        raise fail(refusal)
    if online:
        _check_online(loaded)
    if quiet:
        return
    subject = f"{config} is valid" if config is not None else "the command-line flags describe a valid run"
    from rich.markup import escape

    console.print(f"[green]✓[/green] {escape(subject)}", soft_wrap=True)  # one line, the path as typed
    _summary(loaded)
    from gym.config.errors import shorten_long_values

    for note in _warnings(loaded):
        shown = escape(shorten_long_values(_unexpanded(loaded, note)))
        errors.print(f"[yellow]warning[/yellow] {shown}", highlight=False, soft_wrap=True)


def _check_online(config: Any) -> None:
    """`gym validate --online`: what only the Hub can say, before anything runs (offline validation stays offline)."""
    import os

    from gym.hub.plans import PlanError, check_space_plan

    token_env = config.hub.token_env if config.hub else "HF_TOKEN"
    if not os.environ.get(token_env):
        raise fail(f"--online needs a Hub token: ${token_env} is not set")
    try:
        note = check_space_plan(config)
    except PlanError as error:
        raise fail(str(error)) from None
    if note:
        console.print(f"Space hardware {note}", markup=False, highlight=False, soft_wrap=True)
    compute = config.compute
    if compute is not None and compute.provider == "hf-jobs":
        from huggingface_hub import HfApi

        from gym.launch.hf_jobs.flavors import account_problem, hub_flavors

        api = HfApi(token=os.environ[token_env])
        problem = account_problem(api)
        if problem:
            raise fail(f"--online: {problem}")
        offered = hub_flavors(api)
        if offered is None:
            raise fail(
                "--online: cannot ask the Hub which Jobs flavors this account is offered; retry when it is reachable"
            )
        if compute.flavor not in offered:
            raise fail(f"compute.flavor = {compute.flavor!r} is not offered to this account by Hugging Face Jobs "
                       f"(it offers {', '.join(sorted(offered)) or 'nothing'})")  # fmt: skip
        console.print(f"Jobs flavor {compute.flavor}: offered, ${offered[compute.flavor]:.2f}/h", markup=False,
                      highlight=False)  # fmt: skip


def init(
    path: Path = typer.Argument(Path("gym.toml"), help="Where to write the starter file."),
    model: str = typer.Option(
        "Qwen/Qwen3-0.6B", "--model", "-m", help="Base model: Hub id, folder or builtin:tiny."
    ),
    method: str = typer.Option("sft", "--method", help="sft | pt | dpo | kto | rm | ppo | grpo"),
    name: str | None = typer.Option(None, "--name", help="Project name (default: the folder's name)."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite an existing file."),
    from_yaml: Path | None = typer.Option(
        None,
        "--from",
        help="Convert a LLaMA-Factory or axolotl training YAML instead of writing the starter file.",
    ),
    dataset_dir: str | None = typer.Option(
        None,
        "--dataset-dir",
        help="With --from: folder of LLaMA-Factory's dataset_info.json (default: the YAML's dataset_dir, else ./data).",
    ),
    recipe: str | None = typer.Option(
        None,
        "--recipe",
        help="Start from a recipe (a gym.toml for one model, method and adapter, with the GPUs it needs); "
        "--recipe alone lists them.",
    ),
) -> None:
    """Write a commented starter gym.toml that validates (or convert one with --from, or start from a recipe)."""
    import re

    from gym.config import ConfigError
    from gym.config.root import FORMATS_BY_METHOD
    from gym.config.starter import starter_toml

    if from_yaml is not None:
        _init_from(from_yaml, path, force, dataset_dir)
        return
    if recipe == "":
        _list_recipes()
        return

    if method not in FORMATS_BY_METHOD:
        errors.print(
            f"--method: expected one of {', '.join(FORMATS_BY_METHOD)}, got {method!r}", highlight=False
        )
        raise typer.Exit(2)
    if path.exists() and not force:
        errors.print(f"{path} already exists; pass --force to overwrite it", highlight=False)
        raise typer.Exit(1)
    folder_name = path.resolve().parent.name
    project = name or re.sub(r"[^a-z0-9]+", "-", folder_name.lower()).strip("-")[:64] or "my-model"
    if recipe is not None:
        from gym.config.starter import UnknownRecipe, recipe_toml

        try:
            text = recipe_toml(recipe, project)
        except UnknownRecipe as error:
            errors.print(str(error), markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        what = f"recipe {recipe}"
    else:
        text, what = starter_toml(name=project, model=model, method=method), f"{method} on {model}"
    try:
        from gym.config.loader import build_config, parse_toml

        data, positions, source = parse_toml(text, str(path))
        build_config(data, source=source, positions=positions)
    except ConfigError as error:
        report_config_error(error)
        raise typer.Exit(1) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    console.print(f"[green]✓[/green] wrote {path} ({what}); next: edit it, then `gym validate {path}`")


class _InitCommand(TyperCommand):
    """`gym init`, where a bare ``--recipe`` (no name after it) asks for the list of recipes."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        args = list(args)
        for index, arg in enumerate(args):
            if arg == "--recipe" and (index + 1 == len(args) or args[index + 1].startswith("-")):
                args.insert(index + 1, "")  # the empty name: list them
                break
        return super().parse_args(ctx, args)


def _list_recipes() -> None:
    """`gym init --recipe`: each recipe's name and its one-line summary."""
    from gym.config.starter import recipes

    found = recipes()
    width = max(map(len, found), default=0)
    for recipe, summary in found.items():
        console.print(f"{recipe:<{width}}  {summary}", markup=False, highlight=False, soft_wrap=True)
    console.print("write one with: gym init --recipe NAME [PATH]", markup=False, highlight=False)


def _init_from(source: Path, path: Path, force: bool, dataset_dir: str | None) -> None:
    """`gym init --from FILE.yaml`: convert, validate, write, and list what was left behind."""
    from gym.config import ConfigError
    from gym.config.migrate import convert_file

    if path.exists() and not force:
        errors.print(f"{path} already exists; pass --force to overwrite it", markup=False, highlight=False)
        raise typer.Exit(1)
    try:
        conversion, text = convert_file(source, path, dataset_dir)
    except ConfigError as error:
        report_config_error(error)
        raise typer.Exit(1) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    from gym.config.migrate.render import TOOL_NAMES

    tool = TOOL_NAMES[conversion.tool]
    console.print(
        f"wrote {path} from {source} ({tool}); next: `gym validate {path}`", markup=False, highlight=False
    )
    from gym.config.migrate.convert import first_of

    for items, line, tail in ((conversion.ignored, "note {}: ignored ({})", "note {} keys ignored"),
                              (conversion.not_carried, "not carried over {}: {}", "{} keys not carried over")):  # fmt: skip
        shown, more = first_of(items)  # 100,000 left-behind keys are not 100,000 lines
        for key, reason in shown:
            errors.print(line.format(key, reason), markup=False, highlight=False, soft_wrap=True)
        if more:
            errors.print(tail.format(more), markup=False, highlight=False, soft_wrap=True)


def schema(
    markdown: bool = typer.Option(
        False, "--markdown", help="Print the reference page (docs/gym-toml.md) instead."
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
) -> None:
    """Print the JSON Schema of gym.toml (for editors), or its Markdown reference."""
    from gym.config.schema_docs import json_schema
    from gym.config.schema_docs import markdown as reference

    text = reference() if markdown else json.dumps(json_schema(), indent=2) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
        console.print(f"[green]✓[/green] wrote {output}")


def register(app: typer.Typer) -> None:
    app.command(context_settings=EXTRA_ARGS)(validate)
    app.command(cls=_InitCommand)(init)
    app.command()(schema)
