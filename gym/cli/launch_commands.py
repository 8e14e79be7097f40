"""`gym launch`, `gym status` and `gym logs`: running a gym.toml on the cloud and following it.

SkyPilot is imported inside :mod:`gym.launch.cloud` only when one of these commands runs, so
`gym --help` and `gym validate` stay fast. Every user mistake ends as one sentence and exit 1 (2 for
usage), never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gym.cli.output import CONFIG_AND_FLAGS, EXTRA_ARGS, console, errors, fail, load_config_or_exit

if TYPE_CHECKING:
    from gym.config import GymConfig


def _plain(stream: Any) -> Callable[[str], None]:
    return lambda text: stream.print(text, markup=False, highlight=False, soft_wrap=True)


def launch(
    args: list[str] | None = CONFIG_AND_FLAGS,
    cloud: bool = typer.Option(
        False, "--cloud", help="Run on the cloud through SkyPilot, as \\[compute] says."
    ),
    dryrun: bool = typer.Option(
        False,
        "--dryrun",
        "--dry-run",
        help="Print the checked SkyPilot task (secrets redacted); launch nothing.",
    ),
    detach: bool = typer.Option(
        False, "--detach", "-d", help="Return once the launch is submitted, without streaming its progress."
    ),
    force: bool = typer.Option(False, "--force", help="Local run: redo stages that already finished."),
) -> None:
    """Run the whole pipeline: train → eval → card → push + Space, here (default) or with --cloud through SkyPilot."""
    config, path, flags = load_config_or_exit(args)
    if not cloud:
        _launch_local(config, force)
        return
    from gym.launch.task import LaunchError

    if config.compute is not None and config.compute.provider == "hf-jobs":
        from gym.launch.hf_jobs.jobs import launch_hf_job

        try:
            launch_hf_job(config, path or Path("gym.toml"), dryrun=dryrun, flags=flags, echo=_plain(console),
                          warn=_plain(errors))  # fmt: skip
        except LaunchError as error:
            raise fail(str(error)) from None
        return
    try:
        from gym.launch.cloud import launch_cloud

        launch_cloud(
            config, path, dryrun=dryrun, flags=flags, detach=detach, echo=_plain(console), warn=_plain(errors)
        )
    except LaunchError as error:
        raise fail(str(error)) from None
    except ImportError as error:
        raise fail(
            f"gym launch --cloud needs SkyPilot: pip install 'zoo-gym[cloud]' ({error.name})"
        ) from None


def _launch_local(config: GymConfig, force: bool) -> None:
    from gym.data.report import DataError
    from gym.hub.push import DeployError
    from gym.launch.local import run_local, summary_table
    from gym.model.loading import ModelError
    from gym.train.errors import ResumeError

    try:
        from gym.eval import EvalError
    except ImportError:  # evaluation extra not installed: its stage reports itself
        EvalError = RuntimeError  # noqa: N806
    from gym.train.termination import Terminated, die_by_sigterm, sigterm_raises, where_a_rerun_resumes

    try:
        with sigterm_raises():
            outcomes = run_local(config, force=force, echo=_plain(console))
    except (DataError, ModelError, ResumeError, EvalError, DeployError, ValueError) as error:
        raise fail(str(error)) from None
    except Terminated:
        where = where_a_rerun_resumes(config.output_path / "checkpoints", config.train.resume)
        errors.print(
            f"stopped: gym launch received SIGTERM; {where}", markup=False, highlight=False, soft_wrap=True
        )
        die_by_sigterm()
    console.print(summary_table(config, outcomes))


def status(args: list[str] | None = CONFIG_AND_FLAGS) -> None:
    """Show the cloud jobs of a gym.toml's run (SkyPilot's job queue), with their recoveries."""
    from gym.launch.task import LaunchError

    config, _, _ = load_config_or_exit(args)
    if config.compute is not None and config.compute.provider == "hf-jobs":
        from gym.launch.hf_jobs.jobs import hf_status

        try:
            hf_status(config, echo=_plain(console))
        except LaunchError as error:
            raise fail(str(error)) from None
        return
    try:
        from gym.launch.cloud import cloud_status

        cloud_status(config, echo=_plain(console))
    except LaunchError as error:
        raise fail(str(error)) from None
    except ImportError as error:
        raise fail(f"gym status needs SkyPilot: pip install 'zoo-gym[cloud]' ({error.name})") from None


def logs(
    args: list[str] | None = CONFIG_AND_FLAGS,
    job_id: str | None = typer.Option(None, "--job-id", help="A job id from `gym status` (default: latest)."),
    follow: bool = typer.Option(True, "--follow/--no-follow", help="Keep streaming until the job ends."),
) -> None:
    """Stream the logs of a gym.toml's cloud run (the latest job unless --job-id)."""
    from gym.launch.task import LaunchError

    config, _, _ = load_config_or_exit(args)
    if config.compute is not None and config.compute.provider == "hf-jobs":
        from gym.launch.hf_jobs.jobs import hf_logs

        try:
            ended = hf_logs(config, job_id=job_id, follow=follow, echo=_plain(console))
        except LaunchError as error:
            raise fail(str(error)) from None
        if ended and "COMPLETED" not in ended:
            raise fail(ended)
        return
    if job_id is not None and not job_id.isdigit():
        raise fail(f"--job-id: SkyPilot job ids are numbers, got {job_id!r}")
    try:
        from gym.launch.cloud import cloud_logs

        code = cloud_logs(config, job_id=int(job_id) if job_id else None, follow=follow)
        if code:  # SkyPilot's exit code: 100 failed, 101 not ended, 102 not found, 103 cancelled
            from gym.launch.cloud import logs_outcome

            raise fail(logs_outcome(config, code, int(job_id) if job_id else None), code)
    except LaunchError as error:
        raise fail(str(error)) from None
    except ImportError as error:
        raise fail(f"gym logs needs SkyPilot: pip install 'zoo-gym[cloud]' ({error.name})") from None


def register(app: typer.Typer) -> None:
    app.command(context_settings=EXTRA_ARGS)(launch)
    app.command(context_settings=EXTRA_ARGS)(status)
    app.command(context_settings=EXTRA_ARGS)(logs)
