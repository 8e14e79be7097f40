"""The Action on Hugging Face Jobs (``[compute] provider = "hf-jobs"``): plan, launch, follow and cancel.

Only ``HF_TOKEN`` (the hf-token input) is needed: no cloud keys, no SkyPilot API server. The plan shows the
flavor, its price per hour and the job spec with secrets by name, and refuses before anything runs an
account that cannot pay for Jobs or a flavor the Hub does not offer. A launch runs the same stages as a
SkyPilot job (:func:`gym.launch.hf_jobs.jobs.launch_hf_job`); with ``wait`` the Action follows its log and
reads the eval results it prints, without ``wait`` the job reports back itself (``GYM_REPORT_TOKEN``).
The job carries the label ``gym-run`` = the config's scoped name, recorded in the sticky comment with the
job id: a later run on a fresh runner asks the Hub about exactly that job, and a newer approved commit
cancels it (never a job of another config or repository).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gym.launch.report.outcome import LaunchOutcome, PlanView

if TYPE_CHECKING:
    from action.launchers import LaunchRequest
    from gym.config import GymConfig
    from gym.launch.report.sticky import RunState

PROVIDER = "hf-jobs"
HF_TOKEN_INPUT = (
    "GYM_INPUT_HF_TOKEN"  # the hf-token input (action/main.py gives it to the launcher as HF_TOKEN)
)


def uses_hf_jobs(config: GymConfig) -> bool:
    return config.compute is not None and config.compute.provider == PROVIDER


def _plan_token(config: GymConfig) -> str | None:
    token_env = config.hub.token_env if config.hub else "HF_TOKEN"
    return os.environ.get(HF_TOKEN_INPUT) or os.environ.get(token_env) or None


def _account_notes(config: GymConfig) -> list[str]:
    """Ask the Hub whether the account can pay for Jobs and is offered the flavor; a refusal stops the plan."""
    from huggingface_hub import HfApi

    from gym.launch.hf_jobs.flavors import account_problem, hub_flavors
    from gym.launch.task import LaunchError

    compute = config.compute
    assert compute is not None
    token = _plan_token(config)
    if not token:
        return [
            "the account's credits and the flavor's availability are not checked: no Hub token in this step"
        ]
    api = HfApi(token=token)
    problem = account_problem(api)
    if problem:
        raise LaunchError(problem)
    offered = hub_flavors(api)
    if offered is None:
        return [
            "the Hub did not answer which Jobs flavors it offers: the launch asks again before it uploads"
        ]
    if compute.flavor not in offered:
        raise LaunchError(
            f"compute.flavor = {compute.flavor!r} is not offered to this account by Hugging Face Jobs "
            f"(it offers {', '.join(sorted(offered)) or 'nothing'})"
        )
    return []


def plan_view(config: GymConfig, flags: list[str], env: Mapping[str, str], notes: list[str]) -> PlanView:
    """The plan a reviewer sees for a Hugging Face job; raises ``LaunchError`` when it cannot launch."""
    from gym.launch.hf_jobs.flavors import price_line
    from gym.launch.hf_jobs.jobs import DEFAULT_TIMEOUT, build_spec
    from gym.launch.task import check_dataset_files, run_name, secret_specs

    compute = config.compute
    assert compute is not None
    check_dataset_files(config)  # a Git LFS pointer would be uploaded as the data
    account = _account_notes(config)
    name = run_name(config, env)
    token_env = config.hub.token_env if config.hub else "HF_TOKEN"
    secrets = ["HF_TOKEN", *(s.name for s in secret_specs(config) if s.name not in (token_env, "HF_TOKEN"))]
    staging = f"<you>/gym-staging-{config.project.name}"
    spec = build_spec(config, flags, staging, "<commit>", None, secrets, None, {"gym-run": name})
    hours = compute.max_runtime_hours
    if hours:
        runtime = f"{hours:g} h, the job's timeout; the Hub stops it there (`compute.max_runtime_hours`)"
    else:
        runtime = f"{DEFAULT_TIMEOUT}, the Hub's default timeout (`compute.max_runtime_hours` sets another)"
    if compute.checkpoint_volume:
        runtime += f"; a stopped job resumes on the next launch from `{compute.checkpoint_volume}`"
    return PlanView(
        target="cloud",
        provider=PROVIDER,
        flavor=compute.flavor,
        name=name,
        accelerators=[compute.flavor],
        use_spot=False,
        managed=True,
        num_nodes=1,
        price=price_line(compute.flavor, hours),
        max_runtime=runtime,
        secrets=secrets,
        notes=[*account, *notes],
        task_yaml="\n".join(spec.lines(hours)),
    )


def _token(request: LaunchRequest) -> str | None:
    config = request.config
    token_env = config.hub.token_env if config.hub else "HF_TOKEN"
    return request.env.get(token_env) or request.env.get("HF_TOKEN")


def launch(request: LaunchRequest) -> LaunchOutcome:
    """Submit the job; with ``wait``, follow its log to its end and bring its eval results back."""
    from action.launchers import _report_target
    from gym.launch.hf_jobs.follow import follow_job
    from gym.launch.hf_jobs.jobs import launch_hf_job

    target = None if request.wait else _report_target(request)
    job = launch_hf_job(
        request.config,
        request.config_path,
        dryrun=False,
        flags=request.flags,
        env=request.env,
        echo=request.echo,
        warn=request.echo,
        report_to=target.as_env() if target is not None else None,
        emit_results=request.wait,
    )
    what = f"Hugging Face job `{job.id}` on {request.config.compute.flavor}"  # type: ignore[union-attr]
    if not request.wait:
        later = "; the job posts its eval table here when it ends" if target is not None else ""
        return LaunchOutcome(job_id=job.id, detail=f"{what} submitted{later}")
    request.on_submitted(LaunchOutcome(job_id=job.id, detail=f"{what} submitted; following it"))
    request.echo(f"following Hugging Face job {job.id} until it ends")
    results, ended = follow_job(job.id, _token(request), request.echo)
    return LaunchOutcome(job_id=job.id, detail=f"{what}: {ended}", results=results)


class HfJobs:
    """:class:`action.launchers.JobControl` through the Hub's Jobs API, with the hf-token input's token."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._token = env.get(HF_TOKEN_INPUT) or env.get("HF_TOKEN") or None

    def status(self, state: RunState) -> tuple[str, bool] | None:
        from gym.launch.hf_jobs.follow import job_state

        return job_state(state.job_id, state.name, self._token)

    def cancel(self, state: RunState) -> None:
        from gym.launch.hf_jobs.follow import cancel_own_job

        cancel_own_job(state.job_id, state.name, self._token)
