"""`gym train`: train the model a gym.toml describes (flags override its keys, LLaMA-Factory names too)."""

from __future__ import annotations

import os

import typer

from gym.cli.output import CONFIG_AND_FLAGS, EXTRA_ARGS, console, errors, fail, load_config_or_exit


def train(
    args: list[str] | None = CONFIG_AND_FLAGS,
    nproc: int = typer.Option(
        1,
        "--nproc",
        min=1,
        help="Training processes (ranks) on this machine; [train.distributed] says how they share the model.",
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No live progress bar (logs only)."),
) -> None:
    """Train: SFT, continued pretraining, DPO, KTO, reward models, PPO or GRPO, with LoRA/QLoRA/DoRA/full/freeze."""
    config, _, _ = load_config_or_exit(args)
    if nproc > 1 and "LOCAL_RANK" not in os.environ:
        from gym.train.distributed import one_process_only
        from gym.train.launcher import launch_ranks

        refused = one_process_only(config, nproc)
        if refused:
            raise fail(refused)

        gym_args = ["train", *(args or []), *(["--no-progress"] if no_progress else [])]
        report = lambda line: errors.print(line, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
        raise typer.Exit(launch_ranks(nproc, gym_args, report))

    from gym.quiet import quiet_libraries

    quiet_libraries()
    from gym.api.factory import build_serving_app
    from gym.data.report import DataError
    from gym.model.loading import ModelError
    from gym.train.errors import ResumeError
    from gym.train.runner import run_training
    from gym.train.termination import Terminated, die_by_sigterm, sigterm_raises, where_a_rerun_resumes

    try:
        with sigterm_raises():
            result = run_training(config, show_progress=not no_progress, serve_local=build_serving_app)
    except (DataError, ModelError, ResumeError, ValueError) as error:
        raise fail(str(error)) from None
    except RuntimeError as error:
        from gym.train.launcher import PEER_LOST, lost_a_peer

        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and lost_a_peer(error):
            raise typer.Exit(PEER_LOST) from None  # the launcher names the rank that died
        raise
    except Terminated:
        if int(os.environ.get("RANK", "0")) == 0:
            where = where_a_rerun_resumes(config.output_path / "checkpoints", config.train.resume)
            errors.print(f"stopped: gym train received SIGTERM; {where}", markup=False, highlight=False,
                         soft_wrap=True)  # fmt: skip
        die_by_sigterm()
    if int(os.environ.get("RANK", "0")) == 0 and result.already_trained:
        console.print(
            f"[green]✓[/green] already trained: {result.steps} steps in {result.output_dir} match this "
            "configuration; nothing to do (set train.resume = 'never' to train again)",
            highlight=False,
        )
    elif int(os.environ.get("RANK", "0")) == 0 and result.restored_only:
        console.print(
            f"[green]✓[/green] {result.steps} steps were already trained (the run stopped after its last "
            f"checkpoint, {result.resumed_from}); wrote the result from it → {result.output_dir}",
            highlight=False,
        )
    elif int(os.environ.get("RANK", "0")) == 0:
        console.print(
            f"[green]✓[/green] trained {result.steps} steps in {result.wall_seconds:.1f}s "
            f"({result.tokens_per_second:,.0f} tok/s), final loss {result.final_loss}; {held_out(result.eval)}"
            f"{result.trainable_parameters:,} of {result.total_parameters:,} parameters trained → {result.output_dir}",
            highlight=False,
        )


def held_out(summary: dict | None) -> str:
    """``held-out (16 rows): loss 2.1 → 1.4, accuracy 0.50 → 0.94; `` or nothing without eval_fraction."""
    if not summary:
        return ""
    initial, final = summary.get("initial") or {}, summary["final"]
    parts = [
        f"{name} {initial[name]:.4g} → {final[name]:.4g}" if name in initial else f"{name} {final[name]:.4g}"
        for name in ("loss", "accuracy", "margin", "reward")
        if name in final
    ]
    return f"held-out ({summary['rows']} rows): {', '.join(parts)}; "


def register(app: typer.Typer) -> None:
    app.command(context_settings=EXTRA_ARGS)(train)
