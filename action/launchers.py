"""The seam between the action and a real run: a launcher takes a checked config and starts it.

:func:`default_launcher` is what the action uses: SkyPilot through :func:`gym.launch.cloud.launch_cloud`
(``cloud: true``), or the local stage runner :func:`gym.launch.local.run_local` on the runner itself
(``cloud: false``, e.g. a self-hosted GPU runner). Tests pass their own launcher to
:func:`action.main.main` and record the requests, so no test spends money or needs a GPU.

A launcher is handed the environment with secrets only when the policy decided to launch; nothing
else in the action reads a secret.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gym.launch.report.outcome import LaunchOutcome

if TYPE_CHECKING:
    from gym.config import GymConfig
    from gym.launch.report.job import ReportTarget
    from gym.launch.report.sticky import RunState


@dataclass
class LaunchRequest:
    config: GymConfig
    config_path: Path
    flags: list[str]
    cloud: bool
    env: Mapping[str, str]  # with secrets: the cloud run's are read from here
    echo: Callable[[str], None] = print
    labels: dict[str, str] = field(default_factory=dict)  # event facts, for launchers that tag runs
    wait: bool = False  # cloud: follow the job until it ends and bring its eval results back
    # Called once the job is submitted, before following it: the action records the job id in its
    # comment then, so a workflow run cancelled while it waits still leaves the job findable.
    on_submitted: Callable[[LaunchOutcome], None] = lambda launch: None


Launcher = Callable[[LaunchRequest], LaunchOutcome]


def _results(config: GymConfig) -> dict | None:
    """eval_results.json with the promotion gates' outcome (``"gates"``) when the run had gates."""
    from gym.launch.results import run_results

    try:
        return run_results(config.output_path)
    except (OSError, ValueError):
        return None


def launch_on_cloud(request: LaunchRequest) -> LaunchOutcome:
    """Submit to SkyPilot (or Hugging Face Jobs: :mod:`action.hf_jobs`); with ``wait``, follow the job's
    log to its end and read its eval results.

    The results travel back as one marked line of the job's log (see :mod:`gym.launch.results`).
    """
    compute = getattr(request.config, "compute", None)
    if compute is not None and compute.provider == "hf-jobs":
        from action.hf_jobs import launch

        return launch(request)
    from gym.launch.cloud import how_job_ended, launch_cloud, wait_for_results

    target = None if request.wait else _report_target(request)
    result = launch_cloud(
        request.config,
        request.config_path,
        dryrun=False,
        flags=request.flags,
        env=request.env,
        echo=request.echo,
        warn=request.echo,
        report_to=target.as_env() if target is not None else None,
    )
    kind = "managed job" if result.managed else "cluster job"
    job = str(result.job_id) if result.job_id is not None else None
    if not (request.wait and result.job_id is not None):
        later = "; the job posts its eval table here when it ends" if target is not None else ""
        return LaunchOutcome(job_id=job, detail=f"SkyPilot {kind} `{result.name}` submitted{later}")
    request.on_submitted(
        LaunchOutcome(job_id=job, detail=f"SkyPilot {kind} `{result.name}` submitted; following it")
    )
    request.echo(f"following SkyPilot {kind} {job} until it finishes")
    results = wait_for_results(request.config, result.job_id, managed=result.managed)
    ended = None if results else how_job_ended(result.name, result.job_id, managed=result.managed)
    detail = f"SkyPilot {kind} `{result.name}` finished" + ("" if results else " without eval results")
    return LaunchOutcome(job_id=job, detail=f"SkyPilot {kind} `{result.name}`: {ended}" if ended else detail,
                         results=results)  # fmt: skip


def report_target(env: Mapping[str, str], config_relative: str) -> ReportTarget | None:
    """Where the job should report, when the workflow gave it a report token (see gym/launch/report/job.py)."""
    from gym.launch.report.job import TOKEN_ENV, ReportTarget

    if not env.get(TOKEN_ENV):
        return None
    from action.context import Context

    context = Context.from_env(env)
    pull = context.pull_request
    sha = str(
        (pull or {}).get("head", {}).get("sha") or context.event.get("after") or context.extra.get("sha")
    )
    from gym.launch.report.sticky import ACTIONS_BOT

    return ReportTarget(
        api_url=context.api_url, repository=context.repository, sha=sha, config=config_relative,
        pull=context.pull_number, run_url=context.run_url,
        author=context.inputs.comment_author or ACTIONS_BOT,
    )  # fmt: skip


def _report_target(request: LaunchRequest) -> ReportTarget | None:
    """With ``wait: false`` and a ``GYM_REPORT_TOKEN``, the job reports back itself (gym/launch/report/job.py)."""
    workspace = Path(request.env.get("GITHUB_WORKSPACE", "") or ".").resolve()
    try:
        relative = request.config_path.resolve().relative_to(workspace).as_posix()
    except ValueError:
        relative = request.config_path.name
    return report_target(request.env, relative)


def launch_here(request: LaunchRequest) -> LaunchOutcome:
    """train → eval → card → push + Space on this runner; the eval table is ready when it returns."""
    import os

    from gym.eval.gates import GatesFailed
    from gym.launch.local import run_local
    from gym.launch.task import secret_specs

    # The run reads its secrets (the hf-token input's HF_TOKEN, ...) from the environment, as on a node.
    for spec in secret_specs(request.config):
        if request.env.get(spec.name):
            os.environ[spec.name] = request.env[spec.name]
    try:
        outcomes = run_local(request.config, echo=request.echo)
    except GatesFailed as failed:  # evaluated, not pushed: the comment and the status show why
        return LaunchOutcome(
            detail=f"ran on this runner; not promoted: {failed}", results=_results(request.config)
        )
    done = ", ".join(f"{name} {o.status}" for name, o in outcomes.items())
    from gym.gitops.published import published_line

    published = published_line(request.config)  # the Hub commit (and Space commit) this run made
    detail = f"ran on this runner: {done}" + (f"; {published}" if published else "")
    return LaunchOutcome(detail=detail, results=_results(request.config))


def default_launcher(request: LaunchRequest) -> LaunchOutcome:
    return launch_on_cloud(request) if request.cloud else launch_here(request)


class JobControl(Protocol):
    """What the action asks about a job it launched earlier (recorded in its sticky comment)."""

    def status(self, state: RunState) -> tuple[str, bool] | None:
        """The job's status now and whether it has ended; None when the job is not found."""
        ...

    def cancel(self, state: RunState) -> None:
        """Stop the job; raises :class:`gym.launch.task.LaunchError` when it cannot."""
        ...


class SkyPilotJobs:
    """:class:`JobControl` through SkyPilot's SDK (``sky.jobs.queue_v2``, ``sky.jobs.cancel``).

    A job is the one the comment recorded only when SkyPilot has its id *and* its name (the name encodes
    the repository and the config: :func:`gym.launch.task.run_name`); a job of another name is never
    cancelled. Without a team API server this run talks to a fresh local server that cannot see jobs of
    earlier runs: a recorded job it does not find may still run, so asking about it (and so launching a
    replacement) is refused with :func:`gym.launch.sky_server.untracked_sentence`.
    """

    def status(self, state: RunState) -> tuple[str, bool] | None:
        from gym.launch.cloud import job_status

        if not state.job_id.isdigit():  # a run on the runner itself: it ended with its workflow run
            return ("ended", True)
        found = job_status(state.name, int(state.job_id), managed=state.managed)
        if found is None:
            self._refuse_untracked(state)
        return found

    def cancel(self, state: RunState) -> None:
        from gym.launch.cloud import cancel_job, job_status

        if not state.job_id.isdigit():
            return
        if job_status(state.name, int(state.job_id), managed=state.managed) is None:
            self._refuse_untracked(state)
            return  # gone (or its id is another job's now): nothing of ours to cancel
        cancel_job(state.name, int(state.job_id), managed=state.managed)

    @staticmethod
    def _refuse_untracked(state: RunState) -> None:
        from gym.launch import sky_server
        from gym.launch.task import LaunchError

        if not sky_server.is_team_server():
            raise LaunchError(sky_server.untracked_sentence(state.job_id, state.name, state.sha))


class ProviderJobs:
    """:class:`JobControl` for the provider that ran the recorded job (``RunState.provider``)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self._sky = SkyPilotJobs()

    def _for(self, state: RunState) -> JobControl:
        if state.provider == "hf-jobs":
            from action.hf_jobs import HfJobs

            return HfJobs(self._env)
        return self._sky

    def status(self, state: RunState) -> tuple[str, bool] | None:
        return self._for(state).status(state)

    def cancel(self, state: RunState) -> None:
        self._for(state).cancel(state)
